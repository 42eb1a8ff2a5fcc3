package initsys

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPanicHandler(t *testing.T) {
	tests := []struct {
		name      string
		hold      bool
		cmdline   string
		rebootErr error
		want      string
	}{
		{"reboot after delay", false, "console=ttyS0", nil, "sleep 5s reboot"},
		{"hold by option", true, "", nil, "hold"},
		{"hold by cmdline", false, "console=ttyS0 booty.debug=hold", nil, "hold"},
		{"reboot fails then hold", false, "", errors.New("EPERM"), "sleep 5s reboot hold"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl := filepath.Join(t.TempDir(), "cmdline")
			os.WriteFile(cl, []byte(tt.cmdline), 0o644)
			var log bytes.Buffer
			var got []string
			h := &PanicHandler{
				Log: slog.New(slog.NewTextHandler(&log, nil)), Hold: tt.hold, Delay: 5 * time.Second, CmdlinePath: cl,
				Sleep:       func(d time.Duration) { got = append(got, "sleep "+d.String()) },
				Reboot:      func() error { got = append(got, "reboot"); return tt.rebootErr },
				HoldForever: func() { got = append(got, "hold") },
			}
			func() {
				defer h.Recover()
				panic("disk on fire")
			}()
			if s := strings.Join(got, " "); s != tt.want {
				t.Errorf("actions %q, want %q", s, tt.want)
			}
			if !strings.Contains(log.String(), "disk on fire") || !strings.Contains(log.String(), "panic_test.go") {
				t.Errorf("log lacks panic value or stack:\n%s", log.String())
			}
		})
	}
}

func TestRecoverWithoutPanic(t *testing.T) {
	called := false
	h := &PanicHandler{HoldForever: func() { called = true }, Reboot: func() error { called = true; return nil }}
	func() { defer h.Recover() }()
	if called {
		t.Error("handler acted without a panic")
	}
}
