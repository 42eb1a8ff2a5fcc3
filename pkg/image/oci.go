package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/booty-dev/booty/pkg/httpfetch"
	"github.com/booty-dev/booty/pkg/redact"
)

// OCI media types Write accepts for the manifest of an oci:// source.
const (
	MediaTypeOCIManifest    = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeOCIArtifact    = "application/vnd.oci.artifact.manifest.v1+json"
	MediaTypeDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"

	// AnnotationDiskImage marks the layer that holds the disk image when
	// an artifact has several ("true").
	AnnotationDiskImage = "dev.booty.disk-image"
)

const maxManifestSize = 4 << 20

func isOCI(s string) bool {
	return strings.HasPrefix(s, "oci://") || strings.HasPrefix(s, "oci+http://")
}

// ociDescriptor is a content descriptor of a manifest.
type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
}

type ociManifest struct {
	MediaType string          `json:"mediaType"`
	Layers    []ociDescriptor `json:"layers"` // image manifest, Docker v2
	Blobs     []ociDescriptor `json:"blobs"`  // artifact manifest
}

// registry talks to one repository of an OCI distribution registry,
// answering a Bearer challenge (realm, service, scope) once per request
// with a token from the realm, fetched anonymously or with
// Options.OCIUsername/OCIPassword; Options.OCIToken is sent as is.
type registry struct {
	o      *Options
	client *http.Client
	base   string // scheme://host
	repo   string
	token  string
}

// openOCI resolves oci://REGISTRY/REPO@sha256:HEX: it fetches the
// manifest, checks it hashes to the reference's digest, picks the disk
// image layer (the only one, or the one marked by AnnotationDiskImage or a
// media type naming a disk image) and opens its blob as a resumable HTTP
// source whose Digest is the layer digest.
func openOCI(ctx context.Context, o *Options, u *url.URL) (source, error) {
	name := u.Host + u.Path
	oref, err := ParseOCIRef(o.Source)
	if err != nil {
		return nil, fmt.Errorf("open OCI source: %w: %w", err, ErrBadSource)
	}
	repo, ref := oref.Repository, oref.Digest
	want, err := parseChecksum(ref)
	if err != nil {
		return nil, fmt.Errorf("open OCI source %s: %w", name, err)
	}
	c, err := httpClient(o)
	if err != nil {
		return nil, err
	}
	scheme := "https"
	if oref.PlainHTTP {
		scheme = "http"
	}
	r := &registry{o: o, client: c, base: scheme + "://" + oref.Registry, repo: repo, token: o.OCIToken}

	body, err := r.get(ctx, "/v2/"+repo+"/manifests/"+ref,
		strings.Join([]string{MediaTypeOCIManifest, MediaTypeOCIArtifact, MediaTypeDockerManifest}, ", "))
	if err != nil {
		return nil, fmt.Errorf("fetch manifest of %s: %w", name, err)
	}
	if sum := sha256.Sum256(body); hex.EncodeToString(sum[:]) != hex.EncodeToString(want.sum) {
		return nil, fmt.Errorf("verify manifest of %s: it has sha256:%x: %w", name, sum, ErrChecksumMismatch)
	}
	layer, err := pickLayer(body)
	if err != nil {
		return nil, fmt.Errorf("read manifest of %s: %w", name, err)
	}
	digest, err := parseChecksum(layer.Digest)
	if err != nil {
		return nil, fmt.Errorf("read manifest of %s: layer digest %q: %w", name, layer.Digest, ErrBadSource)
	}
	o.Log.Info("OCI disk image layer", "source", name, "media_type", layer.MediaType, "digest", layer.Digest, "size", layer.Size)

	bu, err := url.Parse(r.base + "/v2/" + repo + "/blobs/" + layer.Digest)
	if err != nil {
		return nil, fmt.Errorf("open blob of %s: %w: %w", name, ErrBadSource, err)
	}
	// A blob is content-addressed: the digest guards a resume, and the
	// bearer token must come along (httpfetch.CheckRedirect drops it on a
	// redirect to another host or port, such as a CDN).
	s := &httpSource{ctx: ctx, o: o, client: c, u: bu, name: name + " blob " + layer.Digest, log: o.Log, size: -1,
		digest: digest, header: r.authHeader()}
	s, err = startHTTP(s)
	if err != nil {
		return nil, err
	}
	if layer.Size > 0 && s.size >= 0 && s.size != layer.Size {
		s.Close()
		return nil, fmt.Errorf("fetch %s: blob is %d bytes, the manifest says %d: %w", s.name, s.size, layer.Size, ErrSourceChanged)
	}
	return s, nil
}

// pickLayer returns the disk image layer of a manifest.
func pickLayer(body []byte) (ociDescriptor, error) {
	var m ociManifest
	if err := json.Unmarshal(body, &m); err != nil {
		return ociDescriptor{}, fmt.Errorf("%w: %w", ErrBadSource, err)
	}
	layers := append(m.Layers, m.Blobs...)
	switch len(layers) {
	case 0:
		return ociDescriptor{}, fmt.Errorf("manifest (%s) has no layers: %w", m.MediaType, ErrBadSource)
	case 1:
		return layers[0], nil
	}
	var marked []ociDescriptor
	for _, l := range layers {
		mt := strings.ToLower(l.MediaType)
		if l.Annotations[AnnotationDiskImage] == "true" || strings.Contains(mt, "disk") {
			marked = append(marked, l)
		}
	}
	if len(marked) != 1 {
		return ociDescriptor{}, fmt.Errorf("manifest has %d layers and %d marked as the disk image (annotation %s=true or a media type naming a disk): %w",
			len(layers), len(marked), AnnotationDiskImage, ErrBadSource)
	}
	return marked[0], nil
}

func (r *registry) authHeader() http.Header {
	h := http.Header{}
	if r.token != "" {
		h.Set("Authorization", "Bearer "+r.token)
	}
	return h
}

// get fetches a small document, answering one Bearer challenge; each
// request is retried and idle-bounded as Options.fetch does.
func (r *registry) get(ctx context.Context, path, accept string) ([]byte, error) {
	challenged := false
	for {
		h := r.authHeader()
		h.Set("Accept", accept)
		resp, err := r.o.fetch(ctx, r.client, "fetch "+r.base+path, httpfetch.Request{URL: r.base + path, Header: h, Limit: maxManifestSize},
			func(code int) bool { return code == http.StatusUnauthorized && !challenged })
		if err != nil {
			return nil, err
		}
		if resp.Code == http.StatusUnauthorized {
			challenged = true
			if err := r.authorize(ctx, resp.Header.Get("WWW-Authenticate")); err != nil {
				return nil, err
			}
			continue
		}
		return resp.Body, nil
	}
}

// authorize answers a "Bearer realm=...,service=...,scope=..." challenge
// by fetching a token from the realm. The realm must be https, or http
// only for a plain-HTTP registry with Options.AllowHTTP: credentials never
// travel in clear from an https registry.
func (r *registry) authorize(ctx context.Context, challenge string) error {
	scheme, params, _ := strings.Cut(challenge, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return fmt.Errorf("registry %s wants %q authentication, only Bearer is supported: %w", r.base, scheme, ErrBadSource)
	}
	p := parseChallenge(params)
	realm, err := url.Parse(p["realm"])
	if err != nil || p["realm"] == "" || (realm.Scheme != "https" && realm.Scheme != "http") {
		return fmt.Errorf("registry %s: bad token realm %q: %w", r.base, redact.URL(p["realm"]), ErrBadSource)
	}
	if err := httpfetch.CheckURL(realm.String(), r.o.AllowHTTP && strings.HasPrefix(r.base, "http:")); err != nil {
		return fmt.Errorf("registry %s: token realm: %w: %w", r.base, err, ErrBadSource)
	}
	q := realm.Query()
	if v := p["service"]; v != "" {
		q.Set("service", v)
	}
	scope := p["scope"]
	if scope == "" {
		scope = "repository:" + r.repo + ":pull"
	}
	q.Set("scope", scope)
	realm.RawQuery = q.Encode()
	h := http.Header{}
	if r.o.OCIUsername != "" || r.o.OCIPassword != "" {
		req := http.Request{Header: h}
		req.SetBasicAuth(r.o.OCIUsername, r.o.OCIPassword)
	}
	resp, err := r.o.fetch(ctx, r.client, "fetch registry token", httpfetch.Request{URL: realm.String(), Header: h, Limit: 1 << 20}, nil)
	if err != nil {
		return fmt.Errorf("fetch registry token from %s: %w", redactURL(realm), err)
	}
	var tok struct {
		Token       string `json:"token"`
		AccessToken string `json:"access_token"`
	}
	if err := json.Unmarshal(resp.Body, &tok); err != nil {
		return fmt.Errorf("read registry token from %s: %w", redactURL(realm), err)
	}
	r.token = tok.Token
	if r.token == "" {
		r.token = tok.AccessToken
	}
	if r.token == "" {
		return fmt.Errorf("registry token endpoint %s returned no token: %w", redactURL(realm), ErrFetch)
	}
	return nil
}

// parseChallenge parses `k="v",k2="v2"` parameters of WWW-Authenticate.
func parseChallenge(s string) map[string]string {
	m := map[string]string{}
	for s = strings.TrimSpace(s); s != ""; {
		k, rest, ok := strings.Cut(s, "=")
		if !ok {
			break
		}
		k = strings.ToLower(strings.TrimSpace(k))
		var v string
		if strings.HasPrefix(rest, `"`) {
			end := strings.Index(rest[1:], `"`)
			if end < 0 {
				v, rest = rest[1:], ""
			} else {
				v, rest = rest[1:1+end], rest[2+end:]
			}
		} else {
			v, rest, _ = strings.Cut(rest, ",")
			rest = "," + rest
		}
		m[k] = v
		s = strings.TrimLeft(rest, ", ")
	}
	return m
}

var _ io.Reader = (*httpSource)(nil)
