package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptrace"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
)

// TestTLSParkedPoll: over TLS, an agent's command long poll is parked and
// answered (204 at the end of its wait), and its connection is handed back:
// the agent's next request reuses it.
func TestTLSParkedPoll(t *testing.T) {
	certPath, keyPath, pool := selfSigned(t)
	d := startBootyd(t, "--listen", "127.0.0.1:0", "--tls-cert", certPath, "--tls-key", keyPath, "--state-dir", t.TempDir())
	base := "https://" + d.addr
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	do := func(method, url, token string, body any) (int, []byte, bool) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		var reused bool
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }})
		req, _ := http.NewRequestWithContext(ctx, method, url, rd)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b, reused
	}
	code, body, _ := do("POST", base+"/v1/enroll", "", api.EnrollRequest{MACs: []string{"52:54:00:00:50:01"}})
	var en api.EnrollResponse
	if code != 200 || json.Unmarshal(body, &en) != nil || en.Token == "" {
		t.Fatalf("enroll over TLS: %d %s", code, body)
	}
	if code, body, _ := do("GET", base+"/v1/machines/"+en.MAC+"/command?wait=1", en.Token, nil); code != http.StatusNoContent {
		t.Fatalf("poll over TLS: %d %s, want 204", code, body)
	}
	if code, body, reused := do("POST", base+"/v1/machines/"+en.MAC+"/heartbeat", en.Token, api.Heartbeat{}); code != 200 || !reused {
		t.Fatalf("heartbeat after the poll: %d %s, connection reused %v (want kept alive)", code, body, reused)
	}
	d.stop(t)
}
