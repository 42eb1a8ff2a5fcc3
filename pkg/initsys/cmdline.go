package initsys

import "strings"

// Cmdline is a parsed kernel command line: the parameters in order.
type Cmdline struct {
	Raw    string
	Params []Param
}

// Param is one "key=value" or bare "key" parameter.
type Param struct {
	Key, Value string
	HasValue   bool
}

// ParseCmdline splits a kernel command line the way the kernel does:
// parameters separated by whitespace, double quotes group a value with
// spaces (and are removed), everything after a lone "--" belongs to init
// and is dropped.
func ParseCmdline(s string) Cmdline {
	c := Cmdline{Raw: strings.TrimSpace(s)}
	var fields []string
	var cur strings.Builder
	inQuote, have := false, false
	for _, r := range s {
		switch {
		case r == '"':
			inQuote = !inQuote
			have = true
		case !inQuote && (r == ' ' || r == '\t' || r == '\n'):
			if have {
				fields = append(fields, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if have {
		fields = append(fields, cur.String())
	}
	for _, f := range fields {
		if f == "--" {
			break
		}
		k, v, ok := strings.Cut(f, "=")
		c.Params = append(c.Params, Param{Key: k, Value: v, HasValue: ok})
	}
	return c
}

// Get returns the value of the last parameter named key, as the kernel
// lets the last one win, and whether it is present at all.
func (c Cmdline) Get(key string) (string, bool) {
	val, found := "", false
	for _, p := range c.Params {
		if p.Key == key {
			val, found = p.Value, true
		}
	}
	return val, found
}

// All returns the values of every parameter named key, in order.
func (c Cmdline) All(key string) []string {
	var out []string
	for _, p := range c.Params {
		if p.Key == key {
			out = append(out, p.Value)
		}
	}
	return out
}

// HoldRequested reports whether the command line asks to hold the machine
// instead of rebooting after a failure: booty.debug=hold.
func (c Cmdline) HoldRequested() bool {
	for _, v := range c.All("booty.debug") {
		for _, f := range strings.Split(v, ",") {
			if f == "hold" {
				return true
			}
		}
	}
	return false
}
