// Package sshdtest starts Debian's sshd in a network namespace for tests of
// the Initializer: a real SSH server the test owns, reached over a veth
// pair, with a fresh host key and one authorized key for root.
//
// It needs /usr/sbin/sshd (openssh-server), ip (iproute2) and root; when one
// is missing the test is skipped loudly, except under CI (CI=true), where
// that is a failure. hack/deps.sh installs both packages.
package sshdtest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/internal/testenv"
	xssh "golang.org/x/crypto/ssh"
)

// need fails the test under CI, else skips it loudly, when a requirement
// is missing.
func need(t testing.TB, ok bool, what string) {
	t.Helper()
	testenv.Need(t, ok, what+" (hack/deps.sh installs openssh-server and iproute2; the test runs as root)")
}

func run(t testing.TB, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Start starts Debian's sshd in a network namespace it creates, reached
// over a veth pair with a random /30 of 10.251.0.0/16, with a fresh host key
// and authorizedKey as root's only way in; its files go to dir. It returns
// the address (IP:22) and the host key; everything is torn down when the
// test ends. It fails the test when a step fails or sshd does not listen
// within 20 seconds.
func Start(t testing.TB, dir, authorizedKey string) (string, xssh.PublicKey) {
	t.Helper()
	sshd := "/usr/sbin/sshd"
	_, err := os.Stat(sshd)
	need(t, err == nil, "sshd is not installed at "+sshd)
	_, err = exec.LookPath("ip")
	need(t, err == nil, "ip (iproute2) is not installed")
	need(t, os.Geteuid() == 0, "network namespaces need root")

	id := randHex(3)
	ns, hostIf, peerIf := "booty-init-"+id, "bih"+id, "bip"+id
	run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	run(t, "ip", "link", "add", hostIf, "type", "veth", "peer", "name", peerIf)
	t.Cleanup(func() { exec.Command("ip", "link", "del", hostIf).Run() })
	run(t, "ip", "link", "set", peerIf, "netns", ns)
	nb, _ := rand.Int(rand.Reader, big.NewInt(256*64))
	base := int(nb.Int64())
	hostIP := fmt.Sprintf("10.251.%d.%d", base/64, base%64*4+1)
	peerIP := fmt.Sprintf("10.251.%d.%d", base/64, base%64*4+2)
	run(t, "ip", "addr", "add", hostIP+"/30", "dev", hostIf)
	run(t, "ip", "link", "set", hostIf, "up")
	run(t, "ip", "netns", "exec", ns, "ip", "addr", "add", peerIP+"/30", "dev", peerIf)
	run(t, "ip", "netns", "exec", ns, "ip", "link", "set", peerIf, "up")
	run(t, "ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")

	_, hk, _ := ed25519.GenerateKey(rand.Reader)
	blk, err := xssh.MarshalPrivateKey(hk, "")
	if err != nil {
		t.Fatal(err)
	}
	hostKey := filepath.Join(dir, "ssh_host_ed25519_key")
	os.WriteFile(hostKey, pem.EncodeToMemory(blk), 0o600)
	hostSigner, _ := xssh.NewSignerFromKey(hk)
	os.WriteFile(filepath.Join(dir, "authorized_keys"), []byte(authorizedKey+"\n"), 0o600)
	cfg := filepath.Join(dir, "sshd_config")
	os.WriteFile(cfg, []byte(strings.Join([]string{
		"Port 22", "ListenAddress " + peerIP, "HostKey " + hostKey,
		"AuthorizedKeysFile " + filepath.Join(dir, "authorized_keys"), "PidFile " + filepath.Join(dir, "sshd.pid"),
		"PermitRootLogin prohibit-password", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
		"UsePAM no", "StrictModes no", "LogLevel VERBOSE", "",
	}, "\n")), 0o600)
	// sshd's privilege separation directory.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	cmd := exec.Command("ip", "netns", "exec", ns, sshd, "-D", "-e", "-f", cfg)
	cmd.Stdout, cmd.Stderr = &log, &log
	t.Logf("sshd: %s", strings.Join(cmd.Args, " "))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		t.Logf("sshd log:\n%s", log.String())
	})
	addr := net.JoinHostPort(peerIP, "22")
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sshd listening on %s: not within 20s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return addr, hostSigner.PublicKey()
}
