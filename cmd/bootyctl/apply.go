package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/image"
)

// maxApplyBytes bounds what apply reads of -f.
const maxApplyBytes = 16 << 20

// API versions and the kind apply accepts.
var hostAPIVersions = []string{"booty.dev/v1alpha1", "metal3.io/v1alpha1"}

const hostKind = "BareMetalHost"

// hostDoc is one BareMetalHost-shaped document, in metal3's field names
// where they exist.
type hostDoc struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Metadata   hostMetadata `json:"metadata"`
	Spec       hostSpec     `json:"spec"`
}

type hostMetadata struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	// Namespace is accepted (metal3's documents carry one) and ignored:
	// bootyd has no namespaces.
	Namespace string `json:"namespace,omitempty"`
}

type hostSpec struct {
	Online                *bool                `json:"online,omitempty"`
	BootMACAddress        string               `json:"bootMACAddress,omitempty"`
	BMC                   *hostBMC             `json:"bmc,omitempty"`
	Image                 *api.ImageSpec       `json:"image,omitempty"`
	RootDeviceHints       *api.RootDeviceHints `json:"rootDeviceHints,omitempty"`
	UserData              *hostData            `json:"userData,omitempty"`
	NetworkData           *hostData            `json:"networkData,omitempty"`
	MetaData              *hostData            `json:"metaData,omitempty"`
	Hostname              string               `json:"hostname,omitempty"`
	ExternallyProvisioned bool                 `json:"externallyProvisioned,omitempty"`
	// ConfigOverrides is booty's own field (not metal3's): a MachineConfig
	// fragment bootyd merges over the config it renders from this spec
	// (handoff, failure policy, …; docs/config.md).
	ConfigOverrides map[string]any `json:"configOverrides,omitempty"`
}

type hostBMC struct {
	Address string `json:"address"`
	// CredentialsName names credentials bootyd already stores (metal3's
	// Secret name); Credentials gives them, and they are stored under
	// CredentialsName or bmc-NAME.
	CredentialsName                string           `json:"credentialsName,omitempty"`
	Credentials                    *hostCredentials `json:"credentials,omitempty"`
	DisableCertificateVerification bool             `json:"disableCertificateVerification,omitempty"`
}

type hostCredentials struct {
	Username     string `json:"username"`
	PasswordFile string `json:"passwordFile,omitempty"`
	PasswordEnv  string `json:"passwordEnv,omitempty"`
	// Password is refused: a password belongs in a file or the environment.
	Password string `json:"password,omitempty"`
}

// hostData is cloud-init data: a string, or {file: PATH} or {value: TEXT}.
type hostData struct {
	File  string `json:"file,omitempty"`
	Value string `json:"value,omitempty"`
}

func (d *hostData) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		d.Value = s
		return nil
	}
	type plain hostData
	return json.Unmarshal(b, (*plain)(d))
}

// host is a checked document, ready to apply: the registration it makes
// and the credentials' password (never printed).
type host struct {
	doc    string // "document N (line L) of FILE", for errors
	name   string
	reg    api.RegisterRequest
	online *bool
	labels bool // the document sets labels
	spec   bool // the document sets part of the spec
}

// splitDocuments splits YAML text at "---" lines and returns the
// documents that hold something, with the line each starts on.
func splitDocuments(b []byte) (docs [][]byte, lines []int) {
	var cur bytes.Buffer
	start, n := 1, 0
	flush := func(next int) {
		if strings.TrimSpace(stripComments(cur.String())) != "" {
			docs, lines = append(docs, bytes.Clone(cur.Bytes())), append(lines, start)
		}
		cur.Reset()
		start = next
	}
	for line := range bytes.SplitAfterSeq(b, []byte("\n")) {
		n++
		t := strings.TrimRight(string(line), "\r\n")
		if t == "---" || strings.HasPrefix(t, "--- ") || strings.HasPrefix(t, "---\t") {
			flush(n + 1)
			continue
		}
		cur.Write(line)
	}
	flush(n + 1)
	return docs, lines
}

func stripComments(s string) string {
	var b strings.Builder
	for l := range strings.SplitSeq(s, "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// unknownFields returns the paths of v's fields (decoded JSON) that t's
// JSON fields do not have.
func unknownFields(v any, t reflect.Type, path string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return nil // a wrong type is json.Unmarshal's to report
		}
		known := map[string]reflect.Type{}
		for f := range t.Fields() {
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
				known[name] = f.Type
			}
		}
		var out []string
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			p := strings.TrimPrefix(path+"."+k, ".")
			ft, ok := known[k]
			if !ok {
				out = append(out, p)
				continue
			}
			out = append(out, unknownFields(obj[k], ft, p)...)
		}
		return out
	case reflect.Slice:
		arr, _ := v.([]any)
		var out []string
		for i, x := range arr {
			out = append(out, unknownFields(x, t.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
		}
		return out
	}
	return nil
}

// parseHosts reads every document of b (named src, relative files resolved
// in dir) and checks it; it fails on the first bad document, naming it and
// the field.
func parseHosts(b []byte, src, dir string) ([]host, error) {
	docs, lines := splitDocuments(b)
	if len(docs) == 0 {
		return nil, fmt.Errorf("%s holds no document", src)
	}
	out := make([]host, 0, len(docs))
	seen := map[string]string{}
	for i, d := range docs {
		where := fmt.Sprintf("document %d (line %d) of %s", i+1, lines[i], src)
		h, err := parseHost(d, where, dir)
		if err != nil {
			return nil, err
		}
		if prev, ok := seen[h.name]; ok {
			return nil, fmt.Errorf("%s: metadata.name %q is also the name of %s", where, h.name, prev)
		}
		seen[h.name] = where
		out = append(out, h)
	}
	return out, nil
}

func parseHost(d []byte, where, dir string) (host, error) {
	h := host{doc: where}
	j, err := yaml.YAMLToJSONStrict(d)
	if err != nil {
		return h, fmt.Errorf("%s: not valid YAML: %w", where, err)
	}
	var raw any
	if err := json.Unmarshal(j, &raw); err != nil {
		return h, fmt.Errorf("%s: %w", where, err)
	}
	obj, ok := raw.(map[string]any)
	if !ok {
		return h, fmt.Errorf("%s: want a mapping with apiVersion, kind, metadata and spec", where)
	}
	if md, ok := obj["metadata"].(map[string]any); ok {
		if n, ok := md["name"].(string); ok && n != "" {
			where = fmt.Sprintf("%s (%s)", where, n)
		}
	}
	if unk := unknownFields(raw, reflect.TypeFor[hostDoc](), ""); len(unk) > 0 {
		return h, fmt.Errorf("%s: unknown field %s", where, strings.Join(unk, ", "))
	}
	var doc hostDoc
	if err := json.Unmarshal(j, &doc); err != nil {
		return h, fmt.Errorf("%s: %w", where, err)
	}
	if !slices.Contains(hostAPIVersions, doc.APIVersion) {
		return h, fmt.Errorf("%s: apiVersion %q, want %s", where, doc.APIVersion, strings.Join(hostAPIVersions, " or "))
	}
	if doc.Kind != hostKind {
		return h, fmt.Errorf("%s: kind %q, want %s", where, doc.Kind, hostKind)
	}
	if doc.Metadata.Name == "" {
		return h, fmt.Errorf("%s: metadata.name is required", where)
	}
	h.name = doc.Metadata.Name
	h.doc = where
	s := doc.Spec
	h.reg = api.RegisterRequest{Name: h.name, Labels: doc.Metadata.Labels, ExternallyProvisioned: s.ExternallyProvisioned}
	h.labels = doc.Metadata.Labels != nil
	if s.Online != nil {
		h.online = s.Online
		h.reg.Online = *s.Online
	}
	if s.BootMACAddress != "" {
		if h.reg.BootMAC, err = parseMAC("spec.bootMACAddress", s.BootMACAddress); err != nil {
			return h, fmt.Errorf("%s: %v", where, err)
		}
	}
	if b := s.BMC; b != nil {
		if b.Address == "" {
			return h, fmt.Errorf("%s: spec.bmc.address is required with spec.bmc", where)
		}
		if err := checkBMCAddress(b.Address); err != nil {
			return h, fmt.Errorf("%s: spec.bmc.address %v", where, err)
		}
		h.reg.BMC = &api.BMCRequest{Address: b.Address, CredentialsRef: b.CredentialsName, DisableCertificateVerification: b.DisableCertificateVerification}
		if c := b.Credentials; c != nil {
			if err := readCredentials(c, h.reg.BMC, dir); err != nil {
				return h, fmt.Errorf("%s: spec.bmc.credentials.%v", where, err)
			}
		}
	}
	if s.Image != nil {
		if err := image.CheckSource(s.Image.URL); err != nil {
			return h, fmt.Errorf("%s: spec.image.url %q: want an http://, https://, file:// or oci:// URL: %v", where, s.Image.URL, err)
		}
		if s.Image.Checksum != "" && s.Image.ChecksumType == "" {
			if err := image.CheckChecksum(s.Image.Checksum); err != nil {
				return h, fmt.Errorf("%s: spec.image.checksum %q: want sha256:HEX or sha512:HEX (or HEX with checksumType): %v", where, s.Image.Checksum, err)
			}
		}
		if t := s.Image.ChecksumType; t != "" && t != "sha256" && t != "sha512" {
			return h, fmt.Errorf("%s: spec.image.checksumType %q: want sha256 or sha512", where, t)
		}
		h.reg.Spec.Image, h.spec = *s.Image, true
	}
	if r := s.RootDeviceHints; r != nil {
		if r.MinSizeGigabytes < 0 {
			return h, fmt.Errorf("%s: spec.rootDeviceHints.minSizeGigabytes %d: want 0 or more", where, r.MinSizeGigabytes)
		}
		h.reg.Spec.RootDeviceHints, h.spec = r, true
	}
	if s.Hostname != "" {
		h.reg.Spec.Hostname, h.spec = s.Hostname, true
	}
	if s.ConfigOverrides != nil {
		j, err := json.Marshal(s.ConfigOverrides)
		if err != nil {
			return h, fmt.Errorf("%s: spec.configOverrides: %w", where, err)
		}
		h.reg.Spec.ConfigOverrides, h.spec = j, true
	}
	for _, x := range []struct {
		field string
		src   *hostData
		dst   *string
	}{{"userData", s.UserData, &h.reg.Spec.UserData}, {"networkData", s.NetworkData, &h.reg.Spec.NetworkData}, {"metaData", s.MetaData, &h.reg.Spec.MetaData}} {
		if x.src == nil {
			continue
		}
		if (x.src.File == "") == (x.src.Value == "") {
			return h, fmt.Errorf("%s: spec.%s: give one of file or value", where, x.field)
		}
		*x.dst, h.spec = x.src.Value, true
		if x.src.File != "" {
			b, err := os.ReadFile(inDir(dir, x.src.File))
			if err != nil {
				return h, fmt.Errorf("%s: spec.%s.file: %w", where, x.field, err)
			}
			*x.dst = string(b)
		}
	}
	return h, nil
}

// readCredentials fills b's username and password from c; the password
// comes from a file or an environment variable, never from the document.
// Errors start with the field's name under spec.bmc.credentials.
func readCredentials(c *hostCredentials, b *api.BMCRequest, dir string) error {
	switch {
	case c.Password != "":
		return errors.New("password: a password is not written in the document; use passwordFile or passwordEnv")
	case c.Username == "":
		return errors.New("username is required")
	case (c.PasswordFile == "") == (c.PasswordEnv == ""):
		return errors.New("passwordFile or passwordEnv: give exactly one")
	}
	b.Username = c.Username
	if c.PasswordEnv != "" {
		if b.Password = os.Getenv(c.PasswordEnv); b.Password == "" {
			return fmt.Errorf("passwordEnv: $%s is empty or not set", c.PasswordEnv)
		}
		return nil
	}
	pw, err := readPasswordFile(inDir(dir, c.PasswordFile))
	if err != nil {
		return fmt.Errorf("passwordFile: %w", err)
	}
	b.Password = pw
	return nil
}

// inDir resolves a relative path of a document against its file's directory.
func inDir(dir, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// view is what apply compares and shows of a machine: the fields a
// document can set, flattened to "path: value" (cloud-init data as its
// size, never its content).
func view(m api.MachineDetail) map[string]string {
	spec := m.Spec
	hidden := map[string]*string{"userData": &spec.UserData, "networkData": &spec.NetworkData, "metaData": &spec.MetaData}
	for _, p := range hidden {
		if *p != "" {
			sum := sha256.Sum256([]byte(*p))
			*p = fmt.Sprintf("(%d bytes, sha256 %x…)", len(*p), sum[:4])
		}
	}
	v := map[string]any{"name": m.Name, "labels": m.Labels, "bootMACAddress": m.BootMAC, "online": m.Online,
		"bmc": m.BMC, "spec": spec}
	b, _ := json.Marshal(v)
	var generic any
	_ = json.Unmarshal(b, &generic)
	out := map[string]string{}
	flatten("", generic, out)
	return out
}

func flatten(prefix string, v any, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			flatten(strings.TrimPrefix(prefix+"."+k, "."), e, out)
		}
	case []any:
		for i, e := range x {
			flatten(fmt.Sprintf("%s[%d]", prefix, i), e, out)
		}
	case nil:
	default:
		b, _ := json.Marshal(x)
		out[prefix] = string(b)
	}
}

// diff lists the changed paths between two views, sorted.
func diff(old, new map[string]string) []string {
	keys := map[string]bool{}
	for k := range old {
		keys[k] = true
	}
	for k := range new {
		keys[k] = true
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		o, n := old[k], new[k]
		switch {
		case o == n:
		case o == "":
			out = append(out, fmt.Sprintf("%s: %s", k, n))
		case n == "":
			out = append(out, fmt.Sprintf("%s: %s → (none)", k, o))
		default:
			out = append(out, fmt.Sprintf("%s: %s → %s", k, o, n))
		}
	}
	return out
}

// desired is m with the document's fields written over it (fields the
// document leaves out stay as they are).
func (h host) desired(m api.MachineDetail) api.MachineDetail {
	d := m
	d.Name = h.name
	if h.labels {
		d.Labels = h.reg.Labels
	}
	if h.online != nil {
		d.Online = *h.online
	}
	if h.reg.BootMAC != "" {
		d.BootMAC = h.reg.BootMAC
	}
	if b := h.reg.BMC; b != nil {
		ref := b.CredentialsRef
		if ref == "" {
			ref = m.BMC.CredentialsRef
		}
		if ref == "" && b.Username != "" {
			ref = "bmc-" + h.name
		}
		d.BMC = api.BMCInfo{Address: b.Address, CredentialsRef: ref, DisableCertificateVerification: b.DisableCertificateVerification}
	}
	s := h.reg.Spec
	if h.spec {
		if s.Image.URL != "" {
			d.Spec.Image = s.Image
		}
		if s.RootDeviceHints != nil {
			d.Spec.RootDeviceHints = s.RootDeviceHints
		}
		if s.ConfigOverrides != nil {
			d.Spec.ConfigOverrides = s.ConfigOverrides
		}
		for _, x := range [][2]*string{{&d.Spec.Hostname, &s.Hostname}, {&d.Spec.UserData, &s.UserData},
			{&d.Spec.NetworkData, &s.NetworkData}, {&d.Spec.MetaData, &s.MetaData}} {
			if *x[1] != "" {
				*x[0] = *x[1]
			}
		}
	}
	return d
}

func applyCommand() command {
	var (
		files  []string
		dryRun bool
	)
	return command{
		name: "apply", args: "-f FILE",
		short: "create or update machines from BareMetalHost YAML",
		long: "Reads BareMetalHost-shaped YAML (metal3's field names; apiVersion\n" +
			"booty.dev/v1alpha1 or metal3.io/v1alpha1; several documents split by ---)\n" +
			"and makes bootyd hold each machine so: a machine that does not exist is\n" +
			"registered (\"created\"); one that does is updated with the fields the\n" +
			"document sets, under the generation read, so a concurrent change gives\n" +
			"bootyd's 409 and nothing half-applied (\"configured\"), or left alone\n" +
			"(\"unchanged\"). Fields a document leaves out stay as they are;\n" +
			"bootMACAddress cannot change. Every document is checked before any is\n" +
			"sent: an unknown field, a bad value or an unreadable file stops the\n" +
			"whole apply, naming the document and the field.\n\n" +
			"The BMC password comes from spec.bmc.credentials.passwordFile or\n" +
			"passwordEnv (never from the document or the command line); bootyd\n" +
			"stores it as credentials bmc-NAME (or credentialsName) and bootyctl\n" +
			"never prints it. Relative file paths are relative to the YAML file.\n" +
			"userData, networkData and metaData are a string, {value: TEXT} or\n" +
			"{file: PATH}. spec.configOverrides (booty's own field) is a MachineConfig\n" +
			"fragment bootyd merges over the config it renders (handoff, onFailure, …).\n" +
			"--dry-run prints what would change and changes nothing.",
		example: "  cat > host.yaml <<'EOF'\n" +
			"  apiVersion: booty.dev/v1alpha1   # metal3.io/v1alpha1 BareMetalHost accepted too\n" +
			"  kind: BareMetalHost\n" +
			"  metadata: {name: rack1-node3, labels: {rack: r1}}\n" +
			"  spec:\n" +
			"    online: true\n" +
			"    bootMACAddress: 52:54:00:12:34:56\n" +
			"    bmc:\n" +
			"      address: ipmi://10.0.0.3:623\n" +
			"      credentials: {username: admin, passwordFile: ./bmc.pass}\n" +
			"    image: {url: https://10.0.0.1:8443/files/debian.img.zst, checksum: sha256:9f86d0…, format: raw}\n" +
			"    rootDeviceHints: {minSizeGigabytes: 10, rotational: false}\n" +
			"    userData: {file: ./user-data}\n" +
			"  EOF\n" +
			"  bootyctl apply -f host.yaml --dry-run\n" +
			"  bootyctl apply -f host.yaml          # rack1-node3 created\n" +
			"  cat host.yaml | bootyctl apply -f -",
		flags: func(fs *pflag.FlagSet) {
			fs.StringArrayVarP(&files, "filename", "f", nil, "YAML file of BareMetalHost documents, - for stdin (repeatable)")
			fs.BoolVar(&dryRun, "dry-run", false, "print what would change; change nothing")
		},
		run: func(ctx context.Context, e *env, c *client, _ []string, _ *pflag.FlagSet) error {
			if len(files) == 0 {
				return usageError{"-f/--filename", "is required: a YAML file of BareMetalHost documents, or - for stdin"}
			}
			var hosts []host
			for _, f := range files {
				hs, err := readHosts(e, f)
				if err != nil {
					return err
				}
				hosts = append(hosts, hs...)
			}
			names := map[string]string{}
			for _, h := range hosts {
				if prev, ok := names[h.name]; ok {
					return fmt.Errorf("%s: metadata.name is also the name of %s", h.doc, prev)
				}
				names[h.name] = h.doc
			}
			failed := 0
			for _, h := range hosts {
				if err := applyHost(ctx, e, c, h, dryRun); err != nil {
					fmt.Fprintf(e.stderr, "bootyctl: apply %s: %v\n", h.doc, err)
					failed++
				}
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d document(s) not applied", failed, len(hosts))
			}
			return nil
		},
		maxArgs: 0,
	}
}

// readHosts reads and checks the documents of one -f.
func readHosts(e *env, f string) ([]host, error) {
	var (
		b   []byte
		err error
	)
	src, dir := f, filepath.Dir(f)
	if f == "-" {
		src, dir = "stdin", "."
		b, err = io.ReadAll(io.LimitReader(e.stdinReader(), maxApplyBytes+1))
	} else {
		var fh *os.File
		if fh, err = os.Open(f); err == nil {
			b, err = io.ReadAll(io.LimitReader(fh, maxApplyBytes+1))
			fh.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", src, err)
	}
	if len(b) > maxApplyBytes {
		return nil, fmt.Errorf("read %s: larger than %d bytes", src, maxApplyBytes)
	}
	return parseHosts(b, src, dir)
}

// applyHost creates or updates one machine and prints the outcome.
func applyHost(ctx context.Context, e *env, c *client, h host, dryRun bool) error {
	var cur api.MachineDetail
	_, err := c.get(ctx, machinePath(h.name), nil, &cur)
	suffix := ""
	if dryRun {
		suffix = " (dry run)"
	}
	if isNotFound(err) {
		if h.reg.BootMAC == "" {
			return errors.New("spec.bootMACAddress is required to create a machine")
		}
		if dryRun {
			fmt.Fprintf(e.stdout, "%s created%s\n", h.name, suffix)
			return printChanges(e, diff(nil, view(h.desired(api.MachineDetail{}))), h)
		}
		if _, err := c.do(ctx, http.MethodPost, "/v1/machines", nil, h.reg); err != nil {
			return err
		}
		_, err = fmt.Fprintf(e.stdout, "%s created\n", h.name)
		return err
	}
	if err != nil {
		return err
	}
	if cur.Name != h.name {
		return fmt.Errorf("%q names machine %s (by ID or MAC); metadata.name must be the machine's name", h.name, cur.Name)
	}
	if h.reg.BootMAC != "" && h.reg.BootMAC != cur.BootMAC {
		return fmt.Errorf("spec.bootMACAddress %s: machine %s boots from %s, and a boot MAC cannot change (delete the machine and apply again)", h.reg.BootMAC, h.name, cur.BootMAC)
	}
	want := h.desired(cur)
	changes := diff(view(cur), view(want))
	creds := h.reg.BMC != nil && h.reg.BMC.Username != ""
	if len(changes) == 0 && !creds {
		_, err := fmt.Fprintf(e.stdout, "%s unchanged%s\n", h.name, suffix)
		return err
	}
	if dryRun {
		if len(changes) == 0 {
			fmt.Fprintf(e.stdout, "%s unchanged%s; bootyd compares the BMC credentials, bootyctl cannot\n", h.name, suffix)
		} else {
			fmt.Fprintf(e.stdout, "%s configured%s\n", h.name, suffix)
		}
		return printChanges(e, changes, h)
	}
	u := api.UpdateRequest{Generation: cur.Generation}
	if h.labels && !maps.Equal(want.Labels, cur.Labels) {
		u.Labels = want.Labels
	}
	if want.Online != cur.Online {
		u.Online = &want.Online
	}
	if h.reg.BMC != nil && (want.BMC != cur.BMC || creds) {
		b := *h.reg.BMC
		b.CredentialsRef = want.BMC.CredentialsRef
		u.BMC = &b
	}
	if !reflect.DeepEqual(want.Spec, cur.Spec) {
		u.Spec = &want.Spec
	}
	raw, err := c.do(ctx, http.MethodPatch, machinePath(cur.ID), nil, u)
	if err != nil {
		return err
	}
	var after api.MachineDetail
	if err := json.Unmarshal(raw, &after); err != nil {
		return fmt.Errorf("decode bootyd's answer: %w", err)
	}
	verb := "configured"
	if after.UpdatedAt.Equal(cur.UpdatedAt) {
		verb = "unchanged"
	}
	_, err = fmt.Fprintf(e.stdout, "%s %s\n", h.name, verb)
	return err
}

// printChanges prints the changes of a dry run, indented, and says the
// credentials would be sent without showing them.
func printChanges(e *env, changes []string, h host) error {
	if h.reg.BMC != nil && h.reg.BMC.Username != "" {
		changes = append(changes, "bmc.credentials: username "+h.reg.BMC.Username+", password (not shown)")
	}
	sort.Strings(changes)
	for _, c := range changes {
		if _, err := fmt.Fprintf(e.stdout, "  %s\n", cell(c)); err != nil {
			return err
		}
	}
	return nil
}
