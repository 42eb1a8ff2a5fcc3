package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/booty-dev/booty/pkg/disk"
)

// parseFlags parses args into fs. It returns -1 to go on, or the exit
// status: 0 after --help, 2 after a usage error, which it prints naming the
// flag and what it accepts, with a pointer to --help (pflag prints nothing
// itself under ContinueOnError).
func parseFlags(fs *pflag.FlagSet, args []string, stderr io.Writer, cmd string) int {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return -1
	case errors.Is(err, pflag.ErrHelp):
		return 0
	}
	fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", cmd, err, cmd)
	return 2
}

// sizeValue is a byte-size flag with the suffixes of disk.rootPartitionSize
// ("64M", "20G", "1.5T", "4096"), parsed by disk.ParseSize.
type sizeValue int64

func (s *sizeValue) String() string {
	if *s == 0 {
		return ""
	}
	return fmt.Sprint(int64(*s))
}

func (s *sizeValue) Set(v string) error {
	n, err := disk.ParseSize(v)
	if err != nil {
		return fmt.Errorf("want a size like 64M, 20G or 4096 (bytes): %w", err)
	}
	*s = sizeValue(n)
	return nil
}

func (s *sizeValue) Type() string { return "size" }
