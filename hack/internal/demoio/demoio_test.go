package demoio

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Whole writes from many goroutines arrive whole.
func TestLockedWriter(t *testing.T) {
	var b bytes.Buffer
	w := &LockedWriter{W: &b}
	line := strings.Repeat("x", 100) + "\n"
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				w.Write([]byte(line))
			}
		})
	}
	wg.Wait()
	for i, l := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		if l+"\n" != line {
			t.Fatalf("line %d torn: %q", i, l)
		}
	}
	if b.Len() != 800*len(line) {
		t.Fatalf("%d bytes, want %d", b.Len(), 800*len(line))
	}
}

func TestFileSize(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, make([]byte, 1234), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := FileSize(p); n != 1234 {
		t.Fatalf("FileSize = %d", n)
	}
	if n := FileSize(p + ".missing"); n != 0 {
		t.Fatalf("missing: %d", n)
	}
}
