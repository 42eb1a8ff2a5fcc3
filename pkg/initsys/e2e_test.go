//go:build e2e

package initsys_test

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/initramfs"
	"github.com/booty-dev/booty/test/vm"
)

// TestBootQEMU builds internal/testinit into an initramfs with the real
// module list and boots it with the host's Debian kernel in QEMU, inside a
// network namespace with only loopback. It asserts from the serial console
// that coldplug loaded virtio_blk and virtio_net, that vda appeared and
// that the machine powered off through Handoff. Missing QEMU or kernel is
// a failure, not a skip.
func TestBootQEMU(t *testing.T) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Fatalf("qemu-system-x86_64 not found: %v", err)
	}
	for _, tool := range []string{"unshare", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: %v", tool, err)
		}
	}
	kver, err := initramfs.NewestKernel("/boot")
	if err != nil {
		t.Fatalf("no kernel to boot: %v", err)
	}
	kernel := filepath.Join("/boot", "vmlinuz-"+kver)
	if _, err := os.Stat(kernel); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	initBin := filepath.Join(dir, "testinit")
	build := exec.Command("go", "build", "-o", initBin, "./internal/testinit")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build testinit: %v\n%s", err, out)
	}
	list, err := os.Open("../../initramfs/modules.txt")
	if err != nil {
		t.Fatal(err)
	}
	specs, err := initramfs.ParseModuleList(list)
	list.Close()
	if err != nil {
		t.Fatal(err)
	}
	initrd := filepath.Join(dir, "initramfs.cpio")
	res, err := initramfs.Build(initramfs.Options{KernelVersion: kver, Init: initBin, Modules: specs, Out: initrd, CACerts: "-"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("initramfs: %d files, %d modules, %d bytes %s", res.Files, len(res.Modules), res.Size, res.Compression)

	disk := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(disk, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(disk, 64<<20); err != nil {
		t.Fatal(err)
	}

	// The accelerator is chosen the way every VM test chooses it: by
	// booting a tiny guest under KVM (vm.ChooseAccel), BOOTY_QEMU_ACCEL
	// overriding.
	choice, err := vm.ChooseAccel(context.Background(), qemu, "", vm.AccelAuto, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	accel, err := vm.AccelArgs(choice)
	if err != nil {
		t.Fatal(err)
	}
	qargs := append([]string{qemu, "-m", "1024", "-nographic", "-no-reboot"}, accel...)
	qargs = append(qargs,
		"-kernel", kernel, "-initrd", initrd,
		"-append", "console=ttyS0 panic=-1",
		"-drive", "file="+disk+",if=virtio,format=raw",
		"-nic", "user,model=virtio-net-pci")
	args := append([]string{"-n", "sh", "-c", `ip link set lo up && exec "$@"`, "sh"}, qargs...)
	t.Logf("reproduce: unshare %s", shellQuote(args))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", args...)
	var mu sync.Mutex
	var out bytes.Buffer
	var doneAt time.Duration
	pr, pw, _ := os.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := strings.TrimRight(sc.Text(), "\r")
			mu.Lock()
			out.WriteString(line + "\n")
			if strings.Contains(line, "TESTINIT done") && doneAt == 0 {
				doneAt = time.Since(start)
			}
			mu.Unlock()
		}
	}()
	werr := cmd.Wait()
	<-scanned
	total := time.Since(start)
	serial := out.String()
	if werr != nil || !strings.Contains(serial, "TESTINIT done") {
		t.Fatalf("qemu: %v after %s\nserial output:\n%s", werr, total, serial)
	}

	var got []string
	for _, l := range strings.Split(serial, "\n") {
		if i := strings.Index(l, "TESTINIT "); i >= 0 {
			got = append(got, l[i:])
		}
	}
	for _, want := range []string{"TESTINIT module virtio_pci", "TESTINIT module virtio_blk", "TESTINIT module virtio_net", "TESTINIT ondemand ext4", "TESTINIT block vda", "TESTINIT net eth0"} {
		found := false
		for _, g := range got {
			if g == want {
				found = true
			}
		}
		if !found {
			t.Errorf("serial output lacks %q", want)
		}
	}
	if regexp.MustCompile(`(?i)kernel panic|agent panicked`).MatchString(serial) {
		t.Errorf("panic on the serial console")
	}
	if t.Failed() {
		t.Logf("serial output:\n%s", serial)
	}
	uptime := ""
	for _, g := range got {
		if strings.HasPrefix(g, "TESTINIT uptime ") || strings.HasPrefix(g, "TESTINIT bringup ") {
			uptime += strings.TrimPrefix(g, "TESTINIT ") + "; "
		}
	}
	t.Logf("boot: TESTINIT done %s after qemu start, qemu exited after %s; guest %s", doneAt.Round(time.Millisecond), total.Round(time.Millisecond), uptime)
}

func shellQuote(args []string) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		if a != "" && !strings.ContainsAny(a, " \t\"'$&|;<>()*?[]\\") {
			b.WriteString(a)
			continue
		}
		b.WriteString("'" + strings.ReplaceAll(a, "'", `'\''`) + "'")
	}
	return b.String()
}
