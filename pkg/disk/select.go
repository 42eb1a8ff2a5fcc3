package disk

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/booty-dev/booty/pkg/humanize"
)

// Sentinels of Select, checked with errors.Is.
var (
	// ErrNoDiskSpec: the DiskSpec has neither Device nor Hints; booty never guesses a target.
	ErrNoDiskSpec = errors.New("disk spec has neither device nor hints")
	// ErrNoMatch: no disk satisfied the spec; the *NoMatchError says why per disk.
	ErrNoMatch = errors.New("no disk matches")
)

// Candidate is one disk with the reasons it cannot be the target;
// no Reasons means it is eligible and matches the spec.
type Candidate struct {
	Disk    Disk     `json:"disk"`
	Reasons []string `json:"reasons,omitempty"`
}

// NoMatchError lists every disk seen and why each was rejected.
type NoMatchError struct {
	Spec       string
	Candidates []Candidate
}

func (e *NoMatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "select disk for %s: no disk matches", e.Spec)
	if len(e.Candidates) == 0 {
		b.WriteString(": no disks found")
	}
	for _, c := range e.Candidates {
		d := c.Disk
		fmt.Fprintf(&b, "; %s (%s, model %q, serial %q, tran %q, wwn %q, hctl %q): %s",
			d.Path, HumanSize(d.Size), d.Model, d.Serial, d.Tran, d.WWN, d.HCTL, strings.Join(c.Reasons, ", "))
	}
	return b.String()
}

func (e *NoMatchError) Unwrap() error { return ErrNoMatch }

// Spec says which disk to select: a device (a kernel name, a /dev path or
// a /dev/disk/by-* link) and/or Ironic root device hints, parsed by
// ParseHints (the one parser config validation uses too).
type Spec struct {
	Device string
	Hints  Hints
}

// Evaluate judges every disk against spec and minSize, in Disks order. A disk
// is rejected when it is removable, read-only, the boot medium, smaller than
// minSize, not the named Device, or does not match the Hints; all reasons
// are collected. Errors: listing disks failed, invalid hints, ErrNoDiskSpec.
func (m *Manager) Evaluate(spec Spec, minSize int64) ([]Candidate, error) {
	if spec.Device == "" && len(spec.Hints) == 0 {
		return nil, ErrNoDiskSpec
	}
	hints := spec.Hints
	disks, err := m.Disks()
	if err != nil {
		return nil, err
	}
	want := ""
	if spec.Device != "" {
		want = m.resolveDevice(spec.Device)
	}
	out := make([]Candidate, 0, len(disks))
	for _, d := range disks {
		c := Candidate{Disk: d}
		if d.Removable {
			c.Reasons = append(c.Reasons, "removable")
		}
		if d.ReadOnly {
			c.Reasons = append(c.Reasons, "read-only")
		}
		if d.BootMedium {
			c.Reasons = append(c.Reasons, "boot medium or mounted")
		}
		if d.Size < minSize {
			c.Reasons = append(c.Reasons, fmt.Sprintf("size %s smaller than required %s", HumanSize(d.Size), HumanSize(minSize)))
		}
		if want != "" && !m.deviceIs(d, want) {
			c.Reasons = append(c.Reasons, fmt.Sprintf("not device %s", spec.Device))
		}
		if ok, why := hints.Match(d); !ok {
			c.Reasons = append(c.Reasons, why)
		}
		out = append(out, c)
	}
	return out, nil
}

// Select returns the target disk for spec: of the disks Evaluate accepts, the
// smallest (then by name), as Ironic picks among several matches. When no
// disk qualifies the error is a *NoMatchError (errors.Is ErrNoMatch) listing
// every disk with its main properties and why it was rejected.
func (m *Manager) Select(spec Spec, minSize int64) (*Disk, error) {
	cands, err := m.Evaluate(spec, minSize)
	if err != nil {
		return nil, fmt.Errorf("select disk: %w", err)
	}
	d := Choose(cands)
	if d == nil {
		return nil, &NoMatchError{Spec: describeSpec(spec), Candidates: cands}
	}
	return d, nil
}

// Choose returns the smallest candidate without reasons, ties broken by
// name, or nil.
func Choose(cands []Candidate) *Disk {
	var ok []Disk
	for _, c := range cands {
		if len(c.Reasons) == 0 {
			ok = append(ok, c.Disk)
		}
	}
	if len(ok) == 0 {
		return nil
	}
	sort.SliceStable(ok, func(i, j int) bool {
		if ok[i].Size != ok[j].Size {
			return ok[i].Size < ok[j].Size
		}
		return ok[i].Name < ok[j].Name
	})
	return &ok[0]
}

func describeSpec(spec Spec) string {
	var parts []string
	if spec.Device != "" {
		parts = append(parts, "device "+spec.Device)
	}
	if len(spec.Hints) > 0 {
		parts = append(parts, "hints "+spec.Hints.String())
	}
	return strings.Join(parts, " and ")
}

// resolveDevice turns a Device value into what deviceIs compares: the kernel
// name for "vda", "/dev/vda" and symlinks under DevRoot ("/dev/disk/by-id/…"
// that resolve), or the by-path link name for a by-path value that does not
// resolve (no udev in the initramfs).
func (m *Manager) resolveDevice(dev string) string {
	devRoot := m.devRoot()
	p := dev
	if strings.HasPrefix(dev, "/dev/") {
		p = filepath.Join(devRoot, strings.TrimPrefix(dev, "/dev/"))
	}
	if strings.Contains(p, "/") {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			if rel, err := filepath.Rel(devRoot, r); err == nil && !strings.HasPrefix(rel, "..") {
				return rel
			}
			return filepath.Base(r)
		}
		if strings.HasPrefix(dev, "/dev/") && !strings.Contains(strings.TrimPrefix(dev, "/dev/"), "/") {
			return strings.TrimPrefix(dev, "/dev/")
		}
		return "by-path:" + filepath.Base(dev)
	}
	return dev
}

func (m *Manager) deviceIs(d Disk, want string) bool {
	if bp, ok := strings.CutPrefix(want, "by-path:"); ok {
		return d.ByPath != "" && filepath.Base(d.ByPath) == bp
	}
	if want == d.Name {
		return true
	}
	// A by-path name given bare ("pci-0000:00:04.0").
	return d.ByPath != "" && filepath.Base(d.ByPath) == want
}

// HumanSize formats bytes as humanize.Bytes does, in binary units, but
// without ".0" on whole numbers as disk sizes mostly are: "20 GiB",
// "512 MiB", "1.5 TiB".
func HumanSize(n int64) string {
	return strings.Replace(humanize.Bytes(n), ".0 ", " ", 1)
}
