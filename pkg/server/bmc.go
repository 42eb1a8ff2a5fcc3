package server

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/bmc"
	"github.com/booty-dev/booty/pkg/bmdb"
)

// The BMC routes: bootyd drives a machine's BMC with the credentials it
// stores (see pkg/api/fleet.go). Calls on one machine are serialised
// within this bootyd; a second one while the first runs gets 409.

// bmcSlack is what a BMC route's answer may take beyond the driver's own
// bound of the call (the power state read after an action, the event).
const bmcSlack = 30 * time.Second

// bmcState is what the BMC routes keep: the drivers' options and the
// machines with a call in progress.
type bmcState struct {
	opts bmc.Options
	mu   sync.Mutex
	busy map[string]bool // machine ID → a call runs
}

// newBMCState builds the drivers' options from opts.BMC, adding the CA
// certificates of opts.BMCCACert (a PEM file) to the system's roots. It
// fails naming the file when it cannot be read or holds no certificate.
func newBMCState(opts Options) (*bmcState, error) {
	o := opts.BMC
	if o.Logger == nil {
		o.Logger = opts.Logger.With("component", "bmc")
	}
	if opts.BMCCACert != "" {
		pem, err := os.ReadFile(opts.BMCCACert)
		if err != nil {
			return nil, fmt.Errorf("read BMC CA certificate: %w", err)
		}
		pool := o.RootCAs
		if pool == nil {
			if pool, err = x509.SystemCertPool(); err != nil {
				pool = x509.NewCertPool()
			}
		} else {
			pool = pool.Clone()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("read BMC CA certificate: %s holds no PEM certificate", opts.BMCCACert)
		}
		o.RootCAs = pool
	}
	return &bmcState{opts: o, busy: map[string]bool{}}, nil
}

// BMCOptions returns the options bootyd's BMC routes drive BMCs with:
// Options.BMC with the CA certificates of Options.BMCCACert added to its
// roots. bootyd hands the same roots to its control loops (reconciler,
// Recoverer), so they trust the Redfish BMCs its routes trust.
func (s *Server) BMCOptions() bmc.Options { return s.bmc.opts }

// bmcRoutes adds the BMC routes to mux.
func (s *Server) bmcRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/machines/{machine}/bmc/power", s.operator(s.handleBMCPowerState))
	mux.HandleFunc("POST /v1/machines/{machine}/bmc/power", s.operator(s.handleBMCPower))
	mux.HandleFunc("POST /v1/machines/{machine}/bmc/bootdev", s.operator(s.handleBMCBootDevice))
}

// bmcCall is one BMC operation of an operator on a machine.
type bmcCall struct {
	s      *Server
	m      bmdb.Machine
	drv    bmc.Driver
	secret string // the BMC password, scrubbed from every message
	who    string
	reason string // the event's reason
	what   string // "power on", "boot device pxe (once, UEFI)", …
}

// startBMC resolves the machine, claims it for one BMC call, loads its
// credentials and builds its driver. It answers and returns nil when the
// machine is unknown (404), has no BMC or credentials (409), or a call on
// it runs (409); the caller must call done on what it returns.
func (s *Server) startBMC(w http.ResponseWriter, r *http.Request, reason, what string) *bmcCall {
	m, ok := s.pathMachine(w, r)
	if !ok {
		return nil
	}
	c := &bmcCall{s: s, m: m, who: operatorWho(s, r), reason: reason, what: what}
	if m.BMC.Address == "" {
		c.record(bmdb.EventWarning, "refused: the machine has no BMC address")
		writeError(w, http.StatusConflict, "%s of machine %s: the machine has no BMC address (set one with PATCH or bootyctl apply)", what, m.Name)
		return nil
	}
	if m.BMC.CredentialsRef == "" {
		c.record(bmdb.EventWarning, "refused: the machine has no BMC credentials")
		writeError(w, http.StatusConflict, "%s of machine %s: the machine has no BMC credentials (set a username and password with PATCH or bootyctl apply)", what, m.Name)
		return nil
	}
	creds, err := s.db.GetCredentials(r.Context(), m.BMC.CredentialsRef)
	if errors.Is(err, bmdb.ErrNotFound) {
		c.record(bmdb.EventWarning, fmt.Sprintf("refused: credentials %q are not stored", m.BMC.CredentialsRef))
		writeError(w, http.StatusConflict, "%s of machine %s: its BMC credentials %q are not stored", what, m.Name, m.BMC.CredentialsRef)
		return nil
	}
	if err != nil {
		s.dbError(w, what+" of machine "+m.Name+": read BMC credentials", err)
		return nil
	}
	c.secret = creds.Password
	o := s.bmc.opts
	o.DisableCertificateVerification = m.BMC.DisableCertificateVerification
	drv, err := bmc.New(m.BMC.Address, bmc.Credentials{Username: creds.Username, Password: creds.Password}, o)
	if err != nil {
		msg := c.scrub(err.Error())
		c.record(bmdb.EventWarning, "refused: "+msg)
		writeError(w, http.StatusConflict, "%s of machine %s: its BMC cannot be driven: %s", what, m.Name, msg)
		return nil
	}
	s.bmc.mu.Lock()
	busy := s.bmc.busy[m.ID]
	if !busy {
		s.bmc.busy[m.ID] = true
	}
	s.bmc.mu.Unlock()
	if busy {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = drv.Close(ctx)
		c.record(bmdb.EventWarning, "refused: another BMC call on the machine is in progress")
		writeError(w, http.StatusConflict, "%s of machine %s: another BMC call on it is in progress", what, m.Name)
		return nil
	}
	c.drv = drv
	return c
}

// done releases the machine and closes the driver.
func (c *bmcCall) done() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.drv.Close(ctx); err != nil {
		c.s.log.Debug("close bmc driver", "machine", c.m.Name, "err", c.scrub(err.Error()))
	}
	c.s.bmc.mu.Lock()
	delete(c.s.bmc.busy, c.m.ID)
	c.s.bmc.mu.Unlock()
}

// scrub removes the BMC password from msg (the drivers never put it in
// their errors; this holds even if a BMC echoes it).
func (c *bmcCall) scrub(msg string) string {
	if c.secret == "" {
		return msg
	}
	return strings.ReplaceAll(msg, c.secret, "<redacted>")
}

// record appends the call's event to the machine's history: who asked for
// what, and how it ended. A failure to record is logged, not answered: the
// BMC call happened either way.
func (c *bmcCall) record(typ, outcome string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg := c.scrub(fmt.Sprintf("%s by %s: %s", c.what, c.who, outcome))
	if err := c.s.db.RecordEvent(ctx, c.m.ID, typ, c.reason, msg); err != nil {
		c.s.log.Warn("record bmc event", "machine", c.m.Name, "err", err)
	}
	c.s.log.Info("bmc call", "machine", c.m.Name, "call", c.what, "by", c.who, "outcome", c.scrub(outcome))
}

// fail records a failed BMC call and answers 502 with the BMC's error.
func (c *bmcCall) fail(w http.ResponseWriter, err error) {
	msg := c.scrub(err.Error())
	c.record(bmdb.EventWarning, "failed: "+msg)
	writeError(w, http.StatusBadGateway, "%s of machine %s: %s", c.what, c.m.Name, msg)
}

// context bounds the call: the driver's own bound for it plus some slack,
// and the answer's write deadline with it.
func (c *bmcCall) context(w http.ResponseWriter, r *http.Request, bound time.Duration) (context.Context, context.CancelFunc) {
	d := time.Now().Add(bound + bmcSlack)
	_ = http.NewResponseController(w).SetWriteDeadline(d.Add(5 * time.Second))
	return context.WithDeadline(r.Context(), d)
}

// operatorWho names the operator of r for events: the line of its token
// among the configured ones (never the token) and its address.
func operatorWho(s *Server, r *http.Request) string {
	tok, _ := bearer(r.Header.Get("Authorization"))
	n := 0
	for i, t := range s.opts.OperatorTokens {
		if constantEqual(tok, t) {
			n = i + 1
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return fmt.Sprintf("operator token %d from %s", n, host)
}

// handleBMCPowerState answers GET /v1/machines/{machine}/bmc/power.
func (s *Server) handleBMCPowerState(w http.ResponseWriter, r *http.Request) {
	c := s.startBMC(w, r, "BMCPowerState", "power state")
	if c == nil {
		return
	}
	defer c.done()
	ctx, cancel := c.context(w, r, s.bmc.callBound())
	defer cancel()
	st, err := c.drv.PowerState(ctx)
	if err != nil {
		c.fail(w, err)
		return
	}
	c.record(bmdb.EventNormal, "power is "+string(st))
	writeJSON(w, http.StatusOK, api.BMCPower{State: string(st)})
}

// powerActions maps BMCPowerRequest.Action to the driver call and its bound.
var powerActions = map[string]func(ctx context.Context, d bmc.Driver) error{
	api.PowerActionOn:      func(ctx context.Context, d bmc.Driver) error { return d.PowerOn(ctx) },
	api.PowerActionOff:     func(ctx context.Context, d bmc.Driver) error { return d.PowerOff(ctx, bmc.OffHard) },
	api.PowerActionSoftOff: func(ctx context.Context, d bmc.Driver) error { return d.PowerOff(ctx, bmc.OffSoft) },
	api.PowerActionReset:   func(ctx context.Context, d bmc.Driver) error { return d.Reset(ctx) },
}

// handleBMCPower answers POST /v1/machines/{machine}/bmc/power: it runs the
// action, waits until the BMC reports its power state (within the driver's
// bound) and answers the state after it.
func (s *Server) handleBMCPower(w http.ResponseWriter, r *http.Request) {
	var req api.BMCPowerRequest
	if !s.decodeBody(w, r, &req, "BMCPowerRequest") {
		return
	}
	act, ok := powerActions[req.Action]
	if !ok {
		writeError(w, http.StatusBadRequest, "BMCPowerRequest: action %q, want on, off, soft-off or reset", req.Action)
		return
	}
	c := s.startBMC(w, r, "BMCPower", "power "+req.Action)
	if c == nil {
		return
	}
	defer c.done()
	bound := s.bmc.powerBound()
	if req.Action == api.PowerActionSoftOff {
		bound = s.bmc.softOffBound()
	}
	ctx, cancel := c.context(w, r, bound)
	defer cancel()
	if err := act(ctx, c.drv); err != nil {
		c.fail(w, err)
		return
	}
	st, err := c.drv.PowerState(ctx)
	if err != nil {
		c.fail(w, fmt.Errorf("done, then read the power state: %w", err))
		return
	}
	c.record(bmdb.EventNormal, "done, power is "+string(st))
	writeJSON(w, http.StatusOK, api.BMCPower{State: string(st)})
}

// bootModes maps BMCBootDeviceRequest.Mode to the driver's.
var bootModes = map[string]bmc.BootMode{"": bmc.BootUEFI, "uefi": bmc.BootUEFI, "legacy": bmc.BootLegacy}

// handleBMCBootDevice answers POST /v1/machines/{machine}/bmc/bootdev.
func (s *Server) handleBMCBootDevice(w http.ResponseWriter, r *http.Request) {
	var req api.BMCBootDeviceRequest
	if !s.decodeBody(w, r, &req, "BMCBootDeviceRequest") {
		return
	}
	mode, ok := bootModes[strings.ToLower(req.Mode)]
	if !ok {
		writeError(w, http.StatusBadRequest, "BMCBootDeviceRequest: mode %q, want uefi or legacy", req.Mode)
		return
	}
	dev := bmc.BootDevice{Device: bmc.Device(req.Device), Persistent: req.Persistent, Mode: mode}
	if err := dev.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, "BMCBootDeviceRequest: %v", err)
		return
	}
	c := s.startBMC(w, r, "BMCBootDevice", "boot device "+dev.String())
	if c == nil {
		return
	}
	defer c.done()
	ctx, cancel := c.context(w, r, s.bmc.callBound())
	defer cancel()
	if err := c.drv.SetBootDevice(ctx, dev); err != nil {
		c.fail(w, err)
		return
	}
	c.record(bmdb.EventNormal, "set")
	writeJSON(w, http.StatusOK, api.BMCBootDeviceRequest{Device: string(dev.Device), Persistent: dev.Persistent, Mode: strings.ToLower(string(mode))})
}

// callBound is how long one BMC request may take with its retries.
func (b *bmcState) callBound() time.Duration {
	o := b.opts
	t, n := o.Timeout, o.Retries
	if t <= 0 {
		t = bmc.DefaultTimeout
	}
	if n == 0 {
		n = bmc.DefaultRetries
	}
	mb := o.MaxBackoff
	if mb <= 0 {
		mb = bmc.DefaultMaxBackoff
	}
	return time.Duration(max(n, 0)+1)*t + time.Duration(max(n, 0))*mb
}

// powerBound is how long a power on, hard off or reset may take.
func (b *bmcState) powerBound() time.Duration {
	p := b.opts.PowerTimeout
	if p <= 0 {
		p = bmc.DefaultPowerTimeout
	}
	return 2*b.callBound() + p
}

// softOffBound is how long a soft power off may take.
func (b *bmcState) softOffBound() time.Duration {
	p := b.opts.SoftOffTimeout
	if p <= 0 {
		p = bmc.DefaultSoftOffTimeout
	}
	return 2*b.callBound() + p
}
