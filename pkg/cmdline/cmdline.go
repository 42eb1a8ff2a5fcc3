// Package cmdline parses the kernel command line the way the kernel splits it.
package cmdline

import (
	"fmt"
	"os"
	"strings"

	"github.com/booty-dev/booty/pkg/redact"
)

// Keys booty reads.
const (
	KeyConfig  = "booty.config" // URL or path of the MachineConfig
	KeyServer  = "booty.server" // bootyd base URL, for the by-MAC provider
	KeyDebug   = "booty.debug"  // comma-separated debug options; "hold" holds the machine on failure
	KeyIP      = "ip"           // dracut/kernel ip= network configuration
	KeyConsole = "console"      // consoles, may repeat
	// KeyInsecureHTTP=1 allows plain http:// URLs (booty.server=,
	// booty.config=, image and report URLs); without it they are refused.
	KeyInsecureHTTP = "booty.insecure-http"
)

// DefaultPath is where Read reads by default.
const DefaultPath = "/proc/cmdline"

// Param is one kernel command line parameter: Key=Value, or a flag (HasValue false).
type Param struct {
	Key      string
	Value    string
	HasValue bool
}

// Cmdline is a parsed kernel command line, in order. Parameters after a
// lone "--" belong to init and are not part of it.
type Cmdline struct {
	// Raw is the command line as given, trimmed.
	Raw    string
	Params []Param
}

// Parse splits a kernel command line the way the kernel does:
// parameters are separated by whitespace; double quotes group spaces, either
// around the value (key="a b") or around the whole parameter ("key=a b");
// the quotes are removed. An unterminated quote runs to the end of the line.
func Parse(s string) Cmdline {
	cl := Cmdline{Raw: strings.TrimSpace(s)}
	for _, word := range splitCmdline(s) {
		if word == "--" {
			break
		}
		k, v, ok := strings.Cut(word, "=")
		cl.Params = append(cl.Params, Param{Key: k, Value: v, HasValue: ok})
	}
	return cl
}

// Read reads and parses the command line at path (DefaultPath when empty);
// it fails only when the file cannot be read.
func Read(path string) (Cmdline, error) {
	if path == "" {
		path = DefaultPath
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Cmdline{}, fmt.Errorf("read kernel command line %s: %w", path, err)
	}
	return Parse(string(b)), nil
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

// HoldRequested reports whether the command line asks to hold the machine
// instead of rebooting after a failure or panic: booty.debug=hold (hold may
// be one of several comma-separated options).
func (c Cmdline) HoldRequested() bool {
	for _, v := range c.GetAll(KeyDebug) {
		for _, f := range strings.Split(v, ",") {
			if f == "hold" {
				return true
			}
		}
	}
	return false
}

// Redact returns the command line raw fit for a log: parameters whose
// names suggest a secret (token, pass, secret) lose their value, and URLs
// in the others lose their user info and query (pkg/redact), so
// booty.config=https://user:pw@host/c.yaml?access_token=X is logged as
// booty.config=https://<redacted>@host/c.yaml?<redacted>.
func Redact(raw string) string {
	f := strings.Fields(raw)
	for i, p := range f {
		k, _, ok := strings.Cut(p, "=")
		lk := strings.ToLower(k)
		if ok && (strings.Contains(lk, "token") || strings.Contains(lk, "pass") || strings.Contains(lk, "secret")) {
			f[i] = k + "=<redacted>"
			continue
		}
		f[i] = redact.Text(p)
	}
	return strings.Join(f, " ")
}
