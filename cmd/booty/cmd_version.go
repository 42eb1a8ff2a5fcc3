package main

import (
	"fmt"
	"runtime"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func init() {
	register(command{name: "version", summary: "print the version", run: func([]string) int {
		fmt.Printf("booty %s %s/%s %s\n", version, runtime.GOOS, runtime.GOARCH, runtime.Version())
		return 0
	}})
}
