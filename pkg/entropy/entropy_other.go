//go:build !linux

package entropy

// kernelReady: other systems have no CRNG start-up gap that matters here.
func kernelReady() (bool, error) { return true, nil }

func kernelKick() {}
