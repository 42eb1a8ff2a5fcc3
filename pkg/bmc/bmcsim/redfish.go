package bmcsim

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/booty-dev/booty/pkg/bmc"
)

// RedfishConfig configures a Redfish test BMC.
type RedfishConfig struct {
	// Machine is what the BMC powers; required.
	Machine Machine
	// Username and Password the BMC accepts (basic auth or a session);
	// required.
	Username, Password string
	// SystemID is the ComputerSystem's Id; default "1".
	SystemID string
	// PowerDelay is how long a power change waits before it is applied;
	// default DefaultPowerDelay.
	PowerDelay time.Duration
	// PlainHTTP serves http instead of https (for redfish+http:// tests).
	PlainHTTP bool
	// Addr is the listen address; default 127.0.0.1:0.
	Addr string
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Faults are the failures a Redfish test BMC injects.
type Faults struct {
	// RejectAuth answers every request 401, whatever the credentials.
	RejectAuth bool
	// Latency delays every answer.
	Latency time.Duration
	// IgnorePower accepts power actions (204) and never applies them.
	IgnorePower bool
	// FailRequests answers that many next requests 503 (transient).
	FailRequests int
}

// Redfish is a Redfish BMC on a loopback port: ServiceRoot, the Systems
// collection with one ComputerSystem (PowerState, Boot override, the Reset
// action), SessionService, and Managers with one Manager whose
// VirtualMedia has a CD. Its methods are safe for concurrent use.
type Redfish struct {
	cfg     RedfishConfig
	chassis *chassis
	srv     *http.Server
	ln      net.Listener
	caPEM   []byte
	pool    *x509.CertPool
	done    chan struct{}

	mu       sync.Mutex
	faults   Faults
	sessions map[string]string // token → session id
	nextSess int
	media    struct {
		image    string
		inserted bool
	}
	requests []string // "METHOD path" of every request
}

// NewRedfish starts a Redfish BMC for cfg.Machine. Over https it serves a
// certificate for 127.0.0.1, ::1 and localhost signed by a CA made for it
// (CertPool and CACertPEM hand it to clients). It fails on an incomplete
// config or when it cannot listen.
func NewRedfish(cfg RedfishConfig) (*Redfish, error) {
	if err := setup("redfish", cfg.Machine, cfg.Username, cfg.Password, &cfg.PowerDelay, &cfg.Addr, &cfg.Logger); err != nil {
		return nil, err
	}
	if cfg.SystemID == "" {
		cfg.SystemID = "1"
	}
	r := &Redfish{
		cfg:      cfg,
		chassis:  newChassis(cfg.Machine, cfg.PowerDelay, cfg.Logger),
		sessions: map[string]string{},
		done:     make(chan struct{}),
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("start redfish bmc: listen %s: %w", cfg.Addr, err)
	}
	r.ln = ln
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug)}
	if !cfg.PlainHTTP {
		cert, caPEM, err := selfSignedCert()
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("start redfish bmc: %w", err)
		}
		r.caPEM = caPEM
		r.pool = x509.NewCertPool()
		r.pool.AppendCertsFromPEM(caPEM)
		r.ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	}
	go func() {
		defer close(r.done)
		if err := r.srv.Serve(r.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			cfg.Logger.Error("redfish bmc: serve", "err", err)
		}
	}()
	return r, nil
}

// selfSignedCert makes a CA and a server certificate it signs for the
// loopback addresses; it returns the server's key pair and the CA's PEM.
func selfSignedCert() (tls.Certificate, []byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("generate ca key: %w", err)
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "bmcsim test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("create ca certificate: %w", err)
	}
	ca, _ = x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("generate server key: %w", err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "bmcsim"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("create server certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), nil
}

// Close stops the server and waits for pending power changes.
func (r *Redfish) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := r.srv.Shutdown(ctx)
	<-r.done
	r.chassis.wait()
	return err
}

// Address returns the BMC address as metal3 writes it:
// redfish://127.0.0.1:PORT/redfish/v1/Systems/ID (redfish+http:// over
// plain http).
func (r *Redfish) Address() string {
	scheme := "redfish"
	if r.cfg.PlainHTTP {
		scheme = "redfish+http"
	}
	return scheme + "://" + r.ln.Addr().String() + r.systemPath()
}

// VirtualMediaAddress is Address with the redfish-virtualmedia scheme.
func (r *Redfish) VirtualMediaAddress() string {
	return strings.Replace(r.Address(), "redfish", "redfish-virtualmedia", 1)
}

// CertPool returns a pool holding the CA of the BMC's certificate; nil
// over plain http.
func (r *Redfish) CertPool() *x509.CertPool { return r.pool }

// CACertPEM returns the CA certificate in PEM; nil over plain http.
func (r *Redfish) CACertPEM() []byte { return r.caPEM }

// SetFaults replaces the injected failures.
func (r *Redfish) SetFaults(f Faults) {
	r.mu.Lock()
	r.faults = f
	r.mu.Unlock()
	r.chassis.setIgnore(f.IgnorePower)
}

// Boot returns the boot override in force (Device "" for none).
func (r *Redfish) Boot() bmc.BootDevice { return r.chassis.boot() }

// Media returns the virtual CD's image and whether it is inserted.
func (r *Redfish) Media() (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.media.image, r.media.inserted
}

// Requests returns "METHOD path" of every request so far.
func (r *Redfish) Requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.requests...)
}

// WaitPower waits until the power changes started so far are applied and
// returns the last one's error.
func (r *Redfish) WaitPower() error {
	r.chassis.wait()
	return r.chassis.lastError()
}

const (
	managerPath  = "/redfish/v1/Managers/BMC"
	cdPath       = managerPath + "/VirtualMedia/Cd"
	sessionsPath = "/redfish/v1/SessionService/Sessions"
)

func (r *Redfish) systemPath() string { return "/redfish/v1/Systems/" + r.cfg.SystemID }

// ServeHTTP injects the configured faults, checks credentials and routes.
func (r *Redfish) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.requests = append(r.requests, req.Method+" "+req.URL.Path)
	f := r.faults
	fail := f.FailRequests > 0
	if fail {
		r.faults.FailRequests--
	}
	r.mu.Unlock()
	if f.Latency > 0 {
		select {
		case <-time.After(f.Latency):
		case <-req.Context().Done():
			return
		}
	}
	if fail {
		writeError(w, http.StatusServiceUnavailable, "Base.1.8.ServiceTemporarilyUnavailable", "injected failure: service temporarily unavailable")
		return
	}
	path := strings.TrimRight(req.URL.Path, "/")
	if path == "/redfish" || path == "/redfish/v1" {
		// The service root is readable without credentials, as DMTF says.
		r.get(w, req, r.serviceRoot())
		return
	}
	if f.RejectAuth || !r.authorized(req, path) {
		w.Header().Set("WWW-Authenticate", `Basic realm="bmcsim"`)
		writeError(w, http.StatusUnauthorized, "Base.1.8.NoValidSession", "authentication required")
		return
	}
	sys := r.systemPath()
	switch {
	case path == "/redfish/v1/Systems":
		r.get(w, req, collectionOf("#ComputerSystemCollection.ComputerSystemCollection", "Computer System Collection", path, sys))
	case path == sys && req.Method == http.MethodPatch:
		r.patchSystem(w, req)
	case path == sys:
		r.get(w, req, r.system())
	case path == sys+"/Actions/ComputerSystem.Reset":
		r.resetAction(w, req)
	case path == "/redfish/v1/Managers":
		r.get(w, req, collectionOf("#ManagerCollection.ManagerCollection", "Manager Collection", path, managerPath))
	case path == managerPath:
		r.get(w, req, map[string]any{
			"@odata.id": managerPath, "@odata.type": "#Manager.v1_10_0.Manager", "Id": "BMC", "Name": "Manager",
			"ManagerType":  "BMC",
			"VirtualMedia": link(managerPath + "/VirtualMedia"),
			"Links":        map[string]any{"ManagerForServers": []any{link(sys)}},
		})
	case path == managerPath+"/VirtualMedia":
		r.get(w, req, collectionOf("#VirtualMediaCollection.VirtualMediaCollection", "Virtual Media Services", path, cdPath))
	case path == cdPath:
		r.get(w, req, r.virtualMedia())
	case path == cdPath+"/Actions/VirtualMedia.InsertMedia":
		r.insertMedia(w, req)
	case path == cdPath+"/Actions/VirtualMedia.EjectMedia":
		r.ejectMedia(w, req)
	case path == "/redfish/v1/SessionService":
		r.get(w, req, map[string]any{"@odata.id": path, "Id": "SessionService", "Sessions": link(sessionsPath)})
	case path == sessionsPath && req.Method == http.MethodPost:
		r.createSession(w, req)
	case strings.HasPrefix(path, sessionsPath+"/") && req.Method == http.MethodDelete:
		r.deleteSession(w, path)
	default:
		writeError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", "no resource at "+path)
	}
}

// authorized checks basic auth, or an X-Auth-Token; a POST to the
// sessions collection logs in and needs neither.
func (r *Redfish) authorized(req *http.Request, path string) bool {
	if path == sessionsPath && req.Method == http.MethodPost {
		return true
	}
	if tok := req.Header.Get("X-Auth-Token"); tok != "" {
		r.mu.Lock()
		_, ok := r.sessions[tok]
		r.mu.Unlock()
		return ok
	}
	u, p, ok := req.BasicAuth()
	return ok && r.credentialsMatch(u, p)
}

func (r *Redfish) credentialsMatch(u, p string) bool {
	return subtle.ConstantTimeCompare([]byte(u), []byte(r.cfg.Username)) == 1 &&
		subtle.ConstantTimeCompare([]byte(p), []byte(r.cfg.Password)) == 1
}

func (r *Redfish) get(w http.ResponseWriter, req *http.Request, v any) {
	if req.Method != http.MethodGet {
		writeError(w, http.StatusMethodNotAllowed, "Base.1.8.OperationNotAllowed", req.Method+" not allowed on "+req.URL.Path)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (r *Redfish) serviceRoot() map[string]any {
	return map[string]any{
		"@odata.id":      "/redfish/v1",
		"@odata.type":    "#ServiceRoot.v1_11_0.ServiceRoot",
		"Id":             "RootService",
		"Name":           "Root Service",
		"RedfishVersion": "1.11.0",
		"Systems":        link("/redfish/v1/Systems"),
		"Managers":       link("/redfish/v1/Managers"),
		"SessionService": link("/redfish/v1/SessionService"),
		"Links":          map[string]any{"Sessions": link(sessionsPath)},
	}
}

func (r *Redfish) system() map[string]any {
	sys := r.systemPath()
	boot := r.chassis.boot()
	target, enabled, mode := "None", "Disabled", "UEFI"
	if boot.Device != "" {
		target = map[bmc.Device]string{bmc.DevicePXE: "Pxe", bmc.DeviceDisk: "Hdd", bmc.DeviceCDROM: "Cd"}[boot.Device]
		enabled = "Once"
		if boot.Persistent {
			enabled = "Continuous"
		}
		if boot.Mode == bmc.BootLegacy {
			mode = "Legacy"
		}
	}
	return map[string]any{
		"@odata.id":   sys,
		"@odata.type": "#ComputerSystem.v1_13_0.ComputerSystem",
		"Id":          r.cfg.SystemID,
		"Name":        "bmcsim",
		"SystemType":  "Physical",
		"PowerState":  string(r.cfg.Machine.State()),
		"Boot": map[string]any{
			"BootSourceOverrideTarget":                         target,
			"BootSourceOverrideEnabled":                        enabled,
			"BootSourceOverrideMode":                           mode,
			"BootSourceOverrideTarget@Redfish.AllowableValues": []string{"None", "Pxe", "Hdd", "Cd"},
		},
		"Actions": map[string]any{
			"#ComputerSystem.Reset": map[string]any{
				"target":                            sys + "/Actions/ComputerSystem.Reset",
				"ResetType@Redfish.AllowableValues": []string{"On", "ForceOn", "ForceOff", "GracefulShutdown", "ForceRestart", "PowerCycle"},
			},
		},
		"Links": map[string]any{"ManagedBy": []any{link(managerPath)}},
	}
}

// resetTypes maps ResetType to the power change.
var resetTypes = map[string]action{
	"On":               actOn,
	"ForceOn":          actOn,
	"ForceOff":         actOffHard,
	"GracefulShutdown": actOffSoft,
	"ForceRestart":     actRestart,
	"PowerCycle":       actRestart,
}

func (r *Redfish) resetAction(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "Base.1.8.OperationNotAllowed", "use POST")
		return
	}
	var in struct{ ResetType string }
	if err := json.NewDecoder(http.MaxBytesReader(w, req.Body, 1<<16)).Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "Base.1.8.MalformedJSON", "malformed JSON: "+err.Error())
		return
	}
	a, ok := resetTypes[in.ResetType]
	if !ok {
		writeError(w, http.StatusBadRequest, "Base.1.8.ActionParameterValueNotInList", fmt.Sprintf("ResetType %q is not supported", in.ResetType))
		return
	}
	r.cfg.Logger.Info("redfish bmc: reset", "type", in.ResetType)
	r.chassis.apply(a)
	w.WriteHeader(http.StatusNoContent)
}

func (r *Redfish) patchSystem(w http.ResponseWriter, req *http.Request) {
	var in struct {
		Boot *struct {
			BootSourceOverrideTarget  *string
			BootSourceOverrideEnabled *string
			BootSourceOverrideMode    *string
		}
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, req.Body, 1<<16))
	if err := dec.Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "Base.1.8.MalformedJSON", "malformed JSON: "+err.Error())
		return
	}
	if in.Boot == nil {
		writeError(w, http.StatusBadRequest, "Base.1.8.PropertyUnknown", "only Boot can be patched")
		return
	}
	cur := r.chassis.boot()
	if t := in.Boot.BootSourceOverrideTarget; t != nil {
		dev, ok := map[string]bmc.Device{"None": "", "Pxe": bmc.DevicePXE, "Hdd": bmc.DeviceDisk, "Cd": bmc.DeviceCDROM}[*t]
		if !ok {
			writeError(w, http.StatusBadRequest, "Base.1.8.PropertyValueNotInList", fmt.Sprintf("BootSourceOverrideTarget %q is not one of None, Pxe, Hdd, Cd", *t))
			return
		}
		cur.Device = dev
	}
	if e := in.Boot.BootSourceOverrideEnabled; e != nil {
		switch *e {
		case "Once":
			cur.Persistent = false
		case "Continuous":
			cur.Persistent = true
		case "Disabled":
			cur.Device = ""
		default:
			writeError(w, http.StatusBadRequest, "Base.1.8.PropertyValueNotInList", fmt.Sprintf("BootSourceOverrideEnabled %q is not one of Once, Continuous, Disabled", *e))
			return
		}
	}
	if m := in.Boot.BootSourceOverrideMode; m != nil {
		switch *m {
		case "UEFI":
			cur.Mode = bmc.BootUEFI
		case "Legacy":
			cur.Mode = bmc.BootLegacy
		default:
			writeError(w, http.StatusBadRequest, "Base.1.8.PropertyValueNotInList", fmt.Sprintf("BootSourceOverrideMode %q is not one of UEFI, Legacy", *m))
			return
		}
	}
	r.chassis.setBoot(cur)
	w.WriteHeader(http.StatusNoContent)
}

func (r *Redfish) virtualMedia() map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return map[string]any{
		"@odata.id":      cdPath,
		"@odata.type":    "#VirtualMedia.v1_3_0.VirtualMedia",
		"Id":             "Cd",
		"Name":           "Virtual CD",
		"MediaTypes":     []string{"CD", "DVD"},
		"Image":          r.media.image,
		"Inserted":       r.media.inserted,
		"WriteProtected": true,
		"Actions": map[string]any{
			"#VirtualMedia.InsertMedia": map[string]any{"target": cdPath + "/Actions/VirtualMedia.InsertMedia"},
			"#VirtualMedia.EjectMedia":  map[string]any{"target": cdPath + "/Actions/VirtualMedia.EjectMedia"},
		},
	}
}

func (r *Redfish) insertMedia(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "Base.1.8.OperationNotAllowed", "use POST")
		return
	}
	var in struct {
		Image    string
		Inserted *bool
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, req.Body, 1<<16)).Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "Base.1.8.MalformedJSON", "malformed JSON: "+err.Error())
		return
	}
	if in.Image == "" {
		writeError(w, http.StatusBadRequest, "Base.1.8.ActionParameterMissing", "InsertMedia needs Image")
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.media.inserted {
		writeError(w, http.StatusConflict, "Base.1.8.ResourceInUse", "media already inserted; eject it first")
		return
	}
	r.media.image, r.media.inserted = in.Image, in.Inserted == nil || *in.Inserted
	w.WriteHeader(http.StatusNoContent)
}

func (r *Redfish) ejectMedia(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "Base.1.8.OperationNotAllowed", "use POST")
		return
	}
	r.mu.Lock()
	r.media.image, r.media.inserted = "", false
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (r *Redfish) createSession(w http.ResponseWriter, req *http.Request) {
	var in struct{ UserName, Password string }
	if err := json.NewDecoder(http.MaxBytesReader(w, req.Body, 1<<16)).Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "Base.1.8.MalformedJSON", "malformed JSON: "+err.Error())
		return
	}
	if !r.credentialsMatch(in.UserName, in.Password) {
		writeError(w, http.StatusUnauthorized, "Base.1.8.NoValidSession", "invalid user name or password")
		return
	}
	b := make([]byte, 16)
	rand.Read(b)
	tok := hex.EncodeToString(b)
	r.mu.Lock()
	r.nextSess++
	id := fmt.Sprint(r.nextSess)
	r.sessions[tok] = id
	r.mu.Unlock()
	loc := sessionsPath + "/" + id
	w.Header().Set("X-Auth-Token", tok)
	w.Header().Set("Location", loc)
	writeJSON(w, http.StatusCreated, map[string]any{"@odata.id": loc, "Id": id, "UserName": in.UserName})
}

func (r *Redfish) deleteSession(w http.ResponseWriter, path string) {
	id := strings.TrimPrefix(path, sessionsPath+"/")
	r.mu.Lock()
	defer r.mu.Unlock()
	for tok, sid := range r.sessions {
		if sid == id {
			delete(r.sessions, tok)
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	writeError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", "no session "+id)
}

// Sessions returns how many sessions are open.
func (r *Redfish) Sessions() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sessions)
}

func link(p string) map[string]string { return map[string]string{"@odata.id": p} }

func collectionOf(typ, name, path string, members ...string) map[string]any {
	ms := make([]any, len(members))
	for i, m := range members {
		ms[i] = link(m)
	}
	return map[string]any{"@odata.id": path, "@odata.type": typ, "Name": name, "Members": ms, "Members@odata.count": len(ms)}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("OData-Version", "4.0")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// writeError writes a Redfish error body.
func writeError(w http.ResponseWriter, status int, id, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"code":    id,
		"message": msg,
		"@Message.ExtendedInfo": []any{map[string]any{
			"MessageId": id, "Message": msg, "Severity": "Critical",
		}},
	}})
}
