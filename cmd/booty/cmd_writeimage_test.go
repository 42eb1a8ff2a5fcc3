package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func TestRunWriteImage(t *testing.T) {
	dir := t.TempDir()
	img := bytes.Repeat([]byte("booty write-image test image "), 200000) // ~5.8 MB
	var comp bytes.Buffer
	zw, _ := zstd.NewWriter(&comp)
	zw.Write(img)
	zw.Close()
	src := filepath.Join(dir, "image.zst")
	if err := os.WriteFile(src, comp.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(img)
	good := "sha256:" + hex.EncodeToString(sum[:])
	bad := "sha256:" + strings.Repeat("0", 64)

	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantImage  bool
		wantStderr string
	}{
		{"verified", []string{"--image-checksum", good}, 0, true, ""},
		{"verified with progress log", []string{"--image-checksum", good, "--progress"}, 0, true, "finished=true"},
		{"checksum mismatch", []string{"--image-checksum", bad}, 1, false, "checksum mismatch"},
		{"no checksum", nil, 2, false, "--checksum or --image-checksum"},
		{"insecure", []string{"--insecure-skip-verify"}, 0, true, "unverified"},
		{"bad checksum syntax", []string{"--checksum", "md5:abc"}, 1, false, "malformed checksum"},
		{"missing source", []string{"--source", "", "--image-checksum", good}, 2, false, "--source is required"},
		{"stray argument", []string{"--image-checksum", good, "extra"}, 2, false, "unexpected arguments"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := filepath.Join(dir, "target"+string(rune('a'+i)))
			args := append([]string{"--source", src, "--target", target}, tt.args...)
			var stdout, stderr bytes.Buffer
			code := runWriteImage(context.Background(), args, &stdout, &stderr)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.wantCode, stdout.String(), stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr does not contain %q:\n%s", tt.wantStderr, stderr.String())
			}
			got, _ := os.ReadFile(target)
			if tt.wantImage != bytes.Equal(got, img) {
				t.Errorf("target holds the image: %v, want %v", !tt.wantImage, tt.wantImage)
			}
			if tt.wantCode == 0 && !strings.Contains(stdout.String(), good) {
				t.Errorf("stdout does not report the image digest:\n%s", stdout.String())
			}
		})
	}
}
