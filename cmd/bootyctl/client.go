package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// maxResponseBytes bounds what bootyctl reads of one answer.
const maxResponseBytes = 64 << 20

// client talks to bootyd's operator API with the operator token.
type client struct {
	base  *url.URL
	token string
	http  *http.Client
}

// connOptions are the global flags that say how to reach bootyd.
type connOptions struct {
	server       string
	tokenFile    string
	caCert       string
	insecureHTTP bool
	timeout      time.Duration
}

// newClient checks the connection flags and builds a client: https:// with
// the system roots or --ca-cert, http:// only with --insecure-http. The
// token is read from --token-file (its first non-empty line); it is never
// printed, not even in errors.
func newClient(o connOptions) (*client, error) {
	if o.server == "" {
		return nil, usageError{"--server", "is required: bootyd's URL, e.g. https://10.0.0.1:8443 (or set BOOTY_SERVER)"}
	}
	u, err := url.Parse(o.server)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, usageError{"--server", fmt.Sprintf("%q: want an http:// or https:// URL with a host, e.g. https://10.0.0.1:8443", o.server)}
	}
	if u.Scheme == "http" && !o.insecureHTTP {
		return nil, usageError{"--server", fmt.Sprintf("%q is plain HTTP: the operator token would cross the network in clear; use https:// or add --insecure-http", o.server)}
	}
	if u.Scheme == "https" && o.insecureHTTP {
		return nil, usageError{"--insecure-http", fmt.Sprintf("goes with an http:// --server, not %q", o.server)}
	}
	if o.caCert != "" && u.Scheme != "https" {
		return nil, usageError{"--ca-cert", "goes with an https:// --server"}
	}
	if o.tokenFile == "" {
		return nil, usageError{"--token-file", "is required: a file holding an operator token (one of bootyd's --operator-token-file lines), or set BOOTY_TOKEN_FILE"}
	}
	token, err := readToken(o.tokenFile)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	if o.caCert != "" {
		pem, err := os.ReadFile(o.caCert)
		if err != nil {
			return nil, fmt.Errorf("read --ca-cert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usageError{"--ca-cert", fmt.Sprintf("%s holds no PEM certificate", o.caCert)}
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	if o.timeout <= 0 {
		o.timeout = 30 * time.Second
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return &client{base: u, token: token, http: &http.Client{Transport: tr, Timeout: o.timeout}}, nil
}

// readToken returns the first non-empty, non-comment line of path, the
// --token-file; the token never goes into an error.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read --token-file: %w", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			return line, nil
		}
	}
	return "", usageError{"--token-file", fmt.Sprintf("%s holds no operator token (want one on a line of its own)", path)}
}

// httpError is a non-2xx answer of bootyd.
type httpError struct {
	Method, Path string
	Status       int
	Message      string
}

func (e *httpError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.Status, msg)
}

// do sends one request and returns the raw answer body of a 2xx answer; a
// non-2xx answer becomes an *httpError carrying bootyd's error message.
func (c *client) do(ctx context.Context, method, path string, query url.Values, body any) ([]byte, error) {
	u := *c.base
	u.Path += path
	u.RawQuery = query.Encode()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("%s %s: encode request: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if len(b) > maxResponseBytes {
		return nil, fmt.Errorf("%s %s: answer larger than %d bytes", method, path, maxResponseBytes)
	}
	if resp.StatusCode/100 != 2 {
		he := &httpError{Method: method, Path: path, Status: resp.StatusCode}
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil {
			he.Message = e.Error
		}
		return nil, he
	}
	return b, nil
}

// get fetches path and decodes it into out (when non-nil); it returns the raw body.
func (c *client) get(ctx context.Context, path string, query url.Values, out any) ([]byte, error) {
	b, err := c.do(ctx, http.MethodGet, path, query, nil)
	if err != nil {
		return nil, err
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return nil, fmt.Errorf("GET %s: decode answer: %w", path, err)
		}
	}
	return b, nil
}

// isNotFound says whether err is bootyd's 404.
func isNotFound(err error) bool {
	var he *httpError
	return errors.As(err, &he) && he.Status == http.StatusNotFound
}
