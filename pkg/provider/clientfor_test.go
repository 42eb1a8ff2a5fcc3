package provider

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// ClientFor lends the provider's connections to a download from bootyd's
// own files (one TCP connection for the config and the image), with no
// overall timeout, and only when the URL is bootyd's origin and the CA the
// provider trusts; otherwise nil.
func TestClientFor(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Path)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	p := &ServerProvider{URL: srv.URL, AllowHTTP: true}
	c, err := p.client()
	if err != nil {
		t.Fatal(err)
	}
	get := func(c *http.Client, path string) {
		t.Helper()
		resp, err := c.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	get(c, "/v1/enroll")
	img := p.ClientFor(srv.URL+"/files/image.zst", "")
	if img == nil {
		t.Fatal("ClientFor(bootyd's own file) = nil")
	}
	if img.Timeout != 0 {
		t.Errorf("download client Timeout %s, want none", img.Timeout)
	}
	get(img, "/files/image.zst")
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for the config and the image, want 1", n)
	}

	for _, tt := range []struct{ url, ca string }{
		{"http://203.0.113.7/files/image.zst", ""},                    // another host
		{srv.URL + "0/files/image.zst", ""},                           // another port
		{"https" + srv.URL[len("http"):] + "/files/image.zst", ""},    // another scheme
		{srv.URL + "/files/image.zst", "-----BEGIN CERTIFICATE-----"}, // another CA
		{"oci://registry/image:tag", ""},
	} {
		if c := p.ClientFor(tt.url, tt.ca); c != nil {
			t.Errorf("ClientFor(%q, ca %q) lent bootyd's connections", tt.url, tt.ca)
		}
	}
}
