package config

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"

	"github.com/booty-dev/booty/pkg/image"
)

// VarsEndpoints are the reporting endpoints and token of a telekom BOOTy
// /deploy/vars file (CAPRF). Token is secret: LogValue redacts it.
type VarsEndpoints struct {
	Token        string // TOKEN: bearer token for every endpoint
	InitURL      string // INIT_URL: "provisioning started"
	SuccessURL   string // SUCCESS_URL: the run succeeded
	ErrorURL     string // ERROR_URL: the run failed, with the message
	LogURL       string // LOG_URL: one log line per POST
	DebugURL     string // DEBUG_URL: debug messages
	HeartbeatURL string // HEARTBEAT_URL: keepalives (standby mode)
	// Ignored lists the keys of the file that booty does not use, in order.
	Ignored []string
}

// LogValue shows the endpoints with the token redacted.
func (e *VarsEndpoints) LogValue() slog.Value {
	tok := ""
	if e.Token != "" {
		tok = RedactedText
	}
	return slog.GroupValue(
		slog.String("token", tok), slog.String("init", e.InitURL), slog.String("success", e.SuccessURL),
		slog.String("error", e.ErrorURL), slog.String("log", e.LogURL), slog.String("debug", e.DebugURL),
		slog.String("heartbeat", e.HeartbeatURL), slog.Any("ignored", e.Ignored),
	)
}

var varKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// varsFields names the MachineConfig field each BOOTy variable feeds, so a
// validation problem can name the variable the operator wrote.
var varsFields = []struct{ field, key string }{
	{"image.url", "IMAGE"},
	{"image.checksum", "IMAGE_CHECKSUM"},
	{"image", "IMAGE_CHECKSUM"},
	{"hostname", "HOSTNAME"},
	{"mode", "MODE"},
	{"disk.hints", "MIN_DISK_SIZE_GB"},
	{"disk.device", "DISK_DEVICE"},
	{"disk", "DISK_DEVICE or MIN_DISK_SIZE_GB"},
	{"kernelParams", "MACHINE_EXTRA_KERNEL_PARAMS"},
	{"kubelet.providerID", "PROVIDER_ID"},
	{"postProvisionCommands", "POST_PROVISION_CMDS"},
	{"mellanox.numVFs", "NUM_VFS"},
	{"dns.nameservers", "dns_resolver"},
	{"network.address", "STATIC_IP"},
	{"network.gateway", "STATIC_GATEWAY"},
	{"network.interface", "STATIC_IFACE"},
}

// ParseVars reads a telekom BOOTy /deploy/vars file — lines of
// `export KEY="value"` (export optional; double quotes with backslash
// escapes, single quotes literal, or bare; # comments) — and maps it onto a
// MachineConfig:
//
//	IMAGE                         image.url (one image; a list is an error)
//	IMAGE_CHECKSUM(_TYPE)         image.checksum ("sha256:HEX"; a bare HEX takes IMAGE_CHECKSUM_TYPE or its length)
//	HOSTNAME                      hostname
//	MODE                          mode (BOOTy's "hard"/"soft" mean deprovision/soft-deprovision)
//	DISK_DEVICE                   disk.device
//	MIN_DISK_SIZE_GB              disk.hints.size ">= N"
//	SECURE_ERASE                  disk.secureErase
//	MACHINE_EXTRA_KERNEL_PARAMS   kernelParams (split on whitespace)
//	PROVIDER_ID                   kubelet.providerID
//	POST_PROVISION_CMDS           postProvisionCommands (split on ";")
//	NUM_VFS                       mellanox.numVFs
//	DISABLE_KEXEC                 handoff reboot when true
//	dns_resolver                  dns.nameservers (split on "," or whitespace)
//	STATIC_IP/_GATEWAY/_IFACE     network.address/gateway/interface
//
// TOKEN and the *_URL endpoints go to VarsEndpoints; other keys are listed in
// VarsEndpoints.Ignored. The result has apiVersion set and defaults applied,
// and is validated: every problem, of syntax or of content, comes back at
// once in a *ValidationError, naming the line or the variable.
func ParseVars(data []byte) (*MachineConfig, *VarsEndpoints, error) {
	cfg := &MachineConfig{APIVersion: APIVersion}
	ep := &VarsEndpoints{}
	var ps []problem
	var checksum, checksumType string

	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), MaxConfigSize)
	for lineNo := 1; sc.Scan(); lineNo++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		where := fmt.Sprintf("vars line %d", lineNo)
		line = strings.TrimSpace(strings.TrimPrefix(line, "export "))
		key, raw, ok := strings.Cut(line, "=")
		if !ok || !varKeyRE.MatchString(key) {
			ps = append(ps, problem{where, "want KEY=\"value\" or export KEY=\"value\""})
			continue
		}
		value, err := unquoteVar(raw)
		if err != nil {
			ps = append(ps, problem{where + " (" + key + ")", err.Error()})
			continue
		}
		bad := func(format string, args ...any) {
			ps = append(ps, problem{key, fmt.Sprintf(format, args...)})
		}
		switch key {
		case "IMAGE":
			imgs := strings.Fields(strings.ReplaceAll(value, ",", " "))
			switch len(imgs) {
			case 0:
			case 1:
				cfg.Image.URL = imgs[0]
			default:
				bad("%d images given; booty writes exactly one", len(imgs))
			}
		case "IMAGE_CHECKSUM":
			checksum = value
		case "IMAGE_CHECKSUM_TYPE":
			checksumType = strings.ToLower(value)
		case "HOSTNAME":
			cfg.Hostname = value
		case "MODE":
			switch value {
			case "hard":
				cfg.Mode = ModeDeprovision
			case "soft":
				cfg.Mode = ModeSoftDeprovision
			default:
				cfg.Mode = value
			}
		case "DISK_DEVICE":
			cfg.Disk.Device = value
		case "MIN_DISK_SIZE_GB":
			if value == "" {
				break
			}
			n, err := strconv.ParseUint(value, 10, 32)
			if err != nil {
				bad("want a whole number of GiB, got %q", value)
				break
			}
			if cfg.Disk.Hints == nil {
				cfg.Disk.Hints = RootDeviceHints{}
			}
			cfg.Disk.Hints["size"] = fmt.Sprintf(">= %d", n)
		case "SECURE_ERASE":
			cfg.Disk.SecureErase = parseVarBool(value)
		case "MACHINE_EXTRA_KERNEL_PARAMS":
			cfg.KernelParams = strings.Fields(value)
		case "PROVIDER_ID":
			cfg.Kubelet.ProviderID = value
		case "POST_PROVISION_CMDS":
			for _, c := range strings.Split(value, ";") {
				if c = strings.TrimSpace(c); c != "" {
					cfg.PostProvisionCommands = append(cfg.PostProvisionCommands, c)
				}
			}
		case "NUM_VFS":
			if value == "" {
				break
			}
			n, err := strconv.Atoi(value)
			if err != nil {
				bad("want an integer, got %q", value)
				break
			}
			cfg.Mellanox.NumVFs = n
		case "DISABLE_KEXEC":
			if parseVarBool(value) {
				cfg.Handoff = HandoffReboot
			}
		case "dns_resolver":
			cfg.DNS.Nameservers = strings.Fields(strings.ReplaceAll(value, ",", " "))
		case "STATIC_IP":
			cfg.Network.Address = value
		case "STATIC_GATEWAY":
			cfg.Network.Gateway = value
		case "STATIC_IFACE":
			cfg.Network.Interface = value
		case "TOKEN":
			ep.Token = value
		case "INIT_URL":
			ep.InitURL = value
		case "SUCCESS_URL":
			ep.SuccessURL = value
		case "ERROR_URL":
			ep.ErrorURL = value
		case "LOG_URL":
			ep.LogURL = value
		case "DEBUG_URL":
			ep.DebugURL = value
		case "HEARTBEAT_URL":
			ep.HeartbeatURL = value
		default:
			ep.Ignored = append(ep.Ignored, key)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("read vars: %w", err)
	}

	if checksum != "" {
		cs, msg := varsChecksum(checksum, checksumType)
		if msg != "" {
			ps = append(ps, problem{"IMAGE_CHECKSUM", msg})
		}
		cfg.Image.Checksum = cs
	}
	for _, f := range []struct{ key, u string }{
		{"INIT_URL", ep.InitURL}, {"SUCCESS_URL", ep.SuccessURL}, {"ERROR_URL", ep.ErrorURL},
		{"LOG_URL", ep.LogURL}, {"DEBUG_URL", ep.DebugURL}, {"HEARTBEAT_URL", ep.HeartbeatURL},
	} {
		if f.u != "" {
			if msg := CheckURL(f.u, "http", "https"); msg != "" {
				ps = append(ps, problem{f.key, msg})
			}
		}
	}
	if strings.ContainsAny(ep.Token, " \t\r\n") {
		ps = append(ps, problem{"TOKEN", "must not contain whitespace"})
	}

	cfg.ApplyDefaults()
	for _, p := range cfg.validate() {
		if p.field == "image.checksum" && checksum != "" {
			continue // already reported as IMAGE_CHECKSUM
		}
		ps = append(ps, problem{varsName(p.field), p.msg})
	}
	if len(ps) > 0 {
		return nil, nil, newValidationError(ps)
	}
	return cfg, ep, nil
}

// varsName turns a MachineConfig field path into "KEY (field)" for vars users.
func varsName(field string) string {
	for _, f := range varsFields {
		if field == f.field || strings.HasPrefix(field, f.field+".") || strings.HasPrefix(field, f.field+"[") {
			return f.key + " (" + field + ")"
		}
	}
	return field
}

// varsChecksum builds "algo:hex" from BOOTy's IMAGE_CHECKSUM and IMAGE_CHECKSUM_TYPE.
func varsChecksum(sum, typ string) (string, string) {
	if strings.Contains(sum, ":") {
		return sum, ""
	}
	if typ == "" {
		switch len(sum) {
		case 64:
			typ = "sha256"
		case 128:
			typ = "sha512"
		default:
			return "", fmt.Sprintf("cannot tell the algorithm of a %d-digit checksum: set IMAGE_CHECKSUM_TYPE to sha256 or sha512", len(sum))
		}
	}
	if typ != "sha256" && typ != "sha512" {
		return "", fmt.Sprintf("IMAGE_CHECKSUM_TYPE %q not supported, want sha256 or sha512", typ)
	}
	cs := typ + ":" + sum
	if image.CheckChecksum(cs) != nil {
		return "", fmt.Sprintf("want %d hex digits for %s, got %q", map[string]int{"sha256": 64, "sha512": 128}[typ], typ, truncate(sum, 80))
	}
	return cs, ""
}

// unquoteVar removes shell quoting from a value: "..." with \" \\ \$ \`
// escapes, '...' literally, or a bare word.
func unquoteVar(s string) (string, error) {
	s = strings.TrimSpace(s)
	switch {
	case strings.HasPrefix(s, `"`):
		var b strings.Builder
		for i := 1; i < len(s); i++ {
			c := s[i]
			switch {
			case c == '\\' && i+1 < len(s) && strings.ContainsRune("\"\\$`", rune(s[i+1])):
				b.WriteByte(s[i+1])
				i++
			case c == '"':
				if rest := strings.TrimSpace(s[i+1:]); rest != "" && !strings.HasPrefix(rest, "#") {
					return "", fmt.Errorf("text after the closing quote: %q", rest)
				}
				return b.String(), nil
			default:
				b.WriteByte(c)
			}
		}
		return "", fmt.Errorf("unterminated double quote")
	case strings.HasPrefix(s, `'`):
		end := strings.IndexByte(s[1:], '\'')
		if end < 0 {
			return "", fmt.Errorf("unterminated single quote")
		}
		if rest := strings.TrimSpace(s[end+2:]); rest != "" && !strings.HasPrefix(rest, "#") {
			return "", fmt.Errorf("text after the closing quote: %q", rest)
		}
		return s[1 : end+1], nil
	}
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		if rest := strings.TrimSpace(s[i:]); !strings.HasPrefix(rest, "#") {
			return "", fmt.Errorf("unquoted value with spaces: quote it")
		}
		s = s[:i]
	}
	return s, nil
}

// parseVarBool reads BOOTy's truthy values: true, 1, yes (any case).
func parseVarBool(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "1", "yes":
		return true
	}
	return false
}
