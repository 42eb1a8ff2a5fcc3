package manager

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	xssh "golang.org/x/crypto/ssh"

	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/manager/ssh"
)

// ProcessInitialize is the Initializer's process in the BMDB.
const ProcessInitialize bmdb.Process = "initialize"

// TakeoverOK starts the line `booty takeover` prints on its standard output
// once it verified and loaded booty's kernel and initramfs. The Initializer
// requires it. booty then exits 0, so sshd sends the exit status, and a
// detached process of booty reboots into the loaded kernel a second after
// (pkg/takeover); a connection that drops after the line with no exit
// status (booty rebooted itself) also counts as success.
const TakeoverOK = "booty takeover: ok"

// ReasonAgentTakeover is the event the Initializer records on success.
const ReasonAgentTakeover = "AgentTakeover"

// InitializerConfig configures how the Initializer takes machines over.
type InitializerConfig struct {
	ControlLoopConfig
	// Executable is the booty binary uploaded to the machines. Must be set.
	Executable []byte
	// TargetPath is where the executable is written on the machines, an
	// absolute path. Must be set.
	TargetPath string
	// Endpoint is bootyd's URL the agent enrolls with. Must be set.
	Endpoint string
	// EndpointCACertificate is an optional DER-encoded X.509 certificate of
	// the CA of Endpoint; it is uploaded PEM-encoded to TargetPath+".ca.pem"
	// and passed as --ca-cert.
	EndpointCACertificate []byte
	// SSHConnectTimeout bounds dialing and authenticating. Must be set.
	SSHConnectTimeout time.Duration
	// SSHExecTimeout bounds the uploads and running the takeover. Must be set.
	SSHExecTimeout time.Duration
	// AgentStartTimeout is how long after a takeover the machine is left
	// alone for its agent to enroll before it is taken over again; default
	// 30 minutes.
	AgentStartTimeout time.Duration
}

// RegisterFlags registers the config's flags on pflag.CommandLine.
func (ic *InitializerConfig) RegisterFlags() { ic.AddFlags(pflag.CommandLine) }

// AddFlags registers the initializer's flags on fs: the loop's
// (initializer-db-query-rate, initializer-parallelism),
// initializer-executable and initializer-ca-cert (files read at parse
// time), initializer-target-path, initializer-endpoint and the timeouts.
func (ic *InitializerConfig) AddFlags(fs *pflag.FlagSet) {
	ic.ControlLoopConfig.AddFlags(fs, "initializer")
	if ic.TargetPath == "" {
		ic.TargetPath = "/tmp/booty"
	}
	if ic.SSHConnectTimeout == 0 {
		ic.SSHConnectTimeout = 10 * time.Second
	}
	if ic.SSHExecTimeout == 0 {
		ic.SSHExecTimeout = 60 * time.Second
	}
	fs.Var(&fileValue{b: &ic.Executable}, "initializer-executable", "the booty binary to upload to machines taken over")
	fs.Var(&fileValue{b: &ic.EndpointCACertificate, der: true}, "initializer-ca-cert", "CA certificate (PEM or DER) of the endpoint, handed to the agent")
	fs.StringVar(&ic.TargetPath, "initializer-target-path", ic.TargetPath, "where booty is written on machines taken over")
	fs.StringVar(&ic.Endpoint, "initializer-endpoint", ic.Endpoint, "bootyd's URL the taken-over agent enrolls with")
	fs.DurationVar(&ic.SSHConnectTimeout, "initializer-ssh-connect-timeout", ic.SSHConnectTimeout, "bound of an SSH dial and login")
	fs.DurationVar(&ic.SSHExecTimeout, "initializer-ssh-exec-timeout", ic.SSHExecTimeout, "bound of the upload and the takeover command")
}

// Check returns an error naming the first field that is not valid.
func (ic *InitializerConfig) Check() error {
	if err := ic.ControlLoopConfig.Check(); err != nil {
		return fmt.Errorf("initializer: %w", err)
	}
	switch {
	case len(ic.Executable) == 0:
		return errors.New("initializer: Executable must be set")
	case !path.IsAbs(ic.TargetPath):
		return fmt.Errorf("initializer: TargetPath %q must be an absolute path", ic.TargetPath)
	case ic.Endpoint == "":
		return errors.New("initializer: Endpoint must be set")
	case ic.SSHConnectTimeout <= 0:
		return errors.New("initializer: SSHConnectTimeout must be set")
	case ic.SSHExecTimeout <= 0:
		return errors.New("initializer: SSHExecTimeout must be set")
	}
	if len(ic.EndpointCACertificate) > 0 {
		if _, err := x509.ParseCertificate(ic.EndpointCACertificate); err != nil {
			return fmt.Errorf("initializer: EndpointCACertificate is not a DER certificate: %w", err)
		}
	}
	if ic.AgentStartTimeout <= 0 {
		ic.AgentStartTimeout = 30 * time.Minute
	}
	return nil
}

// fileValue is a pflag.Value that reads the named file; der converts a PEM
// certificate to DER.
type fileValue struct {
	b    *[]byte
	der  bool
	name string
}

func (v *fileValue) String() string { return v.name }
func (v *fileValue) Type() string   { return "file" }
func (v *fileValue) Set(s string) error {
	b, err := os.ReadFile(s)
	if err != nil {
		return err
	}
	if v.der {
		if blk, _ := pem.Decode(b); blk != nil {
			b = blk.Bytes
		}
	}
	*v.b, v.name = b, s
	return nil
}

// SSHKey is the key the Initializer logs in with.
type SSHKey struct {
	// Key to use. If not provided, it is loaded from KeyPersistPath, and if
	// that does not exist either, generated and persisted there.
	Key ed25519.PrivateKey
	// KeyPersistPath is where the key is loaded from and persisted to
	// (OpenSSH private key format, mode 0600) when Key is not set. Either
	// KeyPersistPath or Key must be set.
	KeyPersistPath string

	mu sync.Mutex
}

// RegisterFlags registers ssh-key-path on pflag.CommandLine.
func (k *SSHKey) RegisterFlags() { k.AddFlags(pflag.CommandLine) }

// AddFlags registers ssh-key-path on fs.
func (k *SSHKey) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&k.KeyPersistPath, "ssh-key-path", k.KeyPersistPath, "the ed25519 SSH key the initializer logs in with; generated there when missing")
}

// Signer returns the key as an ssh.Signer, loading or generating it first:
// Key if set; else the file at KeyPersistPath; else a new ed25519 key
// written there (created exclusively, 0600; its directory must exist). A
// file that holds no ed25519 key is an error, never overwritten.
func (k *SSHKey) Signer() (xssh.Signer, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.Key == nil {
		if k.KeyPersistPath == "" {
			return nil, errors.New("ssh key: neither Key nor KeyPersistPath is set")
		}
		b, err := os.ReadFile(k.KeyPersistPath)
		switch {
		case err == nil:
			raw, err := xssh.ParseRawPrivateKey(b)
			if err != nil {
				return nil, fmt.Errorf("ssh key %s: %w", k.KeyPersistPath, err)
			}
			pk, ok := raw.(*ed25519.PrivateKey)
			if !ok {
				return nil, fmt.Errorf("ssh key %s: a %T, want ed25519", k.KeyPersistPath, raw)
			}
			k.Key = *pk
		case errors.Is(err, os.ErrNotExist):
			_, pk, err := ed25519.GenerateKey(rand.Reader)
			if err != nil {
				return nil, fmt.Errorf("ssh key: generate: %w", err)
			}
			blk, err := xssh.MarshalPrivateKey(pk, "booty initializer")
			if err != nil {
				return nil, fmt.Errorf("ssh key: encode: %w", err)
			}
			f, err := os.OpenFile(k.KeyPersistPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return nil, fmt.Errorf("ssh key: persist: %w", err)
			}
			if _, err := f.Write(pem.EncodeToMemory(blk)); err != nil {
				f.Close()
				os.Remove(k.KeyPersistPath)
				return nil, fmt.Errorf("ssh key: persist %s: %w", k.KeyPersistPath, err)
			}
			if err := f.Close(); err != nil {
				return nil, fmt.Errorf("ssh key: persist %s: %w", k.KeyPersistPath, err)
			}
			k.Key = pk
		default:
			return nil, fmt.Errorf("ssh key: %w", err)
		}
	}
	return xssh.NewSignerFromKey(k.Key)
}

// AuthorizedKey returns the key's line for an authorized_keys file.
func (k *SSHKey) AuthorizedKey() (string, error) {
	s, err := k.Signer()
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(xssh.MarshalAuthorizedKey(s.PublicKey()))), nil
}

// Initializer takes over machines that run Linux and have no agent: it
// uploads booty over SSH and runs `booty takeover`, which kexecs into
// booty's kernel and initramfs; the agent then enrolls with Endpoint.
type Initializer struct {
	InitializerConfig
	src    Source
	client ssh.Client
	log    *slog.Logger
}

// NewInitializer checks the config and returns the loop for RunControlLoop.
func NewInitializer(src Source, client ssh.Client, ic InitializerConfig) (*Initializer, error) {
	if src == nil || client == nil {
		return nil, errors.New("new initializer: a source and an SSH client are required")
	}
	if err := ic.Check(); err != nil {
		return nil, err
	}
	return &Initializer{InitializerConfig: ic, src: src, client: client, log: ic.Logger.With("component", "initializer")}, nil
}

// Process returns ProcessInitialize.
func (i *Initializer) Process() bmdb.Process { return ProcessInitialize }

// LoopConfig returns the loop's config.
func (i *Initializer) LoopConfig() *ControlLoopConfig { return &i.ControlLoopConfig }

// Backoff is Monogon's for agent start: 5 minutes growing ×1.2 to 4 hours,
// with up to 20 % jitter.
func (i *Initializer) Backoff() bmdb.Backoff {
	return bmdb.Backoff{Initial: 5 * time.Minute, Maximum: 4 * time.Hour, Exponent: 1.2, Jitter: 0.2}
}

// Filter claims registering machines that Recoverer work does not hold.
func (i *Initializer) Filter() bmdb.Filter {
	return bmdb.Filter{States: []bmdb.State{bmdb.StateRegistering}, Exclusive: []bmdb.Process{ProcessRecover}}
}

// Candidates are the registering machines the source provided that never
// had an agent session and were not taken over within AgentStartTimeout.
func (i *Initializer) Candidates(ctx context.Context, db *bmdb.DB) ([]string, error) {
	ms, err := listMachines(ctx, db, bmdb.StateRegistering)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range ms {
		if m.Labels[LabelProvider] != i.src.Name() {
			continue
		}
		need, err := i.needsTakeover(ctx, db, m.ID)
		if err != nil {
			return nil, err
		}
		if need {
			out = append(out, m.ID)
		}
	}
	return out, nil
}

func (i *Initializer) needsTakeover(ctx context.Context, db *bmdb.DB, id string) (bool, error) {
	if _, err := db.GetAgentSession(ctx, id); err == nil {
		return false, nil
	} else if !errors.Is(err, bmdb.ErrNotFound) {
		return false, err
	}
	h, err := db.WorkHistory(ctx, id)
	if err != nil {
		return false, err
	}
	for j := len(h) - 1; j >= 0; j-- {
		if h[j].Process == ProcessInitialize && h[j].Event == bmdb.WorkFinished {
			return time.Since(h[j].Time) > i.AgentStartTimeout, nil
		}
	}
	return true, nil
}

// Work takes machine m over: it looks m up in the source for its SSH
// address, dials it, uploads the executable (and the CA), runs
// `TARGET takeover --server ENDPOINT [--ca-cert TARGET.ca.pem]` and requires
// TakeoverOK in its output, with exit status 0 or the connection closing
// after it (booty kexec-ed). It records an AgentTakeover event. A machine
// that needs no takeover any more is skipped; every failure fails the work
// (backoff) with an error naming the step.
func (i *Initializer) Work(ctx context.Context, db *bmdb.DB, m bmdb.Machine) (*bmdb.Transition, error) {
	if need, err := i.needsTakeover(ctx, db, m.ID); err != nil {
		return nil, err
	} else if !need {
		return nil, fmt.Errorf("machine %s has an agent session or was taken over recently: %w", m.Name, ErrSkip)
	}
	sm, err := i.src.Get(ctx, m.Name)
	if err != nil {
		return nil, fmt.Errorf("take over %s: %w", m.Name, err)
	}
	if sm.SSHAddress == "" {
		return nil, fmt.Errorf("take over %s: the source gives no SSH address", m.Name)
	}
	out, err := i.takeover(ctx, sm.SSHAddress)
	if err != nil {
		return nil, fmt.Errorf("take over %s at %s: %w", m.Name, sm.SSHAddress, err)
	}
	if err := db.RecordEvent(ctx, m.ID, bmdb.EventNormal, ReasonAgentTakeover,
		fmt.Sprintf("booty uploaded to %s:%s and started: %s", sm.SSHAddress, i.TargetPath, out)); err != nil {
		return nil, err
	}
	i.log.Info("machine taken over", "machine", m.Name, "address", sm.SSHAddress)
	return nil, nil
}

// takeover runs the SSH part and returns the takeover's OK line.
func (i *Initializer) takeover(ctx context.Context, addr string) (string, error) {
	c, err := i.client.Dial(ctx, addr, i.SSHConnectTimeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	ectx, cancel := context.WithTimeout(ctx, i.SSHExecTimeout)
	defer cancel()
	if err := c.Upload(ectx, i.TargetPath, i.Executable, 0o755); err != nil {
		return "", err
	}
	cmd := ssh.Quote(i.TargetPath) + " takeover --server " + ssh.Quote(i.Endpoint)
	if len(i.EndpointCACertificate) > 0 {
		ca := i.TargetPath + ".ca.pem"
		if err := c.Upload(ectx, ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: i.EndpointCACertificate}), 0o644); err != nil {
			return "", err
		}
		cmd += " --ca-cert " + ssh.Quote(ca)
	}
	stdout, stderr, err := c.Execute(ectx, cmd, nil)
	line := okLine(stdout)
	switch {
	case err != nil && line != "" && ssh.ExitStatusMissing(err):
		return line, nil // booty kexec-ed before the exit status went out
	case err != nil:
		return "", fmt.Errorf("%w (stdout %q, stderr %q)", err, tail(stdout), tail(stderr))
	case line == "":
		return "", fmt.Errorf("takeover exited 0 without %q (stdout %q, stderr %q)", TakeoverOK, tail(stdout), tail(stderr))
	}
	return line, nil
}

func okLine(out []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); strings.HasPrefix(l, TakeoverOK) {
			return l
		}
	}
	return ""
}

// tail returns the last 512 bytes of b, for error messages.
func tail(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 512 {
		b = b[len(b)-512:]
	}
	return string(b)
}

// FakeSSHClient is a Client that pretends to take machines over: every
// connection accepts uploads and answers a takeover command as booty would
// (TakeoverOK and the arguments), recording both. Fail, when set, makes
// Dial fail with it; Answer, when set, replaces the takeover's stdout.
type FakeSSHClient struct {
	Fail   error
	Answer string

	mu       sync.Mutex
	uploads  map[string][]byte // "address:path" → data
	commands []string          // "address: command"
}

// Dial returns a fake connection to address.
func (f *FakeSSHClient) Dial(ctx context.Context, address string, _ time.Duration) (ssh.Connection, error) {
	if f.Fail != nil {
		return nil, f.Fail
	}
	return &fakeConn{f: f, addr: address}, nil
}

// Uploads returns what was uploaded, by "address:path".
func (f *FakeSSHClient) Uploads() map[string][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]byte{}
	for k, v := range f.uploads {
		out[k] = v
	}
	return out
}

// Commands returns the commands run, "address: command", in order.
func (f *FakeSSHClient) Commands() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.commands...)
}

type fakeConn struct {
	f    *FakeSSHClient
	addr string
}

func (c *fakeConn) Execute(_ context.Context, command string, _ []byte) ([]byte, []byte, error) {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	c.f.commands = append(c.f.commands, c.addr+": "+command)
	if c.f.Answer != "" {
		return []byte(c.f.Answer), nil, nil
	}
	if _, args, ok := strings.Cut(command, " takeover "); ok {
		return []byte(TakeoverOK + " " + args + "\n"), nil, nil
	}
	return nil, []byte("fake ssh: unknown command"), fmt.Errorf("fake ssh %s: unknown command %q", c.addr, command)
}

func (c *fakeConn) Upload(_ context.Context, targetPath string, data []byte, _ os.FileMode) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if c.f.uploads == nil {
		c.f.uploads = map[string][]byte{}
	}
	c.f.uploads[c.addr+":"+targetPath] = append([]byte(nil), data...)
	return nil
}

func (c *fakeConn) Close() error { return nil }
