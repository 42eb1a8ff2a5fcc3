package main

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestPprofListen: --debug-pprof-listen serves the heap profile on its own
// loopback listener, and the API listener does not.
func TestPprofListen(t *testing.T) {
	d := startBootyd(t, "--insecure-http", "--listen", "127.0.0.1:0", "--state-dir", t.TempDir(),
		"--debug-pprof-listen", "127.0.0.1:0")
	m := regexp.MustCompile(`msg="pprof profiles served" addr=(\S+)`).FindStringSubmatch(d.stderr.String())
	if m == nil {
		t.Fatalf("bootyd did not log the pprof address:\n%s", d.stderr.String())
	}
	c := &http.Client{Timeout: 30 * time.Second}
	code, body := get(t, c, "http://"+m[1]+"/debug/pprof/heap?debug=1")
	if code != http.StatusOK || !strings.Contains(body, "heap profile") {
		t.Fatalf("pprof heap: %d %.200q", code, body)
	}
	if code, _ := get(t, c, "http://"+d.addr+"/debug/pprof/heap"); code == http.StatusOK {
		t.Fatal("the API listener serves pprof")
	}
}
