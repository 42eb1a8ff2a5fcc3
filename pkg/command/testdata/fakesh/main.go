// Command fakesh stands in for /bin/sh inside a test root: it reports
// what it sees (arguments, working directory, PATH, the root's marker
// file) and exits with the code given as "-c exit N".
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

func main() {
	wd, _ := os.Getwd()
	marker, err := os.ReadFile("/booty-chroot-marker")
	if err != nil {
		marker = []byte("missing")
	}
	fmt.Printf("args=%s\nwd=%s\npath=%s\nmarker=%s\n", strings.Join(os.Args[1:], " "), wd, os.Getenv("PATH"), strings.TrimSpace(string(marker)))
	if len(os.Args) == 3 && strings.HasPrefix(os.Args[2], "exit ") {
		code, _ := strconv.Atoi(strings.TrimPrefix(os.Args[2], "exit "))
		fmt.Fprintf(os.Stderr, "failing on purpose with %d\n", code)
		os.Exit(code)
	}
}
