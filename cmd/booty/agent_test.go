package main

import (
	"strings"
	"testing"
)

func TestRedactCmdline(t *testing.T) {
	raw := "console=ttyS0 booty.config=https://user:s3cret@host/cfg.yaml?access_token=XYZ booty.token=TOK quiet"
	got := redactCmdline(raw)
	for _, secret := range []string{"s3cret", "user:", "XYZ", "TOK"} {
		if strings.Contains(got, secret) {
			t.Errorf("redactCmdline kept %q: %s", secret, got)
		}
	}
	for _, keep := range []string{"console=ttyS0", "booty.config=https://<redacted>@host/cfg.yaml?<redacted>", "booty.token=<redacted>", "quiet"} {
		if !strings.Contains(got, keep) {
			t.Errorf("redactCmdline lost %q: %s", keep, got)
		}
	}
}
