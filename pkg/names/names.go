// Package names holds the one grammar of each name booty writes into an
// installed OS: host names (RFC 1123), Kubernetes node labels and the
// kubelet's provider ID. config.Validate and the configurator both call
// these, so a config that validates is one the configurator accepts.
package names

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
)

var (
	// Compiled on first use, not at the agent's start (under emulation
	// {0,61} alone is 6 ms there).
	labelNameRE   = lazyRE(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
	labelPrefixRE = lazyRE(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	// providerIDRE: what a cloud provider ID ("aws:///zone/id",
	// "metal3://ns/name/uid") is made of, and nothing a shell or a systemd
	// drop-in would interpret (quotes, $, backticks, whitespace).
	providerIDRE = lazyRE(`^[A-Za-z0-9._:/@+=~-]+$`)
)

// Hostname checks an RFC 1123 host name: dot-separated labels of 1-63
// letters, digits and inner hyphens, at most 253 characters.
func Hostname(h string) error {
	if len(h) > 253 {
		return fmt.Errorf("%q is longer than 253 characters", truncate(h, 40))
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" {
			return fmt.Errorf("%q has an empty label", h)
		}
		if len(label) > 63 {
			return fmt.Errorf("%q has a label longer than 63 characters", truncate(h, 80))
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("%q is not an RFC 1123 host name: a label starts or ends with '-'", h)
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return fmt.Errorf("%q is not an RFC 1123 host name: only letters, digits, '-' and '.' are allowed", h)
			}
		}
	}
	return nil
}

// LabelKey checks a Kubernetes label key: an optional DNS-subdomain prefix
// and "/", then a name of at most 63 characters.
func LabelKey(k string) error {
	name := k
	if prefix, n, ok := strings.Cut(k, "/"); ok {
		if len(prefix) > 253 || !labelPrefixRE().MatchString(prefix) {
			return fmt.Errorf("key %q has an invalid prefix %q (want a DNS subdomain)", k, prefix)
		}
		name = n
	}
	if !labelNameRE().MatchString(name) {
		return fmt.Errorf("key %q is not a valid label name (at most 63 of A-Z a-z 0-9 - _ ., alphanumeric at both ends)", k)
	}
	return nil
}

// LabelValue checks a Kubernetes label value: empty, or a name as LabelKey's.
func LabelValue(v string) error {
	if v != "" && !labelNameRE().MatchString(v) {
		return fmt.Errorf("value %q is not a valid label value (at most 63 of A-Z a-z 0-9 - _ ., alphanumeric at both ends)", v)
	}
	return nil
}

// ProviderID checks a kubelet --provider-id value.
func ProviderID(s string) error {
	if !providerIDRE().MatchString(s) {
		return fmt.Errorf("provider ID %q has characters other than letters, digits and ._:/@+=~-", s)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// lazyRE returns a function that compiles expr on its first call.
func lazyRE(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
