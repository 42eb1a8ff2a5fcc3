//go:build !linux

package bootloader

import "os"

// makeMutable only checks that path exists: immutable flags are Linux's.
func makeMutable(path string) error {
	_, err := os.Stat(path)
	return err
}

func isEFIVarFS(string) bool { return false }
