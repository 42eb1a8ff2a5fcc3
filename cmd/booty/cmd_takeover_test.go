package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/booty-dev/booty/pkg/takeover"
)

// TestTakeoverFlags: --help explains and exits 0; usage errors exit 2
// naming the flag; a takeover refused by the package exits 1 with its
// reason on stderr and nothing on stdout. None gets as far as bootyd.
func TestTakeoverFlags(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	os.WriteFile(notPEM, []byte("garbage"), 0o644)
	notRoot := func(o *takeover.Options) { o.Geteuid = func() int { return 1000 } }
	for _, tc := range []struct {
		args   []string
		adjust func(*takeover.Options)
		rc     int
		want   string
	}{
		{[]string{"--help"}, nil, 0, "kexec_file_load"},
		{nil, nil, 2, "--server is required"},
		{[]string{"--server", "https://b:8443", "extra"}, nil, 2, `unexpected argument "extra"`},
		{[]string{"--bogus"}, nil, 2, "unknown flag: --bogus"},
		{[]string{"--server", "http://10.0.0.1:8080"}, nil, 1, "booty takeover: --server: http://10.0.0.1:8080: TLS is required"},
		{[]string{"--server", "https://b:8443", "--ca-cert", filepath.Join(dir, "none.pem")}, nil, 1, "read --ca-cert"},
		{[]string{"--server", "https://b:8443", "--ca-cert", notPEM}, nil, 1, "booty takeover: CA certificate: no PEM certificate found"},
		{[]string{"--server", "http://10.0.0.1:8080", "--insecure-http"}, notRoot, 1, "booty takeover: running as uid 1000"},
	} {
		var out, errb bytes.Buffer
		rc := runTakeover(tc.args, &out, &errb, tc.adjust)
		if rc != tc.rc || !strings.Contains(errb.String(), tc.want) || out.Len() != 0 {
			t.Errorf("booty takeover %q: exit %d, stderr %q, stdout %q; want exit %d and %q", tc.args, rc, errb.String(), out.String(), tc.rc, tc.want)
		}
	}
}
