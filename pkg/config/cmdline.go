package config

import (
	"fmt"
	"os"
	"strings"
)

// Kernel command line keys booty reads.
const (
	CmdlineConfig  = "booty.config" // URL or path of the MachineConfig
	CmdlineServer  = "booty.server" // bootyd base URL, for the by-MAC provider
	CmdlineDebug   = "booty.debug"  // flag: verbose logs
	CmdlineIP      = "ip"           // dracut/kernel ip= network configuration
	CmdlineConsole = "console"      // consoles, may repeat
)

// DefaultCmdlinePath is where ReadCmdline reads by default.
const DefaultCmdlinePath = "/proc/cmdline"

// Param is one kernel command line parameter: Key=Value, or a flag (HasValue false).
type Param struct {
	Key      string
	Value    string
	HasValue bool
}

// Cmdline is a parsed kernel command line, in order. Parameters after a
// lone "--" belong to init and are not part of it.
type Cmdline struct {
	Params []Param
}

// ParseCmdline splits a kernel command line the way the kernel does:
// parameters are separated by whitespace; double quotes group spaces, either
// around the value (key="a b") or around the whole parameter ("key=a b");
// the quotes are removed. An unterminated quote runs to the end of the line.
func ParseCmdline(s string) Cmdline {
	var cl Cmdline
	for _, word := range splitCmdline(s) {
		if word == "--" {
			break
		}
		k, v, ok := strings.Cut(word, "=")
		cl.Params = append(cl.Params, Param{Key: k, Value: v, HasValue: ok})
	}
	return cl
}

// ReadCmdline reads and parses the command line at path (DefaultCmdlinePath
// when empty); it fails only when the file cannot be read.
func ReadCmdline(path string) (Cmdline, error) {
	if path == "" {
		path = DefaultCmdlinePath
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Cmdline{}, fmt.Errorf("read kernel command line %s: %w", path, err)
	}
	return ParseCmdline(string(b)), nil
}

func splitCmdline(s string) []string {
	var words []string
	var cur strings.Builder
	inQuote, inWord := false, false
	for _, r := range s {
		switch {
		case r == '"':
			inQuote = !inQuote
			inWord = true
		case !inQuote && (r == ' ' || r == '\t' || r == '\n' || r == '\r'):
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// Get returns the value of the last parameter named key (the kernel's
// "last one wins"), and whether it is present at all; a flag gives "", true.
func (c Cmdline) Get(key string) (string, bool) {
	for i := len(c.Params) - 1; i >= 0; i-- {
		if c.Params[i].Key == key {
			return c.Params[i].Value, true
		}
	}
	return "", false
}

// GetAll returns the values of every parameter named key, in order
// (console= may repeat; the last one is the primary console).
func (c Cmdline) GetAll(key string) []string {
	var out []string
	for _, p := range c.Params {
		if p.Key == key {
			out = append(out, p.Value)
		}
	}
	return out
}

// Flag reports whether key is set to a true value: present as a bare flag,
// or with a value other than 0, false, no or off.
func (c Cmdline) Flag(key string) bool {
	v, ok := c.Get(key)
	if !ok {
		return false
	}
	switch strings.ToLower(v) {
	case "0", "false", "no", "off":
		return false
	}
	return true
}

// String writes the command line back, quoting values that hold spaces.
func (c Cmdline) String() string {
	parts := make([]string, len(c.Params))
	for i, p := range c.Params {
		switch {
		case !p.HasValue:
			parts[i] = p.Key
		case strings.ContainsAny(p.Value, " \t"):
			parts[i] = p.Key + `="` + p.Value + `"`
		default:
			parts[i] = p.Key + "=" + p.Value
		}
	}
	return strings.Join(parts, " ")
}
