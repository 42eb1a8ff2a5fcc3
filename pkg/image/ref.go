package image

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"sync"

	"github.com/booty-dev/booty/pkg/httpfetch"
)

// SourceSchemes are the URL schemes an image source may have (besides a
// plain path): config validation and Write use this one list.
var SourceSchemes = []string{"http", "https", "file", "oci", "oci+http"}

// BmapSchemes are the URL schemes of a bmap file.
var BmapSchemes = []string{"http", "https", "file"}

// CheckSource is the grammar of an image source URL, asked by config
// validation and by Write before it opens the source: an OCI reference
// (ParseOCIRef), else an http, https or file URL as httpfetch.ParseURL
// reads it. Whether plain http may be used is the run's opt-in, not part
// of the grammar.
func CheckSource(s string) error {
	if strings.HasPrefix(s, "oci://") || strings.HasPrefix(s, "oci+http://") {
		_, err := ParseOCIRef(s)
		return err
	}
	_, err := httpfetch.ParseURL(s, SourceSchemes...)
	return err
}

var (
	// Compiled on first use: {0,127} alone is some 2,000 allocations,
	// 16 ms of the agent's start under emulation when done at init.
	ociRepoRE   = lazyRE(`^[a-z0-9]+([._-]+[a-z0-9]+)*(/[a-z0-9]+([._-]+[a-z0-9]+)*)*$`)
	ociTagRE    = lazyRE(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)
	ociDigestRE = lazyRE(`^sha256:[0-9a-f]{64}$`)
)

// OCIRef is a parsed oci://REGISTRY/REPOSITORY[:TAG]@sha256:HEX reference
// (oci+http:// for a plain-HTTP registry).
type OCIRef struct {
	PlainHTTP  bool
	Registry   string // host[:port]
	Repository string
	Tag        string // informational: the digest decides what is fetched
	Digest     string // sha256:HEX of the manifest
}

// ParseOCIRef parses an OCI image reference. The manifest digest is
// required: a tag alone names whatever the registry serves today, which
// nothing could verify. It is the one grammar of OCI references, used by
// config validation and by Write.
func ParseOCIRef(s string) (OCIRef, error) {
	var r OCIRef
	rest, ok := strings.CutPrefix(s, "oci://")
	if !ok {
		if rest, ok = strings.CutPrefix(s, "oci+http://"); !ok {
			return r, fmt.Errorf("oci reference %q: want oci://REGISTRY/REPOSITORY[:TAG]@sha256:HEX", s)
		}
		r.PlainHTTP = true
	}
	host, repo, ok := strings.Cut(rest, "/")
	if !ok || host == "" || repo == "" {
		return r, fmt.Errorf("oci reference %q: want oci://REGISTRY/REPOSITORY[:TAG]@sha256:HEX", s)
	}
	if u, err := url.Parse("//" + host); err != nil || u.Host != host || strings.ContainsAny(host, "@/ ?#") {
		return r, fmt.Errorf("oci reference %q: bad registry %q", s, host)
	}
	r.Registry = host
	name, digest, hasDigest := strings.Cut(repo, "@")
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		r.Tag, name = name[i+1:], name[:i]
		if !ociTagRE().MatchString(r.Tag) {
			return r, fmt.Errorf("oci reference %q: bad tag %q", s, r.Tag)
		}
	}
	if !ociRepoRE().MatchString(name) {
		return r, fmt.Errorf("oci reference %q: bad repository %q (lower-case letters, digits and . _ - separators)", s, name)
	}
	r.Repository = name
	switch {
	case !hasDigest:
		return r, fmt.Errorf("oci reference %q: a tag alone is not verifiable, pin the manifest digest: %s/%s@sha256:HEX", s, host, name)
	case !ociDigestRE().MatchString(digest):
		return r, fmt.Errorf("oci reference %q: bad digest %q, want sha256: and 64 lower-case hex digits", s, digest)
	}
	r.Digest = digest
	return r, nil
}

// lazyRE returns a function that compiles expr on its first call.
func lazyRE(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
