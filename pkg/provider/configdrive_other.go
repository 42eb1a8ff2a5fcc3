//go:build !linux

package provider

import "errors"

const mountReadOnlyFlags = 1

func defaultMount(source, target, fstype string, flags uintptr, data string) error {
	return errors.New("mount: only supported on linux")
}

func defaultUnmount(target string, flags int) error {
	return errors.New("unmount: only supported on linux")
}
