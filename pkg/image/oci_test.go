package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// testRegistry is an in-process OCI registry for one repository: it
// answers /v2/REPO/manifests/DIGEST and /v2/REPO/blobs/DIGEST only with a
// bearer token that /token hands out (to user:pass when auth is set), and
// serves blobs through imgServer (Range, cuts).
type testRegistry struct {
	repo      string
	manifests map[string][]byte // digest → body
	mediaType string
	blobs     map[string]*imgServer
	basic     string // "user:pass" required at /token, "" anonymous
	tokens    int
}

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func (r *testRegistry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path == "/token" {
		if r.basic != "" {
			u, p, ok := req.BasicAuth()
			if !ok || u+":"+p != r.basic {
				http.Error(w, "bad credentials", http.StatusUnauthorized)
				return
			}
		}
		if req.URL.Query().Get("scope") != "repository:"+r.repo+":pull" || req.URL.Query().Get("service") != "test-registry" {
			http.Error(w, "bad scope "+req.URL.RawQuery, http.StatusBadRequest)
			return
		}
		r.tokens++
		json.NewEncoder(w).Encode(map[string]string{"token": "tok-123"})
		return
	}
	if req.Header.Get("Authorization") != "Bearer tok-123" {
		w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="http://%s/token",service="test-registry",scope="repository:%s:pull"`, req.Host, r.repo))
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	prefix := "/v2/" + r.repo + "/"
	rest, ok := strings.CutPrefix(req.URL.Path, prefix)
	switch {
	case ok && strings.HasPrefix(rest, "manifests/"):
		m, found := r.manifests[strings.TrimPrefix(rest, "manifests/")]
		if !found {
			http.NotFound(w, req)
			return
		}
		w.Header().Set("Content-Type", r.mediaType)
		w.Write(m)
	case ok && strings.HasPrefix(rest, "blobs/"):
		b, found := r.blobs[strings.TrimPrefix(rest, "blobs/")]
		if !found {
			http.NotFound(w, req)
			return
		}
		b.ServeHTTP(w, req)
	default:
		http.NotFound(w, req)
	}
}

// manifest renders a manifest of mediaType with the given layers.
func manifest(mediaType string, layers ...ociDescriptor) []byte {
	m := map[string]any{"schemaVersion": 2, "mediaType": mediaType}
	if mediaType == MediaTypeOCIArtifact {
		m["blobs"] = layers
	} else {
		m["layers"] = layers
		m["config"] = ociDescriptor{MediaType: "application/vnd.oci.empty.v1+json", Digest: digestOf([]byte("{}")), Size: 2}
	}
	b, _ := json.Marshal(m)
	return b
}

func TestWriteOCI(t *testing.T) {
	img := gptImage(t, testImageSize, true, 50)
	zst := compress(t, FormatZstd, img)
	other := gptImage(t, testImageSize, true, 51) // raw: a wrong blob that streams
	layer := ociDescriptor{MediaType: "application/vnd.booty.disk.image.v1+zstd", Digest: digestOf(zst), Size: int64(len(zst))}
	readme := ociDescriptor{MediaType: "text/markdown", Digest: digestOf([]byte("# hi")), Size: 4}
	single := manifest(MediaTypeOCIManifest, layer)

	tests := []struct {
		name      string
		mediaType string
		manifest  []byte
		ref       string // defaults to the manifest's digest
		blob      []byte // served for the layer digest (default zst)
		cuts      []int64
		basic     string
		opts      func(*Options)
		wantErr   error
		changed   bool // target was written to before the failure
	}{
		{name: "OCI image manifest, anonymous token", mediaType: MediaTypeOCIManifest, manifest: single},
		{name: "artifact manifest", mediaType: MediaTypeOCIArtifact, manifest: manifest(MediaTypeOCIArtifact, layer)},
		{name: "Docker v2 manifest, password", mediaType: MediaTypeDockerManifest, manifest: manifest(MediaTypeDockerManifest, layer), basic: "u:p",
			opts: func(o *Options) { o.OCIUsername, o.OCIPassword = "u", "p" }},
		{name: "two layers, disk image by media type", mediaType: MediaTypeOCIManifest, manifest: manifest(MediaTypeOCIManifest, readme, layer)},
		{name: "blob resumes after cuts", mediaType: MediaTypeOCIManifest, manifest: single, cuts: []int64{int64(len(zst)) / 3, int64(len(zst)) / 3}},
		{name: "token given", mediaType: MediaTypeOCIManifest, manifest: single, opts: func(o *Options) { o.OCIToken = "tok-123" }},
		{name: "manifest does not match the reference", mediaType: MediaTypeOCIManifest, manifest: single, ref: digestOf([]byte("x")), wantErr: ErrChecksumMismatch},
		{name: "blob does not match its digest", mediaType: MediaTypeOCIManifest, manifest: single, blob: other[:len(zst)], wantErr: ErrChecksumMismatch, changed: true},
		{name: "wrong password", mediaType: MediaTypeOCIManifest, manifest: single, basic: "u:p", opts: func(o *Options) { o.OCIUsername, o.OCIPassword = "u", "x" }, wantErr: ErrFetch},
		{name: "checksum option differs from the layer digest", mediaType: MediaTypeOCIManifest, manifest: single, opts: func(o *Options) { o.Checksum = sha(other) }, wantErr: ErrChecksumMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			blob := tt.blob
			if blob == nil {
				blob = zst
			}
			srv := &imgServer{data: blob, etag: `"` + layer.Digest + `"`, cutAfter: tt.cuts}
			reg := &testRegistry{repo: "os/disk", mediaType: tt.mediaType, basic: tt.basic,
				manifests: map[string][]byte{digestOf(tt.manifest): tt.manifest},
				blobs:     map[string]*imgServer{layer.Digest: srv}}
			ref := tt.ref
			if ref == "" {
				ref = digestOf(tt.manifest)
			} else {
				reg.manifests[ref] = tt.manifest
			}
			ts := httptest.NewServer(reg)
			defer ts.Close()
			old := gptImage(t, 12*mib, false, 52)
			mem := &memTarget{buf: bytes.Clone(old)}
			o := httpOpts(t, "oci+http://"+strings.TrimPrefix(ts.URL, "http://")+"/os/disk@"+ref)
			o.Target, o.TargetWriter, o.ChunkSize = "mem", mem, mib
			if tt.opts != nil {
				tt.opts(&o)
			}
			res, err := Write(context.Background(), o)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Write = %v, want %v", err, tt.wantErr)
				}
				t.Logf("error: %v", err)
				if tt.changed {
					assertInvalidated(t, mem.buf, int64(len(img)))
				} else if len(mem.log) != 0 {
					t.Errorf("target touched: %v", mem.log[:1])
				}
				if strings.Contains(err.Error(), "tok-123") {
					t.Errorf("error leaks the token")
				}
				return
			}
			if err != nil {
				t.Fatalf("Write: %v (blob requests %q)", err, srv.ranges)
			}
			if !bytes.Equal(mem.buf[:len(img)], img) {
				t.Fatal("target does not hold the image")
			}
			// Only the blob digest was given: the image is not hashed.
			if res.SourceDigest != layer.Digest || res.ImageDigest != "" {
				t.Errorf("digests %s %q, want %s and none", res.SourceDigest, res.ImageDigest, layer.Digest)
			}
			if res.Resumes != len(tt.cuts) {
				t.Errorf("Resumes = %d, want %d", res.Resumes, len(tt.cuts))
			}
			if refetched := srv.streamed.Load() - int64(len(zst)); refetched != 0 {
				t.Errorf("%d blob bytes fetched twice", refetched)
			}
		})
	}
}

func TestWriteOCITLS(t *testing.T) {
	img := gptImage(t, testImageSize, false, 53)
	layer := ociDescriptor{MediaType: "application/octet-stream", Digest: digestOf(img), Size: int64(len(img))}
	m := manifest(MediaTypeOCIManifest, layer)
	reg := &testRegistry{repo: "disk", mediaType: MediaTypeOCIManifest, manifests: map[string][]byte{digestOf(m): m},
		blobs: map[string]*imgServer{layer.Digest: {data: img, etag: `"x"`}}}
	ts := httptest.NewTLSServer(reg)
	defer ts.Close()
	o := httpOpts(t, "oci://"+strings.TrimPrefix(ts.URL, "https://")+"/disk@"+digestOf(m))
	o.CACert = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	o.HeaderTimeout = 5 * time.Second
	o.OCIToken = "tok-123" // the challenge's realm is http://, not served here
	if _, err := Write(context.Background(), o); err != nil {
		t.Fatalf("Write over TLS: %v", err)
	}
	if !bytes.Equal(readFile(t, o.Target), img) {
		t.Fatal("target differs")
	}
}

func TestParseChallenge(t *testing.T) {
	got := parseChallenge(`realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push"`)
	want := map[string]string{"realm": "https://auth.example/token", "service": "registry.example", "scope": "repository:a/b:pull,push"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}
