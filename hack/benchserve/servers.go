package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// imageName is the generated image's name under the files directory.
const imageName = "image.img"

// work is the bench's work directory and what is in it.
type work struct {
	dir     string // removed at the end
	files   string // served by every server
	configs string // bootyd's (empty) configs dir
	targets string // the agents' target files
	cert    string // PEM certificate for 127.0.0.1
	key     string // its PEM key
	pool    *x509.CertPool
	certPEM []byte
	size    int64
	sum     string // hex sha256 of the image
}

// newWork creates the work directory under parent with the image, the
// certificate and the directories. Everything is world-readable: nginx's
// workers run as an unprivileged user.
func newWork(parent string, sizeMiB int) (*work, error) {
	dir, err := os.MkdirTemp(parent, "booty-benchserve-")
	if err != nil {
		return nil, fmt.Errorf("create work dir: %w", err)
	}
	w := &work{dir: dir, files: filepath.Join(dir, "files"), configs: filepath.Join(dir, "configs"),
		targets: filepath.Join(dir, "targets"), cert: filepath.Join(dir, "cert.pem"), key: filepath.Join(dir, "key.pem")}
	fail := func(err error) (*work, error) { os.RemoveAll(dir); return nil, err }
	for _, d := range []string{dir, w.files, w.configs, w.targets} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fail(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			return fail(err)
		}
	}
	if w.sum, err = writeImage(filepath.Join(w.files, imageName), int64(sizeMiB)<<20); err != nil {
		return fail(err)
	}
	w.size = int64(sizeMiB) << 20
	if err := w.makeCert(); err != nil {
		return fail(err)
	}
	return w, nil
}

// writeImage writes size bytes (a multiple of 4 MiB) to path, per 4 MiB 2 MiB of pseudo-random
// bytes (fixed seed) then 2 MiB of zeros, and returns the hex sha256.
func writeImage(path string, size int64) (string, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return "", fmt.Errorf("create image: %w", err)
	}
	defer f.Close()
	rng := mrand.NewChaCha8([32]byte{'b', 'o', 'o', 't', 'y'})
	h := sha256.New()
	buf := make([]byte, 2<<20)
	zero := make([]byte, 2<<20)
	for off := int64(0); off < size; off += 4 << 20 {
		rng.Read(buf)
		for _, p := range [][]byte{buf, zero} {
			if _, err := f.Write(p); err != nil {
				return "", fmt.Errorf("write image %s: %w", path, err)
			}
			h.Write(p)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), f.Close()
}

// makeCert writes a self-signed ECDSA certificate for 127.0.0.1, valid a
// day, and keeps it as the clients' only root.
func (w *work) makeCert() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "booty benchserve"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("create certificate: %w", err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	w.certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(w.cert, w.certPEM, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(w.key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return err
	}
	w.pool = x509.NewCertPool()
	w.pool.AppendCertsFromPEM(w.certPEM)
	return nil
}

// serverKind is one server under test.
type serverKind struct {
	Name string // "bootyd http", ...
	Prog string // "bootyd" or "nginx"
	TLS  bool
}

var (
	bootydHTTP = serverKind{"bootyd http", "bootyd", false}
	nginxHTTP  = serverKind{"nginx http", "nginx", false}
	bootydTLS  = serverKind{"bootyd tls", "bootyd", true}
	nginxTLS   = serverKind{"nginx tls", "nginx", true}
)

// server is a running server process.
type server struct {
	kind serverKind
	cmd  *exec.Cmd
	url  string // of the image
	pids []int  // the process and, for nginx, its workers
	log  string // its stderr
	done chan struct{}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// nginxConf is the generated nginx configuration: foreground, two
// workers (the machine's cores), sendfile on, no access log, the files
// directory under /files/.
const nginxConf = `daemon off;
worker_processes 2;
pid {{dir}}/nginx.pid;
error_log {{dir}}/nginx-error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    keepalive_timeout 120s;
    default_type application/octet-stream;
    client_body_temp_path {{dir}}/nginx-tmp/body;
    proxy_temp_path {{dir}}/nginx-tmp/proxy;
    fastcgi_temp_path {{dir}}/nginx-tmp/fastcgi;
    uwsgi_temp_path {{dir}}/nginx-tmp/uwsgi;
    scgi_temp_path {{dir}}/nginx-tmp/scgi;
    server {
        listen 127.0.0.1:{{port}}{{ssl}};
        {{tls}}
        location /files/ { alias {{files}}/; }
    }
}
`

// start starts a server of kind on a free loopback port and returns once
// it answers a Range request for the image (at most 15 s).
func (w *work) start(ctx context.Context, kind serverKind, bootyd, nginx string, log *slog.Logger) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", kind.Name, err)
	}
	scheme := "http"
	if kind.TLS {
		scheme = "https"
	}
	s := &server{kind: kind, url: fmt.Sprintf("%s://127.0.0.1:%d/files/%s", scheme, port, imageName),
		log: filepath.Join(w.dir, strings.ReplaceAll(kind.Name, " ", "-")+".log"), done: make(chan struct{})}
	var argv []string
	switch kind.Prog {
	case "bootyd":
		argv = []string{bootyd, "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--configs", w.configs,
			"--files", w.files, "--log-level", "warn"}
		help, _ := exec.Command(bootyd, "--help").Output()
		if strings.Contains(string(help), "--max-file-conns") {
			argv = append(argv, "--max-file-conns", "1024") // above the bench's clients
		}
		if strings.Contains(string(help), "--state-dir") {
			// bootyd on the BMDB refuses to start without a database: a
			// fresh one per server process.
			state, err := os.MkdirTemp(w.dir, "bootyd-state-")
			if err != nil {
				return nil, fmt.Errorf("start %s: %w", kind.Name, err)
			}
			argv = append(argv, "--state-dir", state)
		}
		if kind.TLS {
			argv = append(argv, "--tls-cert", w.cert, "--tls-key", w.key)
		} else {
			argv = append(argv, "--insecure-http")
		}
	case "nginx":
		if err := os.MkdirAll(filepath.Join(w.dir, "nginx-tmp"), 0o755); err != nil {
			return nil, err
		}
		ssl, tlsConf := "", ""
		if kind.TLS {
			ssl = " ssl"
			tlsConf = fmt.Sprintf("ssl_certificate %s; ssl_certificate_key %s; ssl_protocols TLSv1.2 TLSv1.3;", w.cert, w.key)
		}
		conf := strings.NewReplacer("{{dir}}", w.dir, "{{port}}", strconv.Itoa(port), "{{ssl}}", ssl,
			"{{tls}}", tlsConf, "{{files}}", w.files).Replace(nginxConf)
		confPath := filepath.Join(w.dir, "nginx.conf")
		if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
			return nil, err
		}
		argv = []string{nginx, "-p", w.dir, "-c", confPath, "-e", filepath.Join(w.dir, "nginx-error.log")}
	}
	logf, err := os.Create(s.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", kind.Name, err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	log.Info("server started", "server", kind.Name, "pid", s.cmd.Process.Pid, "url", s.url)

	client := w.client(kind.TLS, 5*time.Second)
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := probe(ctx, client, s.url)
		if err == nil {
			break
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("start %s: exited: %s", kind.Name, tailFile(s.log))
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.stop()
			return nil, fmt.Errorf("start %s: not answering within 15 s: %w; log: %s", kind.Name, errors.Join(err, ctx.Err()), tailFile(s.log))
		}
		time.Sleep(100 * time.Millisecond)
	}
	client.CloseIdleConnections()
	s.pids = append([]int{s.cmd.Process.Pid}, childrenOf(s.cmd.Process.Pid)...)
	return s, nil
}

// probe asks for the image's first byte and wants 206.
func probe(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Range", "bytes=0-0")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent {
		return fmt.Errorf("GET %s bytes=0-0: status %d", url, resp.StatusCode)
	}
	return nil
}

// stop sends SIGTERM to the server, waits at most 10 s, then kills its
// process group.
func (s *server) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
}

// client returns an HTTP/1.1 client with one connection per host that
// trusts only the bench's certificate and ignores proxies.
func (w *work) client(useTLS bool, headerTimeout time.Duration) *http.Client {
	t := &http.Transport{
		Proxy:                 nil,
		MaxIdleConnsPerHost:   1,
		DisableCompression:    true,
		ResponseHeaderTimeout: headerTimeout,
		TLSNextProto:          map[string]func(string, *tls.Conn) http.RoundTripper{}, // HTTP/1.1, as nginx speaks here
		TLSClientConfig:       &tls.Config{RootCAs: w.pool},
		ReadBufferSize:        256 << 10,
	}
	return &http.Client{Transport: t}
}

// procSample is CPU time and memory of a set of processes.
type procSample struct {
	CPU   time.Duration // user + system, all threads
	RSS   int64         // bytes, summed
	HWM   int64         // bytes, summed peak RSS (VmHWM)
	Alive int
}

// clockTick is the kernel's USER_HZ, 100 on every Linux that runs here.
const clockTick = 100

// sampleProcs reads /proc/PID/stat and /proc/PID/status of pids.
func sampleProcs(pids []int) procSample {
	var s procSample
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// The fields after the command's closing parenthesis: state is 3rd
		// of the line, utime 14th, stime 15th.
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b)[i+1:])
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		s.CPU += time.Duration(ut+st) * time.Second / clockTick
		s.RSS += statusKiB(pid, "VmRSS") << 10
		s.HWM += statusKiB(pid, "VmHWM") << 10
		s.Alive++
	}
	return s
}

// statusKiB returns a "Key: N kB" field of /proc/PID/status, 0 if absent.
func statusKiB(pid int, key string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// childrenOf lists the processes whose parent is pid (nginx's workers).
func childrenOf(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b)[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			kids = append(kids, p)
		}
	}
	return kids
}

// peakRSS samples the summed RSS of pids every 100 ms until stop is
// called, which returns the largest sample.
func peakRSS(pids []int) (stop func() int64) {
	var mu sync.Mutex
	var peak int64
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			s := sampleProcs(pids)
			mu.Lock()
			peak = max(peak, s.RSS)
			mu.Unlock()
			select {
			case <-quit:
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 {
		close(quit)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return max(peak, sampleProcs(pids).RSS)
	}
}

// tailFile returns the last 600 bytes of a log file.
func tailFile(path string) string {
	b, _ := os.ReadFile(path)
	s := strings.TrimSpace(string(b))
	if len(s) > 600 {
		s = "…" + s[len(s)-600:]
	}
	return s
}
