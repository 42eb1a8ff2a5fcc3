package initsys

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// ConsoleNames returns the device names of the console= parameters in
// order ("ttyS0" for "console=ttyS0,115200n8"). The kernel makes the last
// one /dev/console, the primary. Entries without a device node of that
// name (earlycon-style "uart8250,io,0x3f8", "null") are dropped.
func ConsoleNames(c Cmdline) []string {
	var out []string
	seen := map[string]bool{}
	for _, v := range c.GetAll("console") {
		name, _, _ := strings.Cut(v, ",")
		if name == "" || name == "null" || strings.HasPrefix(name, "uart") || strings.Contains(name, "/") {
			continue
		}
		if seen[name] {
			// Keep the later position: it decides the primary.
			for i, n := range out {
				if n == name {
					out = append(out[:i], out[i+1:]...)
					break
				}
			}
		}
		seen[name] = true
		out = append(out, name)
	}
	return out
}

// Consoles fans writes out to every console device the kernel was told
// about, so the agent's log shows on serial and screen alike.
type Consoles struct {
	// Names are the device names written to, in command-line order.
	Names []string
	// Primary is the last console= device, or "console" for the default.
	Primary string

	mu    sync.Mutex
	files []*os.File
}

// OpenConsoles opens devDir/<name> write-only for each name. With no names
// it opens devDir/console. A device that cannot be opened is skipped and
// its error returned joined with the others; the result is nil only when
// no console could be opened at all.
func OpenConsoles(devDir string, names []string) (*Consoles, error) {
	if len(names) == 0 {
		names = []string{"console"}
	}
	c := &Consoles{Primary: names[len(names)-1]}
	var errs []error
	for _, n := range names {
		f, err := os.OpenFile(filepath.Join(devDir, n), os.O_WRONLY|syscallNoCTTY, 0)
		if err != nil {
			errs = append(errs, fmt.Errorf("open console %s: %w", n, err))
			continue
		}
		c.Names = append(c.Names, n)
		c.files = append(c.files, f)
	}
	if len(c.files) == 0 {
		return nil, errors.Join(append(errs, errors.New("no console could be opened"))...)
	}
	return c, errors.Join(errs...)
}

// Write writes p to every console. A console that fails is skipped; Write
// fails only when all of them fail.
func (c *Consoles) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, f := range c.files {
		if _, err := f.Write(p); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == len(c.files) && len(errs) > 0 {
		return 0, errors.Join(errs...)
	}
	return len(p), nil
}

// Close closes all console devices.
func (c *Consoles) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, f := range c.files {
		errs = append(errs, f.Close())
	}
	c.files = nil
	return errors.Join(errs...)
}

var _ io.Writer = (*Consoles)(nil)
