package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/test/harness"
)

func TestRunFlags(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		stdout   string // substring
		stderr   string // substring
	}{
		{"help", []string{"--help"}, 0, "--quiet-console", ""},
		{"unknown flag", []string{"--bogus"}, 2, "", "unknown flag: --bogus"},
		{"argument", []string{"extra"}, 2, "", "unexpected arguments: extra"},
		{"bad timeout", []string{"--timeout", "0s"}, 2, "", "--timeout 0s"},
		{"small disk", []string{"--disk-mib", "10"}, 2, "", "--disk-mib 10"},
		{"missing kernel", []string{"--kernel", "/nonexistent/vmlinuz"}, 1, "", "run 'make initramfs'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, &stdout, &stderr)
			if code != tt.wantCode || !strings.Contains(stdout.String(), tt.stdout) || !strings.Contains(stderr.String(), tt.stderr) {
				t.Fatalf("run(%q) = %d\nstdout: %s\nstderr: %s", tt.args, code, stdout.String(), stderr.String())
			}
		})
	}
}

func TestCheckInputs(t *testing.T) {
	dir := t.TempDir()
	touch := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	o := options{kernel: touch("vmlinuz"), initrd: touch("initramfs.img"), imageDir: dir}
	if err := checkInputs(o); err == nil || !strings.Contains(err.Error(), "demo.img") || !strings.Contains(err.Error(), "make demo-image") {
		t.Fatalf("checkInputs without images = %v", err)
	}
	touch("demo.img")
	touch("demo.img.zst")
	touch("SHA256SUMS")
	if err := checkInputs(o); err != nil {
		t.Fatalf("checkInputs = %v", err)
	}
}

// reports builds a run's status reports: name:state pairs, 1-based index.
func reports(steps ...string) []api.StatusReport {
	var out []api.StatusReport
	for _, s := range steps {
		name, state, _ := strings.Cut(s, ":")
		r := api.StatusReport{Step: name, State: state, Total: 3, DurationMS: 1500}
		switch name {
		case "select-disk":
			r.Index = 1
		case "write-image":
			r.Index = 2
		case "report-success":
			r.Index = 3
		}
		if name == "write-image" && state == api.StateSucceeded {
			r.Detail = map[string]string{"bytes": "67108864"}
		}
		if state == api.StateFailed {
			r.Error = "checksum mismatch"
		}
		if name == api.StepMachine {
			r.Index, r.Total, r.DurationMS = 0, 0, 0
		}
		out = append(out, r)
	}
	return out
}

func TestSummary(t *testing.T) {
	provisioned := api.MachineState{State: api.StateProvisioned, Steps: reports(
		"select-disk:started", "select-disk:succeeded", "write-image:started", "write-image:succeeded",
		"report-success:started", "report-success:succeeded", "machine:provisioned")}
	failed := api.MachineState{State: api.StateError, Steps: reports(
		"select-disk:started", "select-disk:succeeded", "write-image:started", "write-image:failed", "machine:error"),
		Progress: &api.ProgressReport{Step: "write-image", BytesDone: 59 << 20}}
	running := api.MachineState{State: "running", Steps: reports("select-disk:started", "select-disk:succeeded", "write-image:started")}
	mismatch := &harness.MismatchError{Offset: 448}

	tests := []struct {
		name   string
		s      summary
		wantOK bool
		want   []string
		not    []string
	}{
		{
			name:   "provisioned",
			s:      summary{state: provisioned, took: 21 * time.Second},
			wantOK: true,
			want: []string{"outcome   PROVISIONED after 21s", "1/3 select-disk     succeeded      1.5s",
				"3/3 report-success  succeeded      1.5s", "written   64.0 MiB (67108864 bytes)",
				"disk      holds exactly demo.img (64.0 MiB compared byte by byte)", "result    OK"},
			not: []string{"machine", "FAILED"},
		},
		{
			name: "provisioned but disk differs",
			s:    summary{state: provisioned, took: time.Minute, diskErr: mismatch},
			want: []string{"PROVISIONED after 1m0s", "does NOT hold demo.img: first difference at offset 448 (0x1c0)",
				"valid GPT; first MiB is not zero", "result    FAILED"},
		},
		{
			name: "provisioned but still running",
			s:    summary{state: provisioned, took: time.Minute, waitErr: fmt.Errorf("x: %w", harness.ErrStillRunning)},
			want: []string{"PROVISIONED after 1m0s; the machine did not power off and was killed", "result    FAILED"},
		},
		{
			name: "error wipes the disk",
			s: summary{state: failed, took: 18 * time.Second, diskErr: mismatch, zero: true,
				gptErr: fmt.Errorf("check gpt of /d: no MBR signature 0x55AA (found 0x0000)"), disk: "/d"},
			want: []string{"outcome   ERROR after 18s in step write-image: checksum mismatch",
				"2/3 write-image  failed         1.5s", "written   59.0 MiB by the last progress report",
				"no valid GPT (no MBR signature 0x55AA (found 0x0000)); first MiB is zero", "result    FAILED"},
			not: []string{"/d:"},
		},
		{
			name: "timeout quotes the console",
			s: summary{state: running, timedOut: true, timeout: 10 * time.Minute, diskErr: mismatch, zero: true,
				waitErr: fmt.Errorf("wait: %w\n--- last 2 of 2 console lines ---\nboot\nhang\n---", context.DeadlineExceeded)},
			want: []string{"TIMEOUT: no outcome within 10m0s; last report: step write-image started",
				"2/3 write-image  unfinished", "written   unknown", "result    FAILED\n\nwait: context deadline exceeded\n--- last 2 of 2 console lines ---\nboot\nhang\n"},
		},
		{
			name: "nothing heard",
			s:    summary{timedOut: true, timeout: time.Minute, waitErr: context.DeadlineExceeded, diskErr: mismatch},
			want: []string{"TIMEOUT: no outcome within 1m0s; bootyd heard nothing from the machine", "steps     none reported"},
		},
		{
			name: "no outcome",
			s:    summary{state: running, took: 5 * time.Second, waitErr: fmt.Errorf("w: %w", harness.ErrNoOutcome), diskErr: mismatch},
			want: []string{"NO OUTCOME: the machine stopped after 5s without reporting one; last report: step write-image started"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.s.imageName, tt.s.imageSize = "demo.img", 64<<20
			var b bytes.Buffer
			tt.s.write(&b)
			got := b.String()
			if tt.s.ok() != tt.wantOK {
				t.Errorf("ok = %v, want %v", tt.s.ok(), tt.wantOK)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("summary lacks %q:\n%s", w, got)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(got, n) {
					t.Errorf("summary has %q:\n%s", n, got)
				}
			}
		})
	}
}

func TestWriters(t *testing.T) {
	var b bytes.Buffer
	w := &dropWriter{w: &prefixWriter{w: &b, prefix: "bootyd | "}, re: agentLogLine}
	for _, l := range []string{
		"52:54:00:12:34:56 [1/3 select-disk] started\n",
		"52:54:00:12:34:56 | INFO  step started\n",
		"52:54:00:12:34:56 ERROR in step x: a | b\n",
		"two\nlines",
	} {
		if _, err := w.Write([]byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	want := "bootyd | 52:54:00:12:34:56 [1/3 select-disk] started\n" +
		"bootyd | 52:54:00:12:34:56 ERROR in step x: a | b\n" +
		"bootyd | two\nbootyd | lines\n"
	if b.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", b.String(), want)
	}
}
