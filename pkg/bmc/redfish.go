package bmc

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// maxBody bounds how much of a Redfish answer is read.
const maxBody = 4 << 20

// redfish is the Redfish Driver: a small client of the DMTF schema
// (ServiceRoot, ComputerSystem, its Reset action and Boot override,
// Manager VirtualMedia).
type redfish struct {
	addr  Address
	creds Credentials
	opts  Options
	hc    *http.Client
	base  string // https://host[:port]

	mu         sync.Mutex
	systemPath string // resolved ComputerSystem path
	token      string // X-Auth-Token of the session, with SessionAuth
	sessionURI string
}

func newRedfish(a Address, creds Credentials, o Options) (*redfish, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // a BMC network is reached directly
	tr.TLSClientConfig = &tls.Config{
		RootCAs:            o.RootCAs,
		InsecureSkipVerify: o.DisableCertificateVerification, //nolint:gosec // the operator asked for it per machine
		MinVersion:         tls.VersionTLS12,
	}
	return &redfish{
		addr:       a,
		creds:      creds,
		opts:       o,
		hc:         &http.Client{Transport: tr, Timeout: o.Timeout, CheckRedirect: noRedirect},
		base:       a.BaseURL(),
		systemPath: a.SystemPath,
	}, nil
}

// noRedirect refuses redirects: a redirect to another host would take the
// credentials with it.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

func (r *redfish) Address() Address { return r.addr }

// redfishError is a Redfish answer with a status of 400 or more.
type redfishError struct {
	Method, Path string
	Status       int
	Message      string
}

func (e *redfishError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("%s %s: http %d: %s", e.Method, e.Path, e.Status, msg)
}

// errorMessage extracts the message of a Redfish error body
// ({"error": {"message", "@Message.ExtendedInfo": [{"Message"}]}}), or a
// short prefix of a body that is not one.
func errorMessage(body []byte) string {
	var e struct {
		Error struct {
			Message      string `json:"message"`
			ExtendedInfo []struct {
				Message string `json:"Message"`
			} `json:"@Message.ExtendedInfo"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && (e.Error.Message != "" || len(e.Error.ExtendedInfo) > 0) {
		msgs := []string{}
		if e.Error.Message != "" {
			msgs = append(msgs, e.Error.Message)
		}
		for _, x := range e.Error.ExtendedInfo {
			if x.Message != "" && x.Message != e.Error.Message {
				msgs = append(msgs, x.Message)
			}
		}
		return strings.Join(msgs, "; ")
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// do sends one request (with retries) and decodes a JSON answer into out
// when out is not nil. 401 and 403 fail with ErrAuth; other 4xx are not
// retried; 5xx, 429 and network errors are.
func (r *redfish) do(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("%s %s: encode request: %w", method, path, err)
		}
	}
	err := retry(ctx, r.opts, func(ctx context.Context) error {
		err := r.once(ctx, method, path, body, out)
		var re *redfishError
		if r.opts.SessionAuth && errors.As(err, &re) && re.Status == http.StatusUnauthorized {
			// The session may have expired: log in again, once.
			r.mu.Lock()
			r.token = ""
			r.mu.Unlock()
			err = r.once(ctx, method, path, body, out)
		}
		return err
	})
	return redact(err, r.creds.Password)
}

func (r *redfish) once(ctx context.Context, method, path string, body []byte, out any) error {
	if r.opts.SessionAuth && path != sessionsPath {
		if err := r.login(ctx); err != nil {
			return err
		}
	}
	target, err := r.resolve(path)
	if err != nil {
		return permanent(fmt.Errorf("%s %s: %w", method, path, err))
	}
	req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(body))
	if err != nil {
		return permanent(fmt.Errorf("%s %s: %w", method, path, err))
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("OData-Version", "4.0")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	r.authorize(req, path)
	resp, err := r.hc.Do(req)
	if err != nil {
		// *url.Error quotes the URL, which carries no credentials.
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		re := &redfishError{Method: method, Path: path, Status: resp.StatusCode, Message: errorMessage(data)}
		switch {
		case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
			return fmt.Errorf("%w: %w", ErrAuth, re)
		case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
			return re
		default:
			return permanent(re)
		}
	}
	if path == sessionsPath && method == http.MethodPost {
		r.mu.Lock()
		r.token = resp.Header.Get("X-Auth-Token")
		r.sessionURI = resp.Header.Get("Location")
		r.mu.Unlock()
		if r.token == "" {
			return permanent(fmt.Errorf("%s %s: no X-Auth-Token in the answer", method, path))
		}
	}
	if out != nil && len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return permanent(fmt.Errorf("%s %s: decode answer: %w", method, path, err))
		}
	}
	return nil
}

const sessionsPath = "/redfish/v1/SessionService/Sessions"

// resolve returns the URL of a path the BMC named (an @odata.id or action
// target): a path is joined to the service's origin; an absolute URL is
// accepted only on the service's own origin, so that credentials never
// go elsewhere.
func (r *redfish) resolve(path string) (string, error) {
	if strings.HasPrefix(path, "/") {
		return r.base + path, nil
	}
	u, err := url.Parse(path)
	if err != nil || u.Scheme+"://"+u.Host != r.base {
		return "", fmt.Errorf("link %q is not on %s", path, r.base)
	}
	return path, nil
}

// authorize adds the session token or basic auth to req.
func (r *redfish) authorize(req *http.Request, path string) {
	if r.opts.SessionAuth && path != sessionsPath {
		r.mu.Lock()
		req.Header.Set("X-Auth-Token", r.token)
		r.mu.Unlock()
		return
	}
	if !r.opts.SessionAuth {
		req.SetBasicAuth(r.creds.Username, r.creds.Password)
	}
}

// login creates a session unless one is open.
func (r *redfish) login(ctx context.Context) error {
	r.mu.Lock()
	have := r.token != ""
	r.mu.Unlock()
	if have {
		return nil
	}
	in, _ := json.Marshal(map[string]string{"UserName": r.creds.Username, "Password": r.creds.Password})
	if err := r.once(ctx, http.MethodPost, sessionsPath, in, nil); err != nil {
		return fmt.Errorf("redfish login: %w", err)
	}
	return nil
}

// Close ends the Redfish session, if one is open, and closes idle
// connections.
func (r *redfish) Close(ctx context.Context) error {
	defer r.hc.CloseIdleConnections()
	r.mu.Lock()
	uri, token := r.sessionURI, r.token
	r.token, r.sessionURI = "", ""
	r.mu.Unlock()
	if token == "" || uri == "" {
		return nil
	}
	if u, err := url.Parse(uri); err == nil {
		uri = u.Path
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, r.base+uri, nil)
	if err != nil {
		return fmt.Errorf("redfish logout: %w", err)
	}
	req.Header.Set("X-Auth-Token", token)
	resp, err := r.hc.Do(req)
	if err != nil {
		return fmt.Errorf("redfish logout: %w", err)
	}
	resp.Body.Close()
	return nil
}

// odataID is a Redfish link.
type odataID struct {
	ID string `json:"@odata.id"`
}

type collection struct {
	Members []odataID `json:"Members"`
}

type action struct {
	Target string `json:"target"`
}

// System is the part of a Redfish ComputerSystem the driver reads.
type System struct {
	ID         string `json:"Id"`
	PowerState string `json:"PowerState"`
	Boot       struct {
		BootSourceOverrideTarget  string   `json:"BootSourceOverrideTarget"`
		BootSourceOverrideEnabled string   `json:"BootSourceOverrideEnabled"`
		BootSourceOverrideMode    string   `json:"BootSourceOverrideMode,omitempty"`
		AllowableValues           []string `json:"BootSourceOverrideTarget@Redfish.AllowableValues,omitempty"`
	} `json:"Boot"`
	Actions struct {
		Reset struct {
			Target          string   `json:"target"`
			AllowableValues []string `json:"ResetType@Redfish.AllowableValues"`
		} `json:"#ComputerSystem.Reset"`
	} `json:"Actions"`
	Links struct {
		ManagedBy []odataID `json:"ManagedBy"`
	} `json:"Links"`
}

// system returns the path of the ComputerSystem: the address's, or the
// only member of /redfish/v1/Systems.
func (r *redfish) system(ctx context.Context) (string, error) {
	r.mu.Lock()
	p := r.systemPath
	r.mu.Unlock()
	if p != "" {
		return p, nil
	}
	var c collection
	if err := r.do(ctx, http.MethodGet, "/redfish/v1/Systems", nil, &c); err != nil {
		return "", fmt.Errorf("list redfish systems: %w", err)
	}
	if len(c.Members) != 1 {
		return "", fmt.Errorf("redfish %s lists %d systems; name one in the address (/redfish/v1/Systems/ID)", r.addr, len(c.Members))
	}
	p = strings.TrimRight(c.Members[0].ID, "/")
	r.mu.Lock()
	r.systemPath = p
	r.mu.Unlock()
	return p, nil
}

func (r *redfish) getSystem(ctx context.Context) (string, *System, error) {
	p, err := r.system(ctx)
	if err != nil {
		return "", nil, err
	}
	var s System
	if err := r.do(ctx, http.MethodGet, p, nil, &s); err != nil {
		return "", nil, fmt.Errorf("get redfish system %s: %w", p, err)
	}
	return p, &s, nil
}

func (r *redfish) PowerState(ctx context.Context) (PowerState, error) {
	_, s, err := r.getSystem(ctx)
	if err != nil {
		return PowerUnknown, err
	}
	return redfishPower(s.PowerState), nil
}

func redfishPower(s string) PowerState {
	switch PowerState(s) {
	case PowerOn, PowerOff, PowerPoweringOn, PowerPoweringOff:
		return PowerState(s)
	}
	return PowerUnknown
}

// reset posts ComputerSystem.Reset with resetType to the system's action
// target.
func (r *redfish) reset(ctx context.Context, p string, s *System, resetType string) error {
	target := s.Actions.Reset.Target
	if target == "" {
		target = p + "/Actions/ComputerSystem.Reset"
	}
	if av := s.Actions.Reset.AllowableValues; len(av) > 0 && !slices.Contains(av, resetType) {
		return fmt.Errorf("reset %s with %s: %w (allowed: %s)", p, resetType, ErrUnsupported, strings.Join(av, ", "))
	}
	if err := r.do(ctx, http.MethodPost, target, map[string]string{"ResetType": resetType}, nil); err != nil {
		return fmt.Errorf("reset %s with %s: %w", p, resetType, err)
	}
	return nil
}

func (r *redfish) PowerOn(ctx context.Context) error {
	p, s, err := r.getSystem(ctx)
	if err != nil {
		return fmt.Errorf("power on %s: %w", r.addr, err)
	}
	if redfishPower(s.PowerState) == PowerOn {
		return nil
	}
	if err := r.reset(ctx, p, s, "On"); err != nil {
		return fmt.Errorf("power on %s: %w", r.addr, err)
	}
	return waitPower(ctx, r.opts, r.opts.PowerTimeout, "power on "+r.addr.String(), PowerOn, r.PowerState)
}

func (r *redfish) PowerOff(ctx context.Context, mode OffMode) error {
	what := fmt.Sprintf("power off (%s) %s", mode, r.addr)
	p, s, err := r.getSystem(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if redfishPower(s.PowerState) == PowerOff {
		return nil
	}
	resetType, bound := "ForceOff", r.opts.PowerTimeout
	if mode == OffSoft {
		resetType, bound = "GracefulShutdown", r.opts.SoftOffTimeout
	}
	if err := r.reset(ctx, p, s, resetType); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return waitPower(ctx, r.opts, bound, what, PowerOff, r.PowerState)
}

func (r *redfish) Reset(ctx context.Context) error {
	what := "reset " + r.addr.String()
	p, s, err := r.getSystem(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	resetType := "ForceRestart"
	if redfishPower(s.PowerState) == PowerOff {
		resetType = "On"
	}
	if err := r.reset(ctx, p, s, resetType); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return waitPower(ctx, r.opts, r.opts.PowerTimeout, what, PowerOn, r.PowerState)
}

// redfishTargets maps boot devices to BootSourceOverrideTarget.
var redfishTargets = map[Device]string{DevicePXE: "Pxe", DeviceDisk: "Hdd", DeviceCDROM: "Cd"}

func (r *redfish) SetBootDevice(ctx context.Context, dev BootDevice) error {
	what := fmt.Sprintf("set boot device %s on %s", dev, r.addr)
	if err := dev.Validate(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	p, err := r.system(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	enabled := "Once"
	if dev.Persistent {
		enabled = "Continuous"
	}
	boot := map[string]string{
		"BootSourceOverrideTarget":  redfishTargets[dev.Device],
		"BootSourceOverrideEnabled": enabled,
		"BootSourceOverrideMode":    string(dev.mode()),
	}
	if err := r.do(ctx, http.MethodPatch, p, map[string]any{"Boot": boot}, nil); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// virtualMedia is the part of a VirtualMedia resource the driver reads.
type virtualMedia struct {
	ID         string   `json:"Id"`
	MediaTypes []string `json:"MediaTypes"`
	Image      string   `json:"Image"`
	Inserted   bool     `json:"Inserted"`
	Actions    struct {
		Insert action `json:"#VirtualMedia.InsertMedia"`
		Eject  action `json:"#VirtualMedia.EjectMedia"`
	} `json:"Actions"`
}

// cd finds the virtual CD: the first VirtualMedia of the system's managers
// whose MediaTypes has CD or DVD.
func (r *redfish) cd(ctx context.Context) (string, *virtualMedia, error) {
	_, s, err := r.getSystem(ctx)
	if err != nil {
		return "", nil, err
	}
	managers := s.Links.ManagedBy
	if len(managers) == 0 {
		var c collection
		if err := r.do(ctx, http.MethodGet, "/redfish/v1/Managers", nil, &c); err != nil {
			return "", nil, fmt.Errorf("list redfish managers: %w", err)
		}
		managers = c.Members
	}
	for _, m := range managers {
		var mgr struct {
			VirtualMedia odataID `json:"VirtualMedia"`
		}
		if err := r.do(ctx, http.MethodGet, m.ID, nil, &mgr); err != nil {
			return "", nil, fmt.Errorf("get redfish manager %s: %w", m.ID, err)
		}
		if mgr.VirtualMedia.ID == "" {
			continue
		}
		var c collection
		if err := r.do(ctx, http.MethodGet, mgr.VirtualMedia.ID, nil, &c); err != nil {
			return "", nil, fmt.Errorf("list virtual media %s: %w", mgr.VirtualMedia.ID, err)
		}
		for _, member := range c.Members {
			var vm virtualMedia
			if err := r.do(ctx, http.MethodGet, member.ID, nil, &vm); err != nil {
				return "", nil, fmt.Errorf("get virtual media %s: %w", member.ID, err)
			}
			if slices.Contains(vm.MediaTypes, "CD") || slices.Contains(vm.MediaTypes, "DVD") {
				return member.ID, &vm, nil
			}
		}
	}
	return "", nil, fmt.Errorf("%w: no virtual CD or DVD under the managers of %s", ErrUnsupported, r.addr)
}

func (r *redfish) InsertMedia(ctx context.Context, imageURL string) error {
	what := "insert virtual media on " + r.addr.String()
	u, err := url.Parse(imageURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s: image url must be http(s)://host/path", what)
	}
	p, vm, err := r.cd(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if vm.Inserted {
		if err := r.eject(ctx, p, vm); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	target := vm.Actions.Insert.Target
	if target == "" {
		target = p + "/Actions/VirtualMedia.InsertMedia"
	}
	in := map[string]any{"Image": imageURL, "Inserted": true, "WriteProtected": true}
	if err := r.do(ctx, http.MethodPost, target, in, nil); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func (r *redfish) EjectMedia(ctx context.Context) error {
	what := "eject virtual media on " + r.addr.String()
	p, vm, err := r.cd(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !vm.Inserted {
		return nil
	}
	if err := r.eject(ctx, p, vm); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func (r *redfish) eject(ctx context.Context, p string, vm *virtualMedia) error {
	target := vm.Actions.Eject.Target
	if target == "" {
		target = p + "/Actions/VirtualMedia.EjectMedia"
	}
	return r.do(ctx, http.MethodPost, target, map[string]any{}, nil)
}
