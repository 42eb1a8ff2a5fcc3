package server

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
)

func sum(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

// TestAgentBoot: GET /v1/agent/boot names the iPXE kernel and initrd under
// the public URL with their sizes and digests and the iPXE arguments; a
// changed file gets its new digest; without a public URL the URLs are
// /files/ paths; a missing initrd or no files directory is 404 naming it.
func TestAgentBoot(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.IPXECmdline = "console=ttyS0,115200 quiet" })
	writeFile(t, filepath.Join(e.files, DefaultIPXEKernel), "kernel bytes")
	writeFile(t, filepath.Join(e.files, DefaultIPXEInitrd), "initrd bytes, first version")
	get := func(e *testEnv) (int, api.AgentBoot, string) {
		t.Helper()
		code, _, body := e.do(t, "GET", "/v1/agent/boot", "", nil, nil)
		var b api.AgentBoot
		if code == http.StatusOK {
			if err := json.Unmarshal([]byte(body), &b); err != nil {
				t.Fatalf("answer %q: %v", body, err)
			}
		}
		return code, b, body
	}
	code, b, body := get(e)
	want := api.AgentBoot{
		Kernel:  api.BootFile{URL: "http://bootyd.test:8080/files/vmlinuz", SHA256: sum("kernel bytes"), Size: 12},
		Initrd:  api.BootFile{URL: "http://bootyd.test:8080/files/initramfs.img", SHA256: sum("initrd bytes, first version"), Size: 27},
		Cmdline: "console=ttyS0,115200 quiet",
	}
	if code != http.StatusOK || b != want {
		t.Fatalf("GET /v1/agent/boot: %d %s, want %+v", code, body, want)
	}

	// A new version of the initrd (another size and mtime) is hashed again.
	p := filepath.Join(e.files, DefaultIPXEInitrd)
	writeFile(t, p, "initrd bytes, second")
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(p, later, later); err != nil {
		t.Fatal(err)
	}
	if _, b, _ := get(e); b.Initrd.SHA256 != sum("initrd bytes, second") || b.Initrd.Size != 20 {
		t.Fatalf("after the change: %+v", b.Initrd)
	}

	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if code, _, body := get(e); code != http.StatusNotFound || !strings.Contains(apiError(t, body), `agent initrd "initramfs.img"`) {
		t.Fatalf("missing initrd: %d %s", code, body)
	}

	rel := newEnv(t, func(o *Options) { o.PublicURL = "" })
	writeFile(t, filepath.Join(rel.files, DefaultIPXEKernel), "k")
	writeFile(t, filepath.Join(rel.files, DefaultIPXEInitrd), "i")
	if code, b, body := get(rel); code != http.StatusOK || b.Kernel.URL != "/files/vmlinuz" || b.Initrd.URL != "/files/initramfs.img" {
		t.Fatalf("without a public URL: %d %s", code, body)
	}

	none := newEnv(t, func(o *Options) { o.FilesDir = "" })
	if code, _, body := get(none); code != http.StatusNotFound || !strings.Contains(apiError(t, body), "no --files") {
		t.Fatalf("without files: %d %s", code, body)
	}
}
