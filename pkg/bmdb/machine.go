package bmdb

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/booty-dev/booty/pkg/names"
)

// Machine is one row of the machines table with its MACs.
type Machine struct {
	ID     string            `json:"id"`
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	// BootMAC is the MAC the machine network-boots from; MACs holds every
	// MAC of the machine, BootMAC first.
	BootMAC string   `json:"bootMAC"`
	MACs    []string `json:"macs"`
	BMC     BMC      `json:"bmc"`
	Spec    Spec     `json:"spec"`
	// Online is the power state the operator wants (metal3's
	// spec.online); it is not part of the spec's generation and may change
	// in any state.
	Online bool `json:"online"`

	State  State             `json:"state"`
	Status OperationalStatus `json:"status"`
	Error  ErrorInfo         `json:"error"`
	// Command is the command waiting for (or being run by) the agent, ""
	// when none; CommandGeneration is the generation it was issued at.
	Command           CommandKind `json:"command,omitempty"`
	CommandGeneration int64       `json:"commandGeneration,omitempty"`
	CommandIssuedAt   time.Time   `json:"commandIssuedAt,omitzero"`
	// Generation is bumped on every change of Spec or Command.
	Generation int64 `json:"generation"`

	CreatedAt      time.Time `json:"createdAt"`
	UpdatedAt      time.Time `json:"updatedAt"`
	StateChangedAt time.Time `json:"stateChangedAt"`
}

// LogValue keeps a machine's spec (user data may hold secrets) out of logs.
func (m Machine) LogValue() slog.Value {
	return slog.GroupValue(slog.String("id", m.ID), slog.String("name", m.Name),
		slog.String("state", string(m.State)), slog.Int64("generation", m.Generation))
}

// BMC is how the machine's baseboard management controller is reached. The
// credentials are a reference (a name in the secret store), never the secret.
type BMC struct {
	// Address in metal3's form: ipmi://host:port, redfish://host/path,
	// redfish-virtualmedia://…, idrac-redfish://… ("" when there is none).
	Address string `json:"address,omitempty"`
	// CredentialsRef names the credentials (PutCredentials) to log in with.
	CredentialsRef                 string `json:"credentialsRef,omitempty"`
	DisableCertificateVerification bool   `json:"disableCertificateVerification,omitempty"`
}

// Spec is the desired state of a machine: what a provision writes.
type Spec struct {
	Image           Image            `json:"image,omitzero"`
	RootDeviceHints *RootDeviceHints `json:"rootDeviceHints,omitempty"`
	Hostname        string           `json:"hostname,omitempty"`
	// UserData, NetworkData and MetaData are handed to cloud-init.
	UserData    string `json:"userData,omitempty"`
	NetworkData string `json:"networkData,omitempty"`
	MetaData    string `json:"metaData,omitempty"`
	// ConfigOverrides is a JSON object merged over the MachineConfig bootyd
	// renders from this spec.
	ConfigOverrides json.RawMessage `json:"configOverrides,omitempty"`
}

// Image is the OS image a provision writes, with its checksums.
type Image struct {
	URL string `json:"url,omitempty"`
	// Checksum is the image's digest, "sha256:HEX" or "sha512:HEX" (or
	// metal3's bare hex with ChecksumType set); Checksums holds more digests
	// (of the compressed and the raw stream, say) under the same grammar.
	Checksum     string   `json:"checksum,omitempty"`
	ChecksumType string   `json:"checksumType,omitempty"`
	Checksums    []string `json:"checksums,omitempty"`
	Format       string   `json:"format,omitempty"`
}

// RootDeviceHints picks the disk to write, in metal3's field names.
type RootDeviceHints struct {
	DeviceName         string `json:"deviceName,omitempty"`
	HCTL               string `json:"hctl,omitempty"`
	Model              string `json:"model,omitempty"`
	Vendor             string `json:"vendor,omitempty"`
	SerialNumber       string `json:"serialNumber,omitempty"`
	MinSizeGigabytes   int    `json:"minSizeGigabytes,omitempty"`
	WWN                string `json:"wwn,omitempty"`
	WWNWithExtension   string `json:"wwnWithExtension,omitempty"`
	WWNVendorExtension string `json:"wwnVendorExtension,omitempty"`
	Rotational         *bool  `json:"rotational,omitempty"`
}

// NewMachine is what CreateMachine registers.
type NewMachine struct {
	Name    string
	Labels  map[string]string
	BootMAC string
	// MACs are the machine's other MACs (the boot MAC may be repeated).
	MACs []string
	BMC  BMC
	Spec Spec
	// Online is the power state the operator wants.
	Online bool
	// Credentials, when non-nil, are stored under BMC.CredentialsRef in
	// the transaction that creates the machine: a refused machine leaves
	// no credentials behind.
	Credentials *Credentials
	// State is StateRegistering (the default) or StateExternallyProvisioned
	// for a machine that already runs its OS.
	State State
	// Reason and Message go into the "Registered" event.
	Message string
}

// Limits of what a machine row holds.
const (
	maxMACs      = 64
	maxSpecBytes = 256 << 10
	maxNameLen   = 253
	maxLabels    = 64
)

// ParseMAC returns mac in the canonical form the database stores: lower
// case, colon separated. Only 6-byte (EUI-48) MACs are accepted.
func ParseMAC(mac string) (string, error) {
	hw, err := net.ParseMAC(strings.TrimSpace(mac))
	if err != nil || len(hw) != 6 {
		return "", fmt.Errorf("MAC %q is not a 6-byte hardware address: %w", mac, ErrInvalid)
	}
	return hw.String(), nil
}

// parseMACs canonicalises and de-duplicates MACs, first one first.
func parseMACs(macs []string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, m := range macs {
		c, err := ParseMAC(m)
		if err != nil {
			return nil, err
		}
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	if len(out) > maxMACs {
		return nil, fmt.Errorf("%d MACs, at most %d allowed: %w", len(out), maxMACs, ErrInvalid)
	}
	return out, nil
}

func validName(n string) error {
	if n == "" {
		return fmt.Errorf("machine name is empty: %w", ErrInvalid)
	}
	if len(n) > maxNameLen {
		return fmt.Errorf("machine name is longer than %d characters: %w", maxNameLen, ErrInvalid)
	}
	if err := names.Hostname(n); err != nil {
		return fmt.Errorf("machine name: %v: %w", err, ErrInvalid)
	}
	return nil
}

func validLabels(l map[string]string) error {
	if len(l) > maxLabels {
		return fmt.Errorf("%d labels, at most %d allowed: %w", len(l), maxLabels, ErrInvalid)
	}
	for k, v := range l {
		if err := names.LabelKey(k); err != nil {
			return fmt.Errorf("label %v: %w", err, ErrInvalid)
		}
		if err := names.LabelValue(v); err != nil {
			return fmt.Errorf("label %q: %v: %w", k, err, ErrInvalid)
		}
	}
	return nil
}

// validBMCAddress accepts "" or a URL with one of metal3's BMC schemes.
func validBMCAddress(a string) error {
	if a == "" {
		return nil
	}
	scheme, rest, ok := strings.Cut(a, "://")
	if !ok || rest == "" {
		return fmt.Errorf("BMC address %q is not scheme://host: %w", a, ErrInvalid)
	}
	switch scheme {
	case "ipmi", "redfish", "redfish-http", "redfish-https", "redfish-virtualmedia", "redfish-uefihttp",
		"idrac", "idrac-redfish", "idrac-virtualmedia", "ilo4", "ilo5", "ilo5-redfish", "ilo4-virtualmedia", "irmc":
		return nil
	}
	return fmt.Errorf("BMC address %q has unknown scheme %q (want ipmi, redfish, redfish-virtualmedia, redfish-uefihttp, idrac-redfish, ilo5-redfish, …): %w", a, scheme, ErrInvalid)
}

// encodeSpec validates a spec and returns its JSON.
func encodeSpec(s Spec) (string, error) {
	if s.Hostname != "" {
		if err := names.Hostname(s.Hostname); err != nil {
			return "", fmt.Errorf("spec hostname: %v: %w", err, ErrInvalid)
		}
	}
	if len(s.ConfigOverrides) > 0 {
		if err := jsonObject(s.ConfigOverrides); err != nil {
			return "", fmt.Errorf("spec configOverrides: %w", err)
		}
	}
	if s.RootDeviceHints != nil && s.RootDeviceHints.MinSizeGigabytes < 0 {
		return "", fmt.Errorf("spec rootDeviceHints.minSizeGigabytes %d is negative: %w", s.RootDeviceHints.MinSizeGigabytes, ErrInvalid)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("encode spec: %w", err)
	}
	if len(b) > maxSpecBytes {
		return "", fmt.Errorf("spec is %d bytes, at most %d allowed: %w", len(b), maxSpecBytes, ErrInvalid)
	}
	return string(b), nil
}

// jsonObject checks that b is one JSON object.
func jsonObject(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' || !json.Valid(b) {
		return fmt.Errorf("not a JSON object: %w", ErrInvalid)
	}
	return nil
}

// CreateMachine registers a machine with its MACs and records a "Registered"
// event. A taken name or MAC gives ErrConflict; bad input gives ErrInvalid
// naming the field. Nothing is written on failure.
func (db *DB) CreateMachine(ctx context.Context, nm NewMachine) (Machine, error) {
	if err := validName(nm.Name); err != nil {
		return Machine{}, fmt.Errorf("create machine: %w", err)
	}
	if err := validLabels(nm.Labels); err != nil {
		return Machine{}, fmt.Errorf("create machine %s: %w", nm.Name, err)
	}
	if nm.BootMAC == "" {
		return Machine{}, fmt.Errorf("create machine %s: boot MAC is empty: %w", nm.Name, ErrInvalid)
	}
	macs, err := parseMACs(append([]string{nm.BootMAC}, nm.MACs...))
	if err != nil {
		return Machine{}, fmt.Errorf("create machine %s: %w", nm.Name, err)
	}
	if err := validBMCAddress(nm.BMC.Address); err != nil {
		return Machine{}, fmt.Errorf("create machine %s: %w", nm.Name, err)
	}
	spec, err := encodeSpec(nm.Spec)
	if err != nil {
		return Machine{}, fmt.Errorf("create machine %s: %w", nm.Name, err)
	}
	state := nm.State
	switch state {
	case "":
		state = StateRegistering
	case StateRegistering, StateExternallyProvisioned:
	default:
		return Machine{}, fmt.Errorf("create machine %s: initial state %q (want registering or externally provisioned): %w", nm.Name, state, ErrInvalid)
	}
	var creds string
	if nm.Credentials != nil {
		if creds, err = encodeCredentials(nm.BMC.CredentialsRef, *nm.Credentials); err != nil {
			return Machine{}, fmt.Errorf("create machine %s: %w", nm.Name, err)
		}
	}
	id := newID()
	err = db.write(ctx, "create machine "+nm.Name, func(tx *sql.Tx) error {
		if creds != "" {
			if _, err := db.putCredentialsTx(ctx, tx, nm.BMC.CredentialsRef, creds); err != nil {
				return fmt.Errorf("create machine %s: %w", nm.Name, err)
			}
		}
		return db.insertMachine(ctx, tx, id, nm.Name, nm.Labels, macs, nm.BMC, nm.Online, spec, state, StatusOK, "Registered", nm.Message)
	})
	if err != nil {
		return Machine{}, err
	}
	return db.GetMachine(ctx, id)
}

// insertMachine writes a new machine row, its MACs and its first event.
func (db *DB) insertMachine(ctx context.Context, tx *sql.Tx, id, name string, labels map[string]string, macs []string,
	bmc BMC, online bool, spec string, state State, status OperationalStatus, reason, message string) error {
	lb, err := json.Marshal(labels)
	if err != nil {
		return fmt.Errorf("create machine %s: encode labels: %w", name, err)
	}
	if labels == nil {
		lb = []byte("{}")
	}
	t := ms(now())
	_, err = tx.ExecContext(ctx, db.q(`INSERT INTO machines (id, name, labels, boot_mac, bmc_address, bmc_credentials,
		bmc_insecure, online, spec, state, status, generation, created_at, updated_at, state_changed_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?)`),
		id, name, string(lb), macs[0], bmc.Address, bmc.CredentialsRef, boolInt(bmc.DisableCertificateVerification),
		boolInt(online), spec, string(state), string(status), t, t, t)
	if isUniqueViolation(err) {
		return fmt.Errorf("create machine %s: name is taken: %w", name, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create machine %s: %w", name, err)
	}
	for _, mac := range macs {
		if _, err := tx.ExecContext(ctx, db.q("INSERT INTO machine_macs (mac, machine_id) VALUES (?, ?)"), mac, id); err != nil {
			if isUniqueViolation(err) {
				return fmt.Errorf("create machine %s: MAC %s belongs to another machine: %w", name, mac, ErrConflict)
			}
			return fmt.Errorf("create machine %s: add MAC %s: %w", name, mac, err)
		}
	}
	if message == "" {
		message = fmt.Sprintf("machine %s registered in state %s", name, state)
	}
	return db.addEvent(ctx, tx, id, EventNormal, reason, message, 1)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

const machineColumns = `id, name, labels, boot_mac, bmc_address, bmc_credentials, bmc_insecure, online, spec, state, status,
	error_type, error_message, error_count, command, command_generation, command_issued_at, generation,
	created_at, updated_at, state_changed_at`

func scanMachine(r scanner) (Machine, error) {
	var m Machine
	var labels, spec, state, status, errType, cmd string
	var insecure, online int
	var cmdAt, created, updated, changed int64
	err := r.Scan(&m.ID, &m.Name, &labels, &m.BootMAC, &m.BMC.Address, &m.BMC.CredentialsRef, &insecure, &online, &spec,
		&state, &status, &errType, &m.Error.Message, &m.Error.Count, &cmd, &m.CommandGeneration, &cmdAt,
		&m.Generation, &created, &updated, &changed)
	if err != nil {
		return Machine{}, err
	}
	if err := json.Unmarshal([]byte(labels), &m.Labels); err != nil {
		return Machine{}, fmt.Errorf("machine %s: decode labels: %w", m.ID, err)
	}
	if err := json.Unmarshal([]byte(spec), &m.Spec); err != nil {
		return Machine{}, fmt.Errorf("machine %s: decode spec: %w", m.ID, err)
	}
	m.BMC.DisableCertificateVerification = insecure != 0
	m.Online = online != 0
	m.State, m.Status, m.Error.Type, m.Command = State(state), OperationalStatus(status), ErrorType(errType), CommandKind(cmd)
	if cmdAt != 0 {
		m.CommandIssuedAt = fromMS(cmdAt)
	}
	m.CreatedAt, m.UpdatedAt, m.StateChangedAt = fromMS(created), fromMS(updated), fromMS(changed)
	return m, nil
}

// GetMachine returns the machine with this ID, or ErrNotFound.
func (db *DB) GetMachine(ctx context.Context, id string) (Machine, error) {
	m, err := scanMachine(db.sql.QueryRowContext(ctx, db.q("SELECT "+machineColumns+" FROM machines WHERE id = ?"), id))
	if errors.Is(err, sql.ErrNoRows) {
		return Machine{}, fmt.Errorf("get machine %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Machine{}, fmt.Errorf("get machine %s: %w", id, err)
	}
	if err := db.loadMACs(ctx, &m); err != nil {
		return Machine{}, err
	}
	return m, nil
}

// MachineByName returns the machine with this name, or ErrNotFound.
func (db *DB) MachineByName(ctx context.Context, name string) (Machine, error) {
	var id string
	err := db.sql.QueryRowContext(ctx, db.q("SELECT id FROM machines WHERE name = ?"), name).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return Machine{}, fmt.Errorf("machine named %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return Machine{}, fmt.Errorf("machine named %q: %w", name, err)
	}
	return db.GetMachine(ctx, id)
}

// MachineByMAC returns the machine that owns this MAC, or ErrNotFound.
func (db *DB) MachineByMAC(ctx context.Context, mac string) (Machine, error) {
	c, err := ParseMAC(mac)
	if err != nil {
		return Machine{}, fmt.Errorf("machine by MAC: %w", err)
	}
	var id string
	err = db.sql.QueryRowContext(ctx, db.q("SELECT machine_id FROM machine_macs WHERE mac = ?"), c).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return Machine{}, fmt.Errorf("machine with MAC %s: %w", c, ErrNotFound)
	}
	if err != nil {
		return Machine{}, fmt.Errorf("machine with MAC %s: %w", c, err)
	}
	return db.GetMachine(ctx, id)
}

func (db *DB) loadMACs(ctx context.Context, m *Machine) error {
	rows, err := db.sql.QueryContext(ctx, db.q("SELECT mac FROM machine_macs WHERE machine_id = ? ORDER BY mac"), m.ID)
	if err != nil {
		return fmt.Errorf("machine %s: read MACs: %w", m.ID, err)
	}
	defer rows.Close()
	m.MACs = []string{m.BootMAC}
	for rows.Next() {
		var mac string
		if err := rows.Scan(&mac); err != nil {
			return fmt.Errorf("machine %s: read MACs: %w", m.ID, err)
		}
		if mac != m.BootMAC {
			m.MACs = append(m.MACs, mac)
		}
	}
	return rows.Err()
}

// ListOptions selects machines for ListMachines.
type ListOptions struct {
	// States keeps machines in one of these states (all when empty).
	States []State
	// WithBMC keeps machines that have a BMC address: the host
	// reconciler's, which lists several times a second and, in a fleet of
	// agents without BMCs, would otherwise read every machine each time
	// (an index on those machines' names serves it).
	WithBMC bool
	// AgentQuietBefore, when set, keeps machines whose agent was last
	// heard from before it: their agent session ended before it, or has
	// not ended and its last heartbeat is older. Machines without a
	// session are left out. The Recoverer lists its candidates so instead
	// of reading every machine's session.
	AgentQuietBefore time.Time
	// AfterName starts the page after this name (names sort ascending).
	AfterName string
	// Limit is the page size (default and maximum 1000).
	Limit int
}

// ListMachines returns a page of machines ordered by name. Credentials are
// never part of a machine, only their reference.
func (db *DB) ListMachines(ctx context.Context, o ListOptions) ([]Machine, error) {
	if o.Limit <= 0 || o.Limit > 1000 {
		o.Limit = 1000
	}
	query := "SELECT " + machineColumns + " FROM machines WHERE name > ?"
	args := []any{o.AfterName}
	if len(o.States) > 0 {
		query += " AND state IN (" + placeholders(len(o.States)) + ")"
		for _, s := range o.States {
			args = append(args, string(s))
		}
	}
	if o.WithBMC {
		query += " AND bmc_address <> ''"
	}
	if !o.AgentQuietBefore.IsZero() {
		query += " AND EXISTS (SELECT 1 FROM agent_sessions a WHERE a.machine_id = machines.id AND COALESCE(a.ended_at, a.heartbeat_at) < ?)"
		args = append(args, ms(o.AgentQuietBefore))
	}
	query += " ORDER BY name LIMIT ?"
	args = append(args, o.Limit)
	rows, err := db.sql.QueryContext(ctx, db.q(query), args...)
	if err != nil {
		return nil, fmt.Errorf("list machines: %w", err)
	}
	defer rows.Close()
	var out []Machine
	byID := map[string]int{}
	for rows.Next() {
		m, err := scanMachine(rows)
		if err != nil {
			return nil, fmt.Errorf("list machines: %w", err)
		}
		m.MACs = []string{m.BootMAC}
		byID[m.ID] = len(out)
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list machines: %w", err)
	}
	rows.Close()
	if len(out) == 0 {
		return out, nil
	}
	ids := make([]any, 0, len(out))
	for _, m := range out {
		ids = append(ids, m.ID)
	}
	mrows, err := db.sql.QueryContext(ctx, db.q("SELECT machine_id, mac FROM machine_macs WHERE machine_id IN ("+placeholders(len(ids))+") ORDER BY mac"), ids...)
	if err != nil {
		return nil, fmt.Errorf("list machines: read MACs: %w", err)
	}
	defer mrows.Close()
	for mrows.Next() {
		var id, mac string
		if err := mrows.Scan(&id, &mac); err != nil {
			return nil, fmt.Errorf("list machines: read MACs: %w", err)
		}
		if i, ok := byID[id]; ok && mac != out[i].BootMAC {
			out[i].MACs = append(out[i].MACs, mac)
		}
	}
	return out, mrows.Err()
}

// MachineUpdate holds the fields UpdateMachine changes; nil fields stay.
type MachineUpdate struct {
	Name   *string
	Labels map[string]string // replaces all labels when non-nil
	BMC    *BMC
	Spec   *Spec
	// MACs, when non-nil, replaces the machine's other MACs (the boot MAC
	// stays).
	MACs []string
	// Online, when non-nil, sets the power state the operator wants. It
	// changes in any state and does not bump the generation.
	Online *bool
	// Credentials, when non-nil, are stored under the BMC's credentials
	// reference (BMC's when set, else the machine's) in the update's
	// transaction; new values count as a change ("bmc credentials") but do
	// not bump the generation.
	Credentials *Credentials
}

// UpdateMachine changes a machine's name, labels, BMC (and its stored
// credentials, in the same transaction), spec, MACs or online. With a
// non-zero generation it first checks it is the machine's (else
// ErrStaleGeneration). A change of the spec bumps the generation. The spec
// cannot change while an install runs (preparing, provisioning,
// deprovisioning): ErrConflict. Records an "Updated" event.
func (db *DB) UpdateMachine(ctx context.Context, id string, generation int64, u MachineUpdate) (Machine, error) {
	var spec, labels string
	if u.Name != nil {
		if err := validName(*u.Name); err != nil {
			return Machine{}, fmt.Errorf("update machine %s: %w", id, err)
		}
	}
	if u.Labels != nil {
		if err := validLabels(u.Labels); err != nil {
			return Machine{}, fmt.Errorf("update machine %s: %w", id, err)
		}
		b, _ := json.Marshal(u.Labels)
		labels = string(b)
	}
	if u.BMC != nil {
		if err := validBMCAddress(u.BMC.Address); err != nil {
			return Machine{}, fmt.Errorf("update machine %s: %w", id, err)
		}
	}
	if u.Spec != nil {
		var err error
		if spec, err = encodeSpec(*u.Spec); err != nil {
			return Machine{}, fmt.Errorf("update machine %s: %w", id, err)
		}
	}
	var macs []string
	if u.MACs != nil {
		var err error
		if macs, err = parseMACs(u.MACs); err != nil {
			return Machine{}, fmt.Errorf("update machine %s: %w", id, err)
		}
	}
	var creds string
	if u.Credentials != nil {
		var err error
		// The name is checked once the reference is known, in the transaction.
		if creds, err = encodeCredentials("-", *u.Credentials); err != nil {
			return Machine{}, fmt.Errorf("update machine %s: %w", id, err)
		}
	}
	err := db.write(ctx, "update machine "+id, func(tx *sql.Tx) error {
		m, err := db.lockMachine(ctx, tx, id)
		if err != nil {
			return fmt.Errorf("update machine %s: %w", id, err)
		}
		if generation != 0 && generation != m.Generation {
			return fmt.Errorf("update machine %s: generation %d, machine is at %d: %w", id, generation, m.Generation, ErrStaleGeneration)
		}
		var changed []string
		gen := m.Generation
		sets := []string{}
		args := []any{}
		if u.Name != nil && *u.Name != m.Name {
			sets, args, changed = append(sets, "name = ?"), append(args, *u.Name), append(changed, "name")
		}
		if u.Labels != nil {
			sets, args, changed = append(sets, "labels = ?"), append(args, labels), append(changed, "labels")
		}
		if u.BMC != nil && *u.BMC != m.BMC {
			sets = append(sets, "bmc_address = ?", "bmc_credentials = ?", "bmc_insecure = ?")
			args = append(args, u.BMC.Address, u.BMC.CredentialsRef, boolInt(u.BMC.DisableCertificateVerification))
			changed = append(changed, "bmc")
		}
		if u.Online != nil && *u.Online != m.Online {
			sets, args, changed = append(sets, "online = ?"), append(args, boolInt(*u.Online)), append(changed, "online")
		}
		if u.Spec != nil {
			old, _ := encodeSpec(m.Spec)
			if old != spec {
				switch m.State {
				case StatePreparing, StateProvisioning, StateDeprovisioning:
					return fmt.Errorf("update machine %s: spec cannot change while %s: %w", m.Name, m.State, ErrConflict)
				}
				sets, args, changed = append(sets, "spec = ?"), append(args, spec), append(changed, "spec")
				gen = m.Generation + 1
			}
		}
		if creds != "" {
			ref := m.BMC.CredentialsRef
			if u.BMC != nil {
				ref = u.BMC.CredentialsRef
			}
			if ref == "" || len(ref) > maxNameLen {
				return fmt.Errorf("update machine %s: credentials need a credentials reference of 1 to %d characters: %w", m.Name, maxNameLen, ErrInvalid)
			}
			put, err := db.putCredentialsTx(ctx, tx, ref, creds)
			if err != nil {
				return fmt.Errorf("update machine %s: %w", m.Name, err)
			}
			if put {
				changed = append(changed, "bmc credentials")
			}
		}
		if macs != nil {
			if _, err := tx.ExecContext(ctx, db.q("DELETE FROM machine_macs WHERE machine_id = ? AND mac <> ?"), id, m.BootMAC); err != nil {
				return fmt.Errorf("update machine %s: MACs: %w", id, err)
			}
			for _, mac := range macs {
				if mac == m.BootMAC {
					continue
				}
				if _, err := tx.ExecContext(ctx, db.q("INSERT INTO machine_macs (mac, machine_id) VALUES (?, ?)"), mac, id); err != nil {
					if isUniqueViolation(err) {
						return fmt.Errorf("update machine %s: MAC %s belongs to another machine: %w", m.Name, mac, ErrConflict)
					}
					return fmt.Errorf("update machine %s: MAC %s: %w", id, mac, err)
				}
			}
			changed = append(changed, "macs")
		}
		if len(changed) == 0 {
			return nil
		}
		sets = append(sets, "generation = ?", "updated_at = ?")
		args = append(args, gen, ms(now()), id)
		if _, err := tx.ExecContext(ctx, db.q("UPDATE machines SET "+strings.Join(sets, ", ")+" WHERE id = ?"), args...); err != nil {
			if isUniqueViolation(err) {
				return fmt.Errorf("update machine %s: name %q is taken: %w", m.Name, *u.Name, ErrConflict)
			}
			return fmt.Errorf("update machine %s: %w", id, err)
		}
		if err := db.addEvent(ctx, tx, id, EventNormal, "Updated", "changed "+strings.Join(changed, ", "), gen); err != nil {
			return err
		}
		return db.notifyTx(ctx, tx, id)
	})
	if err != nil {
		return Machine{}, err
	}
	db.notify.changed(id)
	return db.GetMachine(ctx, id)
}

// lockMachine reads a machine row inside a write transaction, locking it on
// PostgreSQL, so the change built on it cannot interleave with another.
func (db *DB) lockMachine(ctx context.Context, tx *sql.Tx, id string) (Machine, error) {
	m, err := scanMachine(tx.QueryRowContext(ctx, db.q("SELECT "+machineColumns+" FROM machines WHERE id = ?"+db.forUpdate()), id))
	if errors.Is(err, sql.ErrNoRows) {
		return Machine{}, fmt.Errorf("machine %s: %w", id, ErrNotFound)
	}
	return m, err
}

// DeleteMachine removes a machine in state deleting with everything recorded
// about it except its work history. A machine in another state, or with work
// held on it, gives ErrConflict.
func (db *DB) DeleteMachine(ctx context.Context, id string) error {
	err := db.write(ctx, "delete machine "+id, func(tx *sql.Tx) error {
		m, err := db.lockMachine(ctx, tx, id)
		if err != nil {
			return fmt.Errorf("delete machine %s: %w", id, err)
		}
		if m.State != StateDeleting {
			return fmt.Errorf("delete machine %s: it is %s, not %s: %w", m.Name, m.State, StateDeleting, ErrConflict)
		}
		// Work of expired sessions does not keep a machine.
		if _, err := tx.ExecContext(ctx, db.q("DELETE FROM work WHERE machine_id = ? AND session_id IN (SELECT id FROM sessions WHERE deadline <= ?)"), id, ms(now())); err != nil {
			return fmt.Errorf("delete machine %s: drop expired work: %w", m.Name, err)
		}
		_, err = tx.ExecContext(ctx, db.q("DELETE FROM machines WHERE id = ?"), id)
		if isForeignKeyViolation(err) {
			return fmt.Errorf("delete machine %s: work is held on it: %w", m.Name, ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("delete machine %s: %w", m.Name, err)
		}
		return db.notifyTx(ctx, tx, id)
	})
	if err == nil {
		db.notify.changed(id)
	}
	return err
}

// Credentials log in to a BMC. Their String and LogValue hide the password.
type Credentials struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// String hides the password.
func (c Credentials) String() string { return "{" + c.Username + " <redacted>}" }

// LogValue hides the password.
func (c Credentials) LogValue() slog.Value {
	return slog.GroupValue(slog.String("username", c.Username), slog.String("password", "<redacted>"))
}

// PutCredentials stores (or replaces) the credentials named name.
func (db *DB) PutCredentials(ctx context.Context, name string, c Credentials) error {
	v, err := encodeCredentials(name, c)
	if err != nil {
		return err
	}
	return db.write(ctx, "put credentials "+name, func(tx *sql.Tx) error {
		_, err := db.putCredentialsTx(ctx, tx, name, v)
		return err
	})
}

// encodeCredentials checks a credentials name and value and returns the
// value as stored.
func encodeCredentials(name string, c Credentials) (string, error) {
	if name == "" || len(name) > maxNameLen {
		return "", fmt.Errorf("put credentials: name is empty or longer than %d: %w", maxNameLen, ErrInvalid)
	}
	if c.Username == "" {
		return "", fmt.Errorf("put credentials %s: username is empty: %w", name, ErrInvalid)
	}
	b, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("put credentials %s: %w", name, err)
	}
	return string(b), nil
}

// putCredentialsTx stores the encoded credentials v under name in tx and
// reports whether that changed what was stored.
func (db *DB) putCredentialsTx(ctx context.Context, tx *sql.Tx, name, v string) (bool, error) {
	var old string
	err := tx.QueryRowContext(ctx, db.q("SELECT value FROM secrets WHERE name = ?"), name).Scan(&old)
	switch {
	case err == nil && old == v:
		return false, nil
	case err != nil && !errors.Is(err, sql.ErrNoRows):
		return false, fmt.Errorf("put credentials %s: %w", name, err)
	}
	_, err = tx.ExecContext(ctx, db.q(`INSERT INTO secrets (name, value, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`), name, v, ms(now()))
	if err != nil {
		return false, fmt.Errorf("put credentials %s: %w", name, err)
	}
	return true, nil
}

// GetCredentials returns the credentials named name, or ErrNotFound.
func (db *DB) GetCredentials(ctx context.Context, name string) (Credentials, error) {
	var v string
	err := db.sql.QueryRowContext(ctx, db.q("SELECT value FROM secrets WHERE name = ?"), name).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return Credentials{}, fmt.Errorf("credentials %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return Credentials{}, fmt.Errorf("credentials %s: %w", name, err)
	}
	var c Credentials
	if err := json.Unmarshal([]byte(v), &c); err != nil {
		return Credentials{}, fmt.Errorf("credentials %s: decode: %w", name, err)
	}
	return c, nil
}

// ListCredentials returns the names of the stored credentials, sorted; never
// their values.
func (db *DB) ListCredentials(ctx context.Context) ([]string, error) {
	rows, err := db.sql.QueryContext(ctx, "SELECT name FROM secrets")
	if err != nil {
		return nil, fmt.Errorf("list credentials: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("list credentials: %w", err)
		}
		out = append(out, n)
	}
	sort.Strings(out)
	return out, rows.Err()
}

// DeleteCredentials removes the credentials named name (ErrNotFound if none).
func (db *DB) DeleteCredentials(ctx context.Context, name string) error {
	return db.write(ctx, "delete credentials "+name, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, db.q("DELETE FROM secrets WHERE name = ?"), name)
		if err != nil {
			return fmt.Errorf("delete credentials %s: %w", name, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("delete credentials %s: %w", name, ErrNotFound)
		}
		return nil
	})
}
