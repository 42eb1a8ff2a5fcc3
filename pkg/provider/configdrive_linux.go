package provider

import "golang.org/x/sys/unix"

// mountReadOnlyFlags mount a config drive read-only, without devices, setuid or exec.
const mountReadOnlyFlags = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC

func defaultMount(source, target, fstype string, flags uintptr, data string) error {
	return unix.Mount(source, target, fstype, flags, data)
}

func defaultUnmount(target string, flags int) error { return unix.Unmount(target, flags) }
