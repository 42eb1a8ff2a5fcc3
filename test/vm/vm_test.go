package vm

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeQEMU writes a shell script standing in for QEMU and returns its path.
// The script ignores its arguments and runs body.
func fakeQEMU(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "qemu-fake")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestStartExpectWait(t *testing.T) {
	qemu := fakeQEMU(t, `printf 'SeaBIOS\r\nbooty: step 1/3 disk\r\n'
echo 'warning: fake' >&2
sleep 0.2
printf 'booty: step 2/3 image\nbooty: done ip=10.0.2.15\nno newline at end'`)
	var console syncBuffer
	logPath := filepath.Join(t.TempDir(), "logs", "console.log")
	v, err := Start(context.Background(), Config{QEMU: qemu, Accel: AccelTCG, Console: &console, ConsoleLog: logPath, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	line, err := v.Expect(ctx, regexp.MustCompile(`step \d/3`))
	if err != nil || line != "booty: step 1/3 disk" {
		t.Fatalf("Expect step = %q, %v", line, err)
	}
	// The next Expect starts after the consumed line.
	line, err = v.Expect(ctx, regexp.MustCompile(`step \d/3`))
	if err != nil || line != "booty: step 2/3 image" {
		t.Fatalf("second Expect step = %q, %v", line, err)
	}
	sm, err := v.ExpectSubmatch(ctx, regexp.MustCompile(`ip=(\S+)`))
	if err != nil || len(sm) != 2 || sm[1] != "10.0.2.15" {
		t.Fatalf("ExpectSubmatch = %q, %v", sm, err)
	}
	// The last line has no newline; it still counts once QEMU is gone.
	if _, err := v.ExpectString(ctx, "no newline at end"); err != nil {
		t.Fatalf("Expect last partial line: %v", err)
	}
	if err := v.Wait(ctx); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	// Nothing more comes: Expect reports the exit.
	if _, err := v.ExpectString(ctx, "never"); !errors.Is(err, ErrExited) {
		t.Errorf("Expect after exit = %v, want ErrExited", err)
	}

	wantConsole := "SeaBIOS\nbooty: step 1/3 disk\n"
	// stdout and stderr lines interleave in any order; each must be whole.
	for _, want := range []string{"SeaBIOS\n", "booty: step 1/3 disk\n", "qemu: warning: fake\n", "no newline at end\n"} {
		if !strings.Contains(console.String(), want) {
			t.Errorf("console writer lacks %q: %q", want, console.String())
		}
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "booty: done ip=10.0.2.15\n") || strings.Contains(string(b), "\r") {
		t.Errorf("console log = %q", b)
	}
	if got := v.ConsoleText(); !strings.HasPrefix(got, wantConsole) {
		t.Errorf("ConsoleText = %q", got)
	}
}

func TestCleanLine(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain\n", "plain"},
		{"crlf\r\n", "crlf"},
		{"\x1b[2J\x1b[01;01H\x1b[=3h\x1b[2J\x1b[01;01Hhello", "hello"},
		{"\x1b[0m\x1b[1;32mOK\x1b[0m done", "OK done"},
		{"\x1b(Bx\x1bcy\x00\x07z\tt", "xyz\tt"},
		{"progress 10%\rprogress 20%\n", "progress 10%progress 20%"},
	}
	for _, tt := range tests {
		if got := cleanLine(tt.in); got != tt.want {
			t.Errorf("cleanLine(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestWaitFailure(t *testing.T) {
	qemu := fakeQEMU(t, `echo 'qemu-system-x86_64: -drive file=x: Could not open' >&2; echo 'last words'; exit 1`)
	v, err := Start(context.Background(), Config{QEMU: qemu, Accel: AccelTCG})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = v.Wait(ctx)
	if err == nil {
		t.Fatal("Wait = nil for exit status 1")
	}
	for _, want := range []string{"exit status 1", "Could not open", "last words"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Wait error lacks %q: %v", want, err)
		}
	}
	if _, err := v.ExpectString(ctx, "hello"); !errors.Is(err, ErrExited) {
		t.Errorf("Expect = %v, want ErrExited", err)
	}
}

func TestTimeoutAndKill(t *testing.T) {
	qemu := fakeQEMU(t, `echo booting; exec sleep 600`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("lifetime", func(t *testing.T) {
		v, err := Start(context.Background(), Config{QEMU: qemu, Accel: AccelTCG, Timeout: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		_, err = v.ExpectString(ctx, "login:")
		if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "booting") {
			t.Errorf("Expect = %v, want ErrTimeout quoting the console", err)
		}
		if err := v.Wait(ctx); !errors.Is(err, ErrTimeout) {
			t.Errorf("Wait = %v, want ErrTimeout", err)
		}
	})
	t.Run("expect context", func(t *testing.T) {
		v, err := Start(context.Background(), Config{QEMU: qemu, Accel: AccelTCG})
		if err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		if _, err := v.ExpectString(short, "login:"); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Expect = %v, want DeadlineExceeded", err)
		}
		if err := v.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := v.Kill(); err != nil {
			t.Errorf("second Kill: %v", err)
		}
		select {
		case <-v.Exited():
		default:
			t.Error("Exited not closed after Kill")
		}
	})
	t.Run("start context", func(t *testing.T) {
		sctx, scancel := context.WithCancel(context.Background())
		v, err := Start(sctx, Config{QEMU: qemu, Accel: AccelTCG})
		if err != nil {
			t.Fatal(err)
		}
		scancel()
		if err := v.Wait(ctx); err == nil {
			t.Error("Wait = nil after the start context was cancelled")
		}
	})
}

func TestSend(t *testing.T) {
	qemu := fakeQEMU(t, `read line; echo "got $line"`)
	v, err := Start(context.Background(), Config{QEMU: qemu, Accel: AccelTCG})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Kill()
	if err := v.Send("ping\n"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := v.ExpectString(ctx, "got ping"); err != nil {
		t.Fatal(err)
	}
}

func TestStartErrors(t *testing.T) {
	dir := t.TempDir()
	qemu := fakeQEMU(t, "exit 0")
	tests := []struct {
		name string
		cfg  Config
		want string
		is   error
	}{
		{"qemu missing", Config{QEMU: filepath.Join(dir, "no-qemu")}, "qemu not found", ErrQEMUMissing},
		{"kernel missing", Config{QEMU: qemu, Kernel: filepath.Join(dir, "vmlinuz")}, "kernel", os.ErrNotExist},
		{"disk missing", Config{QEMU: qemu, Disks: []Disk{{Path: filepath.Join(dir, "d.img")}}}, "disk 0", os.ErrNotExist},
		{"bad config", Config{QEMU: qemu, Disks: []Disk{{Path: qemu, Format: "vhd"}}}, "format", ErrBadConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := Start(context.Background(), tt.cfg)
			if err == nil {
				v.Kill()
				t.Fatal("Start succeeded")
			}
			if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Start error = %v, want %v mentioning %q", err, tt.is, tt.want)
			}
		})
	}
}

func TestStartTArtifacts(t *testing.T) {
	art := t.TempDir()
	t.Setenv(ArtifactsEnv, art)
	qemu := fakeQEMU(t, `echo hello from fake`)
	var v *VM
	t.Run("sub", func(t *testing.T) {
		v = StartT(t, Config{QEMU: qemu, Accel: AccelTCG})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := v.ExpectString(ctx, "hello"); err != nil {
			t.Fatal(err)
		}
	})
	dir := filepath.Join(art, "TestStartTArtifacts_sub")
	b, err := os.ReadFile(filepath.Join(dir, "console.log"))
	if err != nil || string(b) != "hello from fake\n" {
		t.Errorf("console.log = %q, %v", b, err)
	}
	b, err = os.ReadFile(filepath.Join(dir, "qemu.sh"))
	if err != nil || !strings.Contains(string(b), v.CommandLine()) {
		t.Errorf("qemu.sh = %q, %v", b, err)
	}
}

// TestEnterNetNS runs this test binary as TestNetNSChild, which calls
// EnterNetNS and reports what network it sees from inside.
func TestEnterNetNS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("EnterNetNS needs root (CAP_SYS_ADMIN); run the tests as root")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNetNSChild$", "-test.v")
	cmd.Env = append(os.Environ(), "BOOTY_VM_NETNS_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "interfaces: [lo]\n") {
		t.Errorf("child did not see only lo:\n%s", out)
	}
	if !strings.Contains(string(out), "loopback echo ok\n") {
		t.Errorf("child loopback failed:\n%s", out)
	}
	hostIfaces, _ := net.Interfaces()
	t.Logf("host has %d interfaces; child output:\n%s", len(hostIfaces), out)
}

func TestNetNSChild(t *testing.T) {
	if os.Getenv("BOOTY_VM_NETNS_CHILD") != "1" {
		t.Skip("helper of TestEnterNetNS, runs only as its child")
	}
	EnterNetNS() // outside: re-executes and exits; inside: returns
	if !InNetNS() {
		t.Fatal("EnterNetNS returned outside the namespace")
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range ifaces {
		names = append(names, i.Name)
		if i.Name == "lo" && i.Flags&net.FlagUp == 0 {
			t.Errorf("lo is down")
		}
	}
	os.Stdout.WriteString("interfaces: " + "[" + strings.Join(names, " ") + "]\n")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Write([]byte("echo"))
			c.Close()
		}
	}()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	if _, err := c.Read(b); err != nil || string(b) != "echo" {
		t.Fatalf("read from loopback: %q %v", b, err)
	}
	os.Stdout.WriteString("loopback echo ok\n")
}
