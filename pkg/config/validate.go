package config

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// ValidationError lists every problem found in a MachineConfig, each as
// "field.path: what is wrong". Error joins them one per line.
type ValidationError struct {
	Problems []string
}

func (e *ValidationError) Error() string {
	return strings.Join(e.Problems, "\n")
}

// problem is one finding, kept with its field path so decoding problems can
// hide validation problems about the same field.
type problem struct {
	field string
	msg   string
}

func (p problem) String() string {
	if p.field == "" {
		return p.msg
	}
	return p.field + ": " + p.msg
}

func newValidationError(ps []problem) *ValidationError {
	e := &ValidationError{Problems: make([]string, len(ps))}
	for i, p := range ps {
		e.Problems[i] = p.String()
	}
	return e
}

// Validate checks the whole config and returns a *ValidationError listing
// every problem, or nil. Empty mode, handoff and onFailure.action stand for
// their defaults, so Validate works before and after ApplyDefaults.
// Secret values (server.token, cloudInit.userData) are never quoted in a problem.
func (c *MachineConfig) Validate() error {
	if ps := c.validate(); len(ps) > 0 {
		return newValidationError(ps)
	}
	return nil
}

// Known Ironic root device hint keys.
var hintKeys = map[string]bool{
	"name": true, "wwn": true, "wwn_with_extension": true, "wwn_vendor_extension": true,
	"serial": true, "size": true, "rotational": true, "vendor": true, "model": true,
	"hctl": true, "by_path": true, "tran": true,
}

// Ironic hint operators (oslo.utils specs matcher).
var hintOps = map[string]bool{
	"=": true, "==": true, "!=": true, ">=": true, "<=": true, ">": true, "<": true,
	"s==": true, "s!=": true, "s>=": true, "s<=": true, "s>": true, "s<": true,
	"<in>": true, "<or>": true, "<all-in>": true,
}

var (
	checksumRE  = regexp.MustCompile(`^(sha256:[0-9a-fA-F]{64}|sha512:[0-9a-fA-F]{128})$`)
	sizeRE      = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?([KMGTP](i?B)?)?$`)
	labelRE     = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
	ociRepoRE   = regexp.MustCompile(`^[a-z0-9]+([._-]+[a-z0-9]+)*(/[a-z0-9]+([._-]+[a-z0-9]+)*)*$`)
	ociTagRE    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)
	ociDigestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$|^sha512:[0-9a-f]{128}$`)
)

func (c *MachineConfig) validate() []problem {
	var ps []problem
	add := func(field, format string, args ...any) {
		ps = append(ps, problem{field, fmt.Sprintf(format, args...)})
	}

	switch c.APIVersion {
	case APIVersion:
	case "":
		add("apiVersion", "required, want %q", APIVersion)
	default:
		add("apiVersion", "unsupported %q, want %q", c.APIVersion, APIVersion)
	}

	mode := c.Mode
	switch mode {
	case "", ModeProvision, ModeDeprovision, ModeSoftDeprovision:
	default:
		add("mode", "unknown mode %q, want %s, %s or %s", mode, ModeProvision, ModeDeprovision, ModeSoftDeprovision)
	}
	provision := mode == "" || mode == ModeProvision

	if c.Hostname != "" {
		if err := checkHostname(c.Hostname); err != "" {
			add("hostname", "%s", err)
		}
	}

	// image
	switch {
	case c.Image.URL == "" && provision:
		add("image.url", "required in mode provision")
	case c.Image.URL != "":
		if err := checkImageURL(c.Image.URL); err != "" {
			add("image.url", "%s", err)
		}
	}
	for _, f := range []struct{ name, v string }{{"image.checksum", c.Image.Checksum}, {"image.imageChecksum", c.Image.ImageChecksum}} {
		if f.v != "" && !checksumRE.MatchString(f.v) {
			add(f.name, "want \"sha256:\" and 64 hex digits or \"sha512:\" and 128 hex digits, got %q", truncate(f.v, 80))
		}
	}
	if provision && c.Image.URL != "" && c.Image.Checksum == "" && c.Image.ImageChecksum == "" {
		add("image", "checksum or imageChecksum is required in mode provision: booty never leaves an unverified image bootable")
	}
	if c.Image.BmapURL != "" {
		if err := checkURL(c.Image.BmapURL, "http", "https", "file"); err != "" {
			add("image.bmapUrl", "%s", err)
		}
	}

	// disk
	if provision && c.Disk.Device == "" && len(c.Disk.Hints) == 0 {
		add("disk", "device or hints is required in mode provision: booty never guesses the target disk")
	}
	if c.Disk.Device != "" && (!strings.HasPrefix(c.Disk.Device, "/dev/") || len(c.Disk.Device) <= len("/dev/")) {
		add("disk.device", "want a path under /dev/, got %q", c.Disk.Device)
	}
	for _, k := range sortedKeys(c.Disk.Hints) {
		field := "disk.hints." + k
		if !hintKeys[k] {
			add(field, "unknown root device hint, want one of name, wwn, wwn_with_extension, wwn_vendor_extension, serial, size, rotational, vendor, model, hctl, by_path, tran")
			continue
		}
		if msg := checkHint(k, c.Disk.Hints[k]); msg != "" {
			add(field, "%s", msg)
		}
	}
	if s := c.Disk.RootPartitionSize; s != "" && s != RootPartitionKeep {
		if !sizeRE.MatchString(s) {
			add("disk.rootPartitionSize", "want a size like \"20G\", \"512M\" or \"1T\", or \"keep\", got %q", s)
		} else if f, _ := strconv.ParseFloat(strings.TrimRight(s, "KMGTPiB"), 64); f <= 0 {
			add("disk.rootPartitionSize", "must be greater than zero, got %q", s)
		}
	}

	// dns
	for i, ns := range c.DNS.Nameservers {
		if _, err := netip.ParseAddr(ns); err != nil {
			add(fmt.Sprintf("dns.nameservers[%d]", i), "want an IP address, got %q", ns)
		}
	}
	for i, d := range c.DNS.Search {
		if err := checkHostname(strings.TrimSuffix(d, ".")); err != "" {
			add(fmt.Sprintf("dns.search[%d]", i), "%s", err)
		}
	}

	for i, p := range c.KernelParams {
		switch {
		case strings.TrimSpace(p) == "":
			add(fmt.Sprintf("kernelParams[%d]", i), "must not be empty")
		case strings.ContainsAny(p, "\n\r\x00"):
			add(fmt.Sprintf("kernelParams[%d]", i), "must not contain a newline or NUL")
		}
	}

	for _, k := range sortedKeys(c.Kubelet.NodeLabels) {
		if msg := checkLabelKey(k); msg != "" {
			add("kubelet.nodeLabels."+k, "%s", msg)
		}
		if v := c.Kubelet.NodeLabels[k]; v != "" && !labelRE.MatchString(v) {
			add("kubelet.nodeLabels."+k, "value %q is not a valid label value (at most 63 of A-Z a-z 0-9 - _ ., alphanumeric at both ends)", v)
		}
	}
	if strings.ContainsAny(c.Kubelet.ProviderID, " \t\n") {
		add("kubelet.providerID", "must not contain whitespace")
	}

	for i, cmd := range c.PostProvisionCommands {
		if strings.TrimSpace(cmd) == "" {
			add(fmt.Sprintf("postProvisionCommands[%d]", i), "must not be empty")
		}
	}

	if c.Mellanox.NumVFs < 0 {
		add("mellanox.numVFs", "must not be negative, got %d", c.Mellanox.NumVFs)
	}

	switch c.Handoff {
	case "", HandoffKexec, HandoffReboot, HandoffPoweroff:
	default:
		add("handoff", "unknown handoff %q, want %s, %s or %s", c.Handoff, HandoffKexec, HandoffReboot, HandoffPoweroff)
	}
	switch c.OnFailure.Action {
	case "", FailureReboot, FailureHold, FailurePoweroff:
	default:
		add("onFailure.action", "unknown action %q, want %s, %s or %s", c.OnFailure.Action, FailureReboot, FailureHold, FailurePoweroff)
	}
	if c.OnFailure.Delay.Duration < 0 {
		add("onFailure.delay", "must not be negative, got %s", c.OnFailure.Delay.Duration)
	}

	// server
	if c.Server.URL != "" {
		if err := checkURL(c.Server.URL, "http", "https"); err != "" {
			add("server.url", "%s", err)
		}
	}
	if c.Server.Token != "" {
		if c.Server.URL == "" {
			add("server.token", "set but server.url is empty")
		}
		if strings.ContainsAny(c.Server.Token, " \t\r\n") {
			add("server.token", "must not contain whitespace") // the value is secret: never quote it
		}
	}
	if c.Server.CACert != "" {
		if msg := checkPEM(c.Server.CACert); msg != "" {
			add("server.caCert", "%s", msg)
		}
	}

	// cloudInit (userData is secret and free-form: never inspected here)
	for _, f := range []struct{ name, v string }{{"cloudInit.metaData", c.CloudInit.MetaData}, {"cloudInit.networkConfig", c.CloudInit.NetworkConfig}} {
		if f.v == "" {
			continue
		}
		if _, err := yaml.YAMLToJSON([]byte(f.v)); err != nil {
			add(f.name, "not valid YAML: %v", err)
		}
	}

	// network
	n := c.Network
	if n.Interface != "" && (len(n.Interface) > 15 || strings.ContainsAny(n.Interface, "/: \t\n") || n.Interface == "." || n.Interface == "..") {
		add("network.interface", "%q is not a valid link name (at most 15 characters, no '/', ':' or whitespace)", n.Interface)
	}
	var prefix netip.Prefix
	if n.Address != "" {
		p, err := netip.ParsePrefix(n.Address)
		if err != nil {
			add("network.address", "want an address in CIDR form like \"192.0.2.10/24\", got %q", n.Address)
		} else {
			prefix = p
		}
	}
	if n.Gateway != "" {
		gw, err := netip.ParseAddr(n.Gateway)
		switch {
		case err != nil:
			add("network.gateway", "want an IP address, got %q", n.Gateway)
		case n.Address == "":
			add("network.gateway", "set but network.address is empty (a gateway needs a static address)")
		case prefix.IsValid() && gw.Is4() != prefix.Addr().Is4():
			add("network.gateway", "%s is not in the address family of network.address %s", n.Gateway, n.Address)
		}
	}
	for i, ns := range n.DNS {
		if _, err := netip.ParseAddr(ns); err != nil {
			add(fmt.Sprintf("network.dns[%d]", i), "want an IP address, got %q", ns)
		}
	}
	return ps
}

// checkHostname returns why h is not an RFC 1123 host name, or "".
func checkHostname(h string) string {
	if len(h) > 253 {
		return fmt.Sprintf("%q is longer than 253 characters", truncate(h, 40))
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" {
			return fmt.Sprintf("%q has an empty label", h)
		}
		if len(label) > 63 {
			return fmt.Sprintf("%q has a label longer than 63 characters", truncate(h, 80))
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Sprintf("%q is not an RFC 1123 host name: a label starts or ends with '-'", h)
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return fmt.Sprintf("%q is not an RFC 1123 host name: only letters, digits, '-' and '.' are allowed", h)
			}
		}
	}
	return ""
}

// checkImageURL allows http, https, file and the oci:// reference syntax.
func checkImageURL(s string) string {
	if rest, ok := strings.CutPrefix(s, "oci://"); ok {
		return checkOCIRef(rest)
	}
	return checkURL(s, "http", "https", "file", "oci")
}

// checkOCIRef checks "registry[:port]/repository[:tag][@digest]".
func checkOCIRef(ref string) string {
	host, repo, ok := strings.Cut(ref, "/")
	if !ok || host == "" || repo == "" {
		return fmt.Sprintf("oci reference %q: want oci://REGISTRY/REPOSITORY[:TAG][@DIGEST]", ref)
	}
	if _, err := url.Parse("//" + host); err != nil || strings.ContainsAny(host, "@/ ") {
		return fmt.Sprintf("oci reference %q: bad registry %q", ref, host)
	}
	name, digest, hasDigest := strings.Cut(repo, "@")
	if hasDigest && !ociDigestRE.MatchString(digest) {
		return fmt.Sprintf("oci reference %q: bad digest %q, want sha256: and 64 lower-case hex digits", ref, digest)
	}
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		tag := name[i+1:]
		name = name[:i]
		if !ociTagRE.MatchString(tag) {
			return fmt.Sprintf("oci reference %q: bad tag %q", ref, tag)
		}
	}
	if !ociRepoRE.MatchString(name) {
		return fmt.Sprintf("oci reference %q: bad repository %q (lower-case letters, digits and . _ - separators)", ref, name)
	}
	return ""
}

// checkURL returns why s is not an absolute URL with one of schemes, or "".
func checkURL(s string, schemes ...string) string {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Sprintf("not a URL: %v", err)
	}
	ok := false
	for _, sc := range schemes {
		ok = ok || u.Scheme == sc
	}
	if !ok {
		return fmt.Sprintf("scheme %q not supported in %q, want %s", u.Scheme, s, strings.Join(schemes, ", "))
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return fmt.Sprintf("%q has no host", s)
		}
		if u.User != nil {
			return fmt.Sprintf("%q carries credentials in the URL; use server.token instead", u.Redacted())
		}
	case "oci":
		return fmt.Sprintf("%q: want oci://REGISTRY/REPOSITORY[:TAG][@DIGEST]", s)
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return fmt.Sprintf("%q: a file URL has no host, want file:///path", s)
		}
		if !strings.HasPrefix(u.Path, "/") || len(u.Path) < 2 {
			return fmt.Sprintf("%q: want file:///absolute/path", s)
		}
	}
	return ""
}

// checkHint checks the value of one root device hint.
func checkHint(k string, v any) string {
	switch k {
	case "size":
		switch x := v.(type) {
		case float64:
			if x < 0 || x != float64(int64(x)) {
				return fmt.Sprintf("want a whole number of GiB, got %v", x)
			}
			return ""
		case string:
			nums := 0
			for _, tok := range strings.Fields(x) {
				if hintOps[tok] {
					continue
				}
				if _, err := strconv.ParseUint(tok, 10, 64); err != nil {
					return fmt.Sprintf("want GiB with an optional operator like \">= 100\", got %q", x)
				}
				nums++
			}
			if nums == 0 {
				return fmt.Sprintf("want GiB with an optional operator like \">= 100\", got %q", x)
			}
			return ""
		}
		return fmt.Sprintf("want a number of GiB, got %s", jsonKind(v))
	case "rotational":
		switch x := v.(type) {
		case bool:
			return ""
		case string:
			if _, err := strconv.ParseBool(strings.TrimSpace(x)); err == nil {
				return ""
			}
		}
		return fmt.Sprintf("want true or false, got %s", jsonKind(v))
	}
	s, ok := v.(string)
	if !ok {
		return fmt.Sprintf("want a string, got %s (quote it)", jsonKind(v))
	}
	toks := strings.Fields(s)
	if len(toks) == 0 {
		return "must not be empty"
	}
	if op := toks[0]; len(toks) > 1 && looksLikeOp(op) && !hintOps[op] {
		return fmt.Sprintf("unknown operator %q", op)
	}
	if hintOps[toks[0]] && len(toks) == 1 {
		return fmt.Sprintf("operator %q has no value", toks[0])
	}
	return ""
}

func looksLikeOp(tok string) bool {
	return strings.HasPrefix(tok, "<") && strings.HasSuffix(tok, ">") ||
		strings.Trim(tok, "s=!<>") == "" && len(tok) <= 3
}

// checkLabelKey checks a Kubernetes label key: [prefix/]name.
func checkLabelKey(k string) string {
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		name, prefix = prefix, ""
	}
	if hasPrefix && checkHostname(prefix) != "" {
		return fmt.Sprintf("key %q has an invalid prefix %q (want a DNS subdomain)", k, prefix)
	}
	if !labelRE.MatchString(name) {
		return fmt.Sprintf("key %q is not a valid label name (at most 63 of A-Z a-z 0-9 - _ ., alphanumeric at both ends)", k)
	}
	return ""
}

// checkPEM checks that s holds at least one parseable certificate.
func checkPEM(s string) string {
	rest := []byte(s)
	n := 0
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return fmt.Sprintf("certificate %d: %v", n+1, err)
		}
		n++
	}
	if n == 0 {
		return "no PEM CERTIFICATE block found"
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
