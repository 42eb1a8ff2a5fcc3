package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"

	"github.com/booty-dev/booty/pkg/bmc"
	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/names"
)

// Availability is what a machine source says of one of its machines.
type Availability string

// Availabilities.
const (
	// AvailabilityUnknown: the source cannot tell (a static inventory):
	// being listed is all it says.
	AvailabilityUnknown Availability = "unknown"
	// AvailabilityFree: the source has the machine and nobody uses it.
	AvailabilityFree Availability = "free"
	// AvailabilityUsed: the source handed the machine out (Create).
	AvailabilityUsed Availability = "used"
)

// SourceMachine is one machine a source offers.
type SourceMachine struct {
	// Name is the machine's ID in the source and its name in the BMDB.
	Name string `json:"name"`
	// BootMAC is the MAC the machine network-boots from.
	BootMAC string `json:"bootMAC"`
	// BMCAddress is metal3's BMC address (ipmi://, redfish://…), optional.
	BMCAddress string `json:"bmcAddress,omitempty"`
	// CredentialsName names the BMC credentials in the BMDB's secret store.
	CredentialsName string `json:"credentialsName,omitempty"`
	// DisableCertificateVerification accepts any TLS certificate of the BMC.
	DisableCertificateVerification bool `json:"disableCertificateVerification,omitempty"`
	// SSHAddress (host:port) reaches the Linux the machine runs, for the
	// Initializer's takeover; optional.
	SSHAddress string `json:"sshAddress,omitempty"`
	// Online is the power state the BMDB machine is created with: the host
	// reconciler powers it on or off as it says.
	Online bool `json:"online,omitempty"`
	// Credentials, when set, are stored under CredentialsName in the
	// transaction that creates the BMDB machine (an inventory reads them
	// from username and passwordFile). They print without the password.
	Credentials *bmdb.Credentials `json:"-"`

	Availability Availability `json:"-"`
}

// Check returns an error naming the first field of m that is not valid.
func (m SourceMachine) Check() error {
	if err := names.Hostname(m.Name); err != nil {
		return fmt.Errorf("machine name %q: %v", m.Name, err)
	}
	if _, err := bmdb.ParseMAC(m.BootMAC); err != nil {
		return fmt.Errorf("machine %s: bootMAC: %w", m.Name, err)
	}
	if m.BMCAddress != "" {
		if _, err := bmc.ParseAddress(m.BMCAddress); err != nil {
			return fmt.Errorf("machine %s: bmcAddress: %w", m.Name, err)
		}
	}
	if m.BMCAddress != "" && m.CredentialsName == "" {
		return fmt.Errorf("machine %s: bmcAddress without credentialsName", m.Name)
	}
	if m.Credentials != nil && (m.CredentialsName == "" || m.Credentials.Username == "") {
		return fmt.Errorf("machine %s: credentials need credentialsName and a username", m.Name)
	}
	return nil
}

// Source is where the Provisioner finds machines to bring into the BMDB
// (Monogon's shepherd provider).
type Source interface {
	// Name names the source; machines it provided carry it in the
	// LabelProvider label. It must be a valid label value.
	Name() string
	// List returns every machine of the source.
	List(ctx context.Context) ([]SourceMachine, error)
	// Get returns the machine named name, or an error wrapping
	// ErrNotInSource.
	Get(ctx context.Context, name string) (SourceMachine, error)
	// Create hands out the machine named name (it becomes used) and
	// returns it; a machine already used or unknown gives an error.
	Create(ctx context.Context, name string) (SourceMachine, error)
}

// ErrNotInSource: the source has no machine of that name.
var ErrNotInSource = errors.New("not in the machine source")

// LabelProvider is the label of the BMDB machines a source provided; its
// value is the source's name.
const LabelProvider = "booty.dev/provider"

// MemSource is an in-memory Source for tests: machines are free until
// Create hands them out. Its methods are safe for concurrent use.
type MemSource struct {
	SourceName string

	mu       sync.Mutex
	machines map[string]SourceMachine
}

// NewMemSource returns a source named name holding machines, all free.
func NewMemSource(name string, machines ...SourceMachine) *MemSource {
	s := &MemSource{SourceName: name, machines: map[string]SourceMachine{}}
	for _, m := range machines {
		m.Availability = AvailabilityFree
		s.machines[m.Name] = m
	}
	return s
}

// Name returns SourceName.
func (s *MemSource) Name() string { return s.SourceName }

// List returns the machines sorted by name.
func (s *MemSource) List(context.Context) ([]SourceMachine, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]SourceMachine, 0, len(s.machines))
	for _, m := range s.machines {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Get returns the machine named name.
func (s *MemSource) Get(_ context.Context, name string) (SourceMachine, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.machines[name]
	if !ok {
		return SourceMachine{}, fmt.Errorf("machine %s: %w", name, ErrNotInSource)
	}
	return m, nil
}

// Create marks the free machine named name used.
func (s *MemSource) Create(_ context.Context, name string) (SourceMachine, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.machines[name]
	if !ok {
		return SourceMachine{}, fmt.Errorf("create machine %s: %w", name, ErrNotInSource)
	}
	if m.Availability == AvailabilityUsed {
		return SourceMachine{}, fmt.Errorf("create machine %s: already used", name)
	}
	m.Availability = AvailabilityUsed
	s.machines[name] = m
	return m, nil
}

// Remove drops the machine named name (a machine that went away).
func (s *MemSource) Remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.machines, name)
}

// Set adds or replaces a machine.
func (s *MemSource) Set(m SourceMachine) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.machines[m.Name] = m
}

// Inventory is a Source read from a YAML or JSON file:
//
//	machines:
//	- name: node-1
//	  bootMAC: 52:54:00:12:34:56
//	  bmcAddress: redfish://10.0.0.10/redfish/v1/Systems/1
//	  credentialsName: bmc-node-1
//	  username: admin              # optional: the credentials to store
//	  passwordFile: bmc-node-1.pass  # its first line; relative to this file
//	  online: true                 # optional, default false
//	  sshAddress: 10.0.1.10:22     # optional, for the Initializer
//
// Its machines' availability is unknown: an inventory lists what exists,
// the BMDB says what is managed. Create returns the machine.
type Inventory struct {
	name     string
	machines []SourceMachine
}

type inventoryFile struct {
	Machines []inventoryMachine `json:"machines"`
}

// inventoryMachine is a machine as an inventory file writes it: a
// SourceMachine and the credentials to store under its credentialsName.
type inventoryMachine struct {
	SourceMachine
	Username     string `json:"username,omitempty"`
	PasswordFile string `json:"passwordFile,omitempty"`
	// Password is refused: a password is never written inline.
	Password string `json:"password,omitempty"`
}

// credentials reads the machine's credentials (nil without username and
// passwordFile); a relative passwordFile is resolved against dir. Errors
// name the machine and the field, never the password.
func (m inventoryMachine) credentials(dir string) (*bmdb.Credentials, error) {
	switch {
	case m.Password != "":
		return nil, fmt.Errorf("machine %s: password: a password is not written in the inventory; use passwordFile", m.Name)
	case m.Username == "" && m.PasswordFile == "":
		return nil, nil
	case m.Username == "" || m.PasswordFile == "":
		return nil, fmt.Errorf("machine %s: username and passwordFile go together", m.Name)
	case m.CredentialsName == "":
		return nil, fmt.Errorf("machine %s: username without credentialsName (the name the credentials are stored under)", m.Name)
	}
	p := m.PasswordFile
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("machine %s: passwordFile: %w", m.Name, err)
	}
	pw, _, _ := strings.Cut(string(b), "\n")
	if pw = strings.TrimSuffix(pw, "\r"); pw == "" {
		return nil, fmt.Errorf("machine %s: passwordFile %s: its first line is empty; want the password there", m.Name, p)
	}
	return &bmdb.Credentials{Username: m.Username, Password: pw}, nil
}

// LoadInventory reads the inventory at path; the source is named name. Each
// machine is checked (name, MAC, BMC address, credentials name, username
// with passwordFile, read then) and names and MACs must be unique; machines
// sharing a credentialsName must not give different credentials. The error
// names the machine and the field, never a password.
func LoadInventory(name, path string) (*Inventory, error) {
	if err := names.LabelValue(name); err != nil || name == "" {
		return nil, fmt.Errorf("inventory %s: source name %q is not a label value", path, name)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read inventory: %w", err)
	}
	var f inventoryFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return nil, fmt.Errorf("inventory %s: %w", path, err)
	}
	seen := map[string]string{}
	creds := map[string]SourceMachine{} // credentials name → first machine giving them
	machines := make([]SourceMachine, 0, len(f.Machines))
	for i, im := range f.Machines {
		m := im.SourceMachine
		c, err := im.credentials(filepath.Dir(path))
		if err != nil {
			return nil, fmt.Errorf("inventory %s: machine %d: %w", path, i+1, err)
		}
		m.Credentials = c
		if err := m.Check(); err != nil {
			return nil, fmt.Errorf("inventory %s: machine %d: %w", path, i+1, err)
		}
		mac, _ := bmdb.ParseMAC(m.BootMAC)
		for _, k := range []string{"name " + m.Name, "MAC " + mac} {
			if prev, dup := seen[k]; dup {
				return nil, fmt.Errorf("inventory %s: machine %d (%s): %s is also machine %s's", path, i+1, m.Name, k, prev)
			}
			seen[k] = m.Name
		}
		if c != nil {
			if prev, ok := creds[m.CredentialsName]; ok && *prev.Credentials != *c {
				return nil, fmt.Errorf("inventory %s: machine %d (%s): credentialsName %s: other username or password than machine %s's",
					path, i+1, m.Name, m.CredentialsName, prev.Name)
			} else if !ok {
				creds[m.CredentialsName] = m
			}
		}
		m.Availability = AvailabilityUnknown
		machines = append(machines, m)
	}
	return &Inventory{name: name, machines: machines}, nil
}

// Name returns the source's name.
func (v *Inventory) Name() string { return v.name }

// List returns the inventory's machines.
func (v *Inventory) List(context.Context) ([]SourceMachine, error) {
	return append([]SourceMachine(nil), v.machines...), nil
}

// Get returns the machine named name.
func (v *Inventory) Get(_ context.Context, name string) (SourceMachine, error) {
	for _, m := range v.machines {
		if m.Name == name {
			return m, nil
		}
	}
	return SourceMachine{}, fmt.Errorf("machine %s: %w", name, ErrNotInSource)
}

// Create returns the machine named name: an inventory hands out nothing.
func (v *Inventory) Create(ctx context.Context, name string) (SourceMachine, error) {
	return v.Get(ctx, strings.TrimSpace(name))
}
