package main

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	testMAC   = "52:54:00:12:34:56"
	testToken = "bin-test-t0ken-91ac"
)

// buildBootyd compiles this command into a temp dir once per test binary run.
var buildBootyd = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "bootyd-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "bootyd")
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

func TestMain(m *testing.M) {
	code := m.Run()
	if bin, err := buildBootyd(); err == nil {
		os.RemoveAll(filepath.Dir(bin))
	}
	os.Exit(code)
}

func binary(t *testing.T) string {
	t.Helper()
	bin, err := buildBootyd()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// workdir lays out a config dir with one machine and a files dir with one file.
func workdir(t *testing.T) (configs, files string) {
	t.Helper()
	base := t.TempDir()
	configs, files = filepath.Join(base, "configs"), filepath.Join(base, "files")
	for _, d := range []string{configs, files} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := "hostname: vm1\nserver:\n  token: " + testToken + "\n"
	if err := os.WriteFile(filepath.Join(configs, "52-54-00-12-34-56.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(files, "vmlinuz"), []byte("kernel-bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	return configs, files
}

// lockedBuffer collects a child's output safely.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// daemon is a running bootyd.
type daemon struct {
	cmd    *exec.Cmd
	addr   string
	stdout *lockedBuffer
	stderr *lockedBuffer
	done   chan error
}

var addrRE = regexp.MustCompile(`msg="bootyd listening" addr=(\S+)`)

// startBootyd runs the binary with args, waits for its "listening" log line
// and returns the address it bound. The process is killed at cleanup if
// still running.
func startBootyd(t *testing.T, args ...string) *daemon {
	t.Helper()
	d := &daemon{stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, done: make(chan error, 1)}
	d.cmd = exec.Command(binary(t), args...)
	d.cmd.Stdout = d.stdout
	pr, pw := io.Pipe()
	d.cmd.Stderr = pw
	t.Logf("run: %s", strings.Join(d.cmd.Args, " "))
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(d.stderr, line)
			if m := addrRE.FindStringSubmatch(line); m != nil {
				select {
				case addrc <- m[1]:
				default:
				}
			}
		}
	}()
	go func() {
		err := d.cmd.Wait()
		pw.Close()
		d.done <- err
	}()
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			_ = d.cmd.Process.Kill()
			<-d.done
		}
		t.Logf("bootyd stderr:\n%s\nbootyd stdout:\n%s", d.stderr.String(), d.stdout.String())
	})
	select {
	case d.addr = <-addrc:
	case err := <-d.done:
		d.done <- err
		t.Fatalf("bootyd exited before listening: %v\n%s", err, d.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("bootyd did not log its address\n%s", d.stderr.String())
	}
	return d
}

// stop sends SIGTERM and expects a clean exit.
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.done:
		if err != nil {
			t.Fatalf("bootyd exit after SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("bootyd did not stop after SIGTERM")
	}
	if !strings.Contains(d.stderr.String(), `msg="bootyd stopped"`) {
		t.Errorf("no clean-stop log line")
	}
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const operatorToken = "operator-token-0123456789"

// getAuth is get with a bearer token.
func getAuth(t *testing.T, c *http.Client, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// shortTokens writes an operator token file with a too-short token.
func shortTokens(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestHelp(t *testing.T) {
	var out, errb bytes.Buffer
	cmd := exec.Command(binary(t), "--help")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("--help: %v\n%s", err, errb.String())
	}
	help := out.String()
	for _, w := range []string{"Example:", "bootyd --state-dir", "--db", "--operator-token-file", "--auto-discover", "--configs", "--default-config", "--files", "--state-dir",
		"--public-url", "--ipxe-kernel", "--ipxe-initrd", "--ipxe-cmdline", "--allow-no-token", "--listen",
		"--tls-cert", "--tls-key", "--insecure-http", "--log-level", "--log-format", "--shutdown-timeout",
		"--max-file-conns", "--file-write-timeout", "--file-min-rate", "--idle-timeout", "--bmc-ca-cert", "--bmc-power-timeout", "--debug-pprof-listen",
		"host reconciler", "--reconcile[=true|false]", "--reconcile-parallelism", "--reconcile-db-query-rate", "--reconcile-resync",
		"--reconcile-error-backoff", "--reconcile-error-backoff-max", "--recover[=true|false]", "--recoverer-heartbeat-timeout",
		"The Provisioner", "--inventory", "passwordFile:", "--provisioner-max-count", "--provisioner-creation-rate", "--provisioner-chunk-size",
		"The Initializer", "--initializer-executable", "--initializer-endpoint", "--initializer-ca-cert", "--initializer-target-path",
		"--initializer-ssh-connect-timeout", "--initializer-ssh-exec-timeout", "--initializer-known-hosts", "--initializer-insecure-ignore-host-key",
		"--initializer-ssh-user", "--ssh-key-path", "<state-dir>/initializer_ed25519"} {
		if !strings.Contains(help, w) {
			t.Errorf("--help lacks %q", w)
		}
	}
}

func TestFlagErrors(t *testing.T) {
	configs, _ := workdir(t)
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"plain HTTP needs consent", []string{"--configs", configs}, 2, "--insecure-http"},
		{"cert without key", []string{"--configs", configs, "--tls-cert", "x.pem"}, 2, "--tls-cert and --tls-key go together"},
		{"both TLS and insecure", []string{"--configs", configs, "--tls-cert", "x", "--tls-key", "y", "--insecure-http"}, 2, "exclude each other"},
		{"unknown flag", []string{"--bogus"}, 2, "unknown flag"},
		{"zero file conns", []string{"--insecure-http", "--configs", configs, "--max-file-conns", "0"}, 2, "--max-file-conns 0"},
		{"negative min rate", []string{"--insecure-http", "--configs", configs, "--file-min-rate", "-5"}, 2, "--file-min-rate -5"},
		{"stray argument", []string{"--insecure-http", "--configs", configs, "extra"}, 2, "unexpected arguments"},
		{"no database", []string{"--insecure-http", "--configs", configs}, 2, "no database: give --state-dir"},
		{"missing config dir", []string{"--insecure-http", "--state-dir", t.TempDir(), "--configs", configs + "/nope"}, 1, "config directory"},
		{"unreadable cert", []string{"--state-dir", t.TempDir(), "--configs", configs, "--tls-cert", configs + "/no.pem", "--tls-key", configs + "/no.key"}, 1, "load TLS certificate"},
		{"missing BMC CA", []string{"--insecure-http", "--state-dir", t.TempDir(), "--bmc-ca-cert", configs + "/no-ca.pem"}, 1, "read BMC CA certificate"},
		{"pprof off loopback", []string{"--insecure-http", "--state-dir", t.TempDir(), "--debug-pprof-listen", "0.0.0.0:6060"}, 2, "want a loopback address"},
		{"reconcile resync too short", []string{"--insecure-http", "--state-dir", t.TempDir(), "--reconcile-resync", "10ms"}, 2, "resync 10ms is under 1s"},
		{"bad reconcile rate", []string{"--insecure-http", "--state-dir", t.TempDir(), "--reconcile-db-query-rate", "fast"}, 2, "reconcile-db-query-rate"},
		{"zero BMC power timeout", []string{"--insecure-http", "--state-dir", t.TempDir(), "--bmc-power-timeout", "0s"}, 2, "--bmc-power-timeout 0s"},
		{"short operator token", []string{"--insecure-http", "--state-dir", t.TempDir(), "--operator-token-file", shortTokens(t)}, 1, "shorter than 16"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var errb bytes.Buffer
			cmd := exec.Command(binary(t), tt.args...)
			cmd.Stderr = &errb
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.code || !strings.Contains(errb.String(), tt.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d mentioning %q", code, errb.String(), tt.code, tt.want)
			}
		})
	}
}

func TestInsecureHTTP(t *testing.T) {
	configs, files := workdir(t)
	state := filepath.Join(t.TempDir(), "state")
	tokens := filepath.Join(t.TempDir(), "operator-tokens")
	if err := os.WriteFile(tokens, []byte("# operators\n"+operatorToken+"\n\nsecond-operator-token-xyz\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startBootyd(t, "--insecure-http", "--listen", "127.0.0.1:0", "--configs", configs, "--files", files,
		"--state-dir", state, "--log-level", "debug", "--operator-token-file", tokens)
	base := "http://" + d.addr
	c := &http.Client{Timeout: 10 * time.Second}

	// Configs are handed out only with the machine's token.
	if code, body := get(t, c, base+"/v1/machines/52-54-00-12-34-56/config"); code != 401 || strings.Contains(body, "vm1") {
		t.Fatalf("config without token: %d %q", code, body)
	}
	code, body := getAuth(t, c, base+"/v1/machines/52-54-00-12-34-56/config", testToken)
	if code != 200 || !strings.Contains(body, "hostname: vm1") {
		t.Fatalf("config: %d %q", code, body)
	}
	// The config file became a registered machine, listed for operators.
	if code, _ := get(t, c, base+"/v1/machines"); code != 401 {
		t.Fatalf("machines without operator token: %d", code)
	}
	for _, tok := range []string{operatorToken, "second-operator-token-xyz"} {
		if code, body := getAuth(t, c, base+"/v1/machines", tok); code != 200 || !strings.Contains(body, `"name": "vm1"`) {
			t.Fatalf("machines: %d %q", code, body)
		}
	}
	if code, body := get(t, c, base+"/files/vmlinuz"); code != 200 || body != "kernel-bytes" {
		t.Fatalf("file: %d %q", code, body)
	}
	// Without --public-url no iPXE script is rendered (never from Host).
	if code, body := get(t, c, base+"/v1/machines/"+testMAC+"/ipxe"); code != 503 || !strings.Contains(body, "--public-url") {
		t.Fatalf("ipxe: %d %q", code, body)
	}
	req, _ := http.NewRequest("POST", base+"/v1/machines/"+testMAC+"/status",
		strings.NewReader(`{"step":"write-image","index":2,"total":5,"state":"started"}`))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status report: %d", resp.StatusCode)
	}
	d.stop(t)
	if !strings.Contains(d.stdout.String(), "52:54:00:12:34:56 [2/5 write-image] started") {
		t.Errorf("stdout lacks the step line:\n%s", d.stdout.String())
	}
	if _, err := os.Stat(filepath.Join(state, "52-54-00-12-34-56.json")); err != nil {
		t.Errorf("state not persisted: %v", err)
	}
	if _, err := os.Stat(filepath.Join(state, "bmdb.db")); err != nil {
		t.Errorf("no database in the state dir: %v", err)
	}
	if out := d.stderr.String() + d.stdout.String(); strings.Contains(out, testToken) || strings.Contains(out, operatorToken) {
		t.Errorf("token appears in bootyd's output")
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and returns its
// paths and a pool that trusts it.
func selfSigned(t *testing.T) (certPath, keyPath string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "bootyd test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPath, keyPath = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certPath, keyPath, pool
}

func TestTLS(t *testing.T) {
	configs, _ := workdir(t)
	certPath, keyPath, pool := selfSigned(t)
	d := startBootyd(t, "--listen", "127.0.0.1:0", "--configs", configs, "--tls-cert", certPath, "--tls-key", keyPath,
		"--state-dir", t.TempDir(), "--public-url", "https://bootyd.test:8443")
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	code, body := getAuth(t, c, "https://"+d.addr+"/v1/machines/"+testMAC+"/config", testToken)
	if code != 200 || !strings.Contains(body, "hostname: vm1") {
		t.Fatalf("config over TLS: %d %q", code, body)
	}
	if code, body := get(t, c, "https://"+d.addr+"/v1/boot.ipxe"); code != 200 || !strings.Contains(body, "chain --autofree https://bootyd.test:8443/v1/machines/") {
		t.Fatalf("chain script over TLS: %d %q", code, body)
	}
	// A client that does not trust the certificate is refused.
	if _, err := (&http.Client{Timeout: 10 * time.Second}).Get("https://" + d.addr + "/v1/boot.ipxe"); err == nil {
		t.Fatal("untrusted client connected")
	}
	// Plain HTTP to the TLS port gets no config.
	if resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + d.addr + "/v1/machines/" + testMAC + "/config"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 || strings.Contains(string(b), testToken) {
			t.Fatalf("plain HTTP got %d %q", resp.StatusCode, b)
		}
	}
	d.stop(t)
}

// TestControlLoops: the host reconciler and the Recoverer run by default
// and stop with bootyd; --reconcile=false --recover=false runs neither.
func TestControlLoops(t *testing.T) {
	d := startBootyd(t, "--insecure-http", "--listen", "127.0.0.1:0", "--state-dir", t.TempDir())
	d.stop(t)
	if !strings.Contains(d.stderr.String(), `msg="control loops started" reconcile=true recover=true`) {
		t.Errorf("default: no control loops started:\n%s", d.stderr.String())
	}
	d = startBootyd(t, "--insecure-http", "--listen", "127.0.0.1:0", "--state-dir", t.TempDir(), "--reconcile=false", "--recover=false")
	d.stop(t)
	if strings.Contains(d.stderr.String(), "control loops started") {
		t.Errorf("--reconcile=false --recover=false: loops started:\n%s", d.stderr.String())
	}
}
