// Package ssh is the SSH client the Initializer takes machines over with:
// an interface (Client, Connection) so tests can fake it, and PlainClient
// over golang.org/x/crypto/ssh with public-key authentication.
//
// Uploads need no SFTP: the data is streamed to `cat` on the target into a
// temporary file next to the destination, which is then chmod-ed and
// renamed into place, so a failed upload never leaves a half-written
// executable at the destination.
package ssh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"strings"
	"time"

	xssh "golang.org/x/crypto/ssh"
)

// Client dials machines.
type Client interface {
	// Dial connects to address (host:port) and authenticates, within
	// connectTimeout.
	Dial(ctx context.Context, address string, connectTimeout time.Duration) (Connection, error)
}

// Connection is an authenticated SSH connection.
type Connection interface {
	// Execute runs command with stdin and returns its output. A command
	// that exits non-zero gives an *ssh.ExitError (golang.org/x/crypto/ssh),
	// a connection that closed before an exit status an *ssh.ExitMissingError;
	// the output read so far is returned with either. ctx ending closes the
	// session.
	Execute(ctx context.Context, command string, stdin []byte) (stdout, stderr []byte, err error)
	// Upload writes data to targetPath with mode, atomically.
	Upload(ctx context.Context, targetPath string, data []byte, mode os.FileMode) error
	// Close closes the connection.
	Close() error
}

// PlainClient dials with x/crypto/ssh and authenticates with Signer.
type PlainClient struct {
	// Signer is the private key to authenticate with; required.
	Signer xssh.Signer
	// Username; default "root".
	Username string
	// HostKeyCallback verifies the machine's host key; required (use
	// ssh.FixedHostKey, knownhosts, or, knowingly, ssh.InsecureIgnoreHostKey).
	HostKeyCallback xssh.HostKeyCallback
}

// Dial connects and authenticates. It fails without a signer or a host key
// callback, when the TCP connection or the handshake does not complete within
// connectTimeout, or when the key is refused.
func (c *PlainClient) Dial(ctx context.Context, address string, connectTimeout time.Duration) (Connection, error) {
	if c.Signer == nil || c.HostKeyCallback == nil {
		return nil, fmt.Errorf("ssh dial %s: the client needs a signer and a host key callback", address)
	}
	if connectTimeout <= 0 {
		connectTimeout = 30 * time.Second
	}
	user := c.Username
	if user == "" {
		user = "root"
	}
	dctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(dctx, "tcp", address)
	if err != nil {
		return nil, fmt.Errorf("ssh dial %s: %w", address, err)
	}
	deadline, _ := dctx.Deadline()
	nc.SetDeadline(deadline)
	stop := context.AfterFunc(dctx, func() { nc.SetDeadline(time.Now()) })
	cc, chans, reqs, err := xssh.NewClientConn(nc, address, &xssh.ClientConfig{
		User: user, Auth: []xssh.AuthMethod{xssh.PublicKeys(c.Signer)}, HostKeyCallback: c.HostKeyCallback, Timeout: connectTimeout,
	})
	stop()
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("ssh handshake with %s as %s: %w", address, user, err)
	}
	nc.SetDeadline(time.Time{})
	return &conn{c: xssh.NewClient(cc, chans, reqs), addr: address}, nil
}

type conn struct {
	c    *xssh.Client
	addr string
}

func (c *conn) Execute(ctx context.Context, command string, stdin []byte) ([]byte, []byte, error) {
	s, err := c.c.NewSession()
	if err != nil {
		return nil, nil, fmt.Errorf("ssh %s: new session: %w", c.addr, err)
	}
	defer s.Close()
	var stdout, stderr bytes.Buffer
	s.Stdout, s.Stderr = &stdout, &stderr
	s.Stdin = bytes.NewReader(stdin)
	done := make(chan error, 1)
	go func() { done <- s.Run(command) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		s.Signal(xssh.SIGKILL)
		s.Close()
		<-done
		return stdout.Bytes(), stderr.Bytes(), fmt.Errorf("ssh %s: run %q: %w", c.addr, firstWord(command), ctx.Err())
	}
	if err != nil {
		return stdout.Bytes(), stderr.Bytes(), fmt.Errorf("ssh %s: run %q: %w", c.addr, firstWord(command), err)
	}
	return stdout.Bytes(), stderr.Bytes(), nil
}

func firstWord(cmd string) string {
	if f := strings.Fields(cmd); len(f) > 0 {
		return f[0]
	}
	return cmd
}

func (c *conn) Upload(ctx context.Context, targetPath string, data []byte, mode os.FileMode) error {
	if !path.IsAbs(targetPath) {
		return fmt.Errorf("ssh %s: upload to %q: not an absolute path", c.addr, targetPath)
	}
	tmp := targetPath + ".upload"
	cmd := fmt.Sprintf("umask 077 && cat > %s && chmod %o %s && mv -f %s %s",
		Quote(tmp), mode.Perm(), Quote(tmp), Quote(tmp), Quote(targetPath))
	_, stderr, err := c.Execute(ctx, cmd, data)
	if err != nil {
		return fmt.Errorf("ssh %s: upload %d bytes to %s: %w: %s", c.addr, len(data), targetPath, err, bytes.TrimSpace(stderr))
	}
	return nil
}

func (c *conn) Close() error { return c.c.Close() }

// Quote quotes s for a POSIX shell.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ExitStatusMissing reports whether err says the connection closed before
// the command sent an exit status (a machine that kexec-ed away).
func ExitStatusMissing(err error) bool {
	var em *xssh.ExitMissingError
	return errors.As(err, &em) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)
}
