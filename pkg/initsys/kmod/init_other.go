//go:build !linux

package kmod

import "errors"

func initModuleFile(path, params string) error { return errors.ErrUnsupported }
