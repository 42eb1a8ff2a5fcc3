package bootloader

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// DefaultEFIVarsDir is where the kernel mounts efivarfs.
const DefaultEFIVarsDir = "/sys/firmware/efi/efivars"

// globalVariableGUID is EFI_GLOBAL_VARIABLE, the vendor GUID of Boot####,
// BootOrder and BootNext, as efivarfs spells it in file names.
const globalVariableGUID = "8be4df61-93ca-11d2-aa0d-00e098032b8c"

// Variable attributes (UEFI 2.10, 8.2).
const (
	efiVariableNonVolatile       uint32 = 0x1
	efiVariableBootserviceAccess uint32 = 0x2
	efiVariableRuntimeAccess     uint32 = 0x4
	// efiNVBSRT is what new Boot#### and BootOrder variables get.
	efiNVBSRT = efiVariableNonVolatile | efiVariableBootserviceAccess | efiVariableRuntimeAccess
)

// EFIVars reads and writes boot variables through efivarfs. Every file in
// Dir is "<Name>-<vendor GUID>" and holds 4 bytes of little-endian variable
// attributes followed by the data. Before an existing variable is written
// or deleted its immutable flag (which efivarfs sets on most variables) is
// cleared; directories that do not support the flag ioctl (tmpfs) count as
// not immutable.
type EFIVars struct {
	// Dir is the efivarfs mount; empty means DefaultEFIVarsDir.
	Dir string
	// Log receives warnings about variables that cannot be decoded;
	// nil means slog.Default().
	Log *slog.Logger
}

func (v EFIVars) dir() string {
	if v.Dir == "" {
		return DefaultEFIVarsDir
	}
	return v.Dir
}

func (v EFIVars) log() *slog.Logger {
	if v.Log == nil {
		return slog.Default().With("component", "bootloader")
	}
	return v.Log
}

func (v EFIVars) path(name string) string {
	if strings.Contains(name, "-") {
		return filepath.Join(v.dir(), name) // already "<Name>-<GUID>"
	}
	return filepath.Join(v.dir(), name+"-"+globalVariableGUID)
}

// BootyVendorGUID is the vendor GUID of booty's own EFI variables, so they
// never collide with the firmware's or another OS's.
const BootyVendorGUID = "5d9b7a1e-3c4f-4b8e-9a61-0b0074790001"

// Available reports whether Dir exists (efivarfs is mounted on a UEFI
// machine; a test's directory stands for it).
func (v EFIVars) Available() bool {
	fi, err := os.Stat(v.dir())
	return err == nil && fi.IsDir()
}

// ReadBootyVar returns the data of booty's variable name (BootyVendorGUID);
// the error wraps fs.ErrNotExist when it does not exist.
func (v EFIVars) ReadBootyVar(name string) ([]byte, error) {
	_, data, err := v.read(name + "-" + BootyVendorGUID)
	return data, err
}

// WriteBootyVar creates or replaces booty's variable name
// (BootyVendorGUID), non-volatile and readable at runtime.
func (v EFIVars) WriteBootyVar(name string, data []byte) error {
	return v.write(name+"-"+BootyVendorGUID, efiNVBSRT, data)
}

// RemoveBootyVar deletes booty's variable name; a missing one is not an error.
func (v EFIVars) RemoveBootyVar(name string) error {
	return v.remove(name + "-" + BootyVendorGUID)
}

// bootVarName is "Boot%04X", upper-case hex as the spec requires.
func bootVarName(n uint16) string { return fmt.Sprintf("Boot%04X", n) }

// read returns a global variable's attributes and data; the error wraps
// fs.ErrNotExist when the variable does not exist.
func (v EFIVars) read(name string) (uint32, []byte, error) {
	b, err := os.ReadFile(v.path(name))
	if err != nil {
		return 0, nil, fmt.Errorf("read EFI variable %s: %w", name, err)
	}
	if len(b) < 4 {
		return 0, nil, fmt.Errorf("read EFI variable %s: %d bytes, want at least 4 attribute bytes: %w", name, len(b), ErrBadLoadOption)
	}
	return binary.LittleEndian.Uint32(b[:4]), b[4:], nil
}

// write replaces (or creates) a global variable with one write(2) of
// attributes and data, as efivarfs requires.
func (v EFIVars) write(name string, attrs uint32, data []byte) error {
	p := v.path(name)
	flags := os.O_WRONLY | os.O_CREATE
	if _, err := os.Stat(p); err == nil {
		if err := makeMutable(p); err != nil {
			return fmt.Errorf("write EFI variable %s: %w", name, err)
		}
		// efivarfs replaces the variable on write and does not support
		// truncation; anything else (tests) must be truncated.
		if !isEFIVarFS(v.dir()) {
			flags |= os.O_TRUNC
		}
	}
	buf := binary.LittleEndian.AppendUint32(make([]byte, 0, 4+len(data)), attrs)
	buf = append(buf, data...)
	f, err := os.OpenFile(p, flags, 0o644)
	if err != nil {
		return fmt.Errorf("write EFI variable %s: %w", name, err)
	}
	n, err := f.Write(buf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != len(buf) {
		err = fmt.Errorf("short write %d of %d bytes", n, len(buf))
	}
	if err != nil {
		return fmt.Errorf("write EFI variable %s: %w", name, err)
	}
	return nil
}

// remove deletes a global variable; a missing variable is not an error.
func (v EFIVars) remove(name string) error {
	p := v.path(name)
	if err := makeMutable(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("delete EFI variable %s: %w", name, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete EFI variable %s: %w", name, err)
	}
	return nil
}

// bootNums lists the numbers of all Boot#### variables present, decodable
// or not, sorted.
func (v EFIVars) bootNums() ([]uint16, error) {
	ents, err := os.ReadDir(v.dir())
	if err != nil {
		return nil, fmt.Errorf("list EFI variables in %s: %w", v.dir(), err)
	}
	var nums []uint16
	suffix := "-" + globalVariableGUID
	for _, e := range ents {
		name, ok := strings.CutSuffix(strings.ToLower(e.Name()), suffix)
		if !ok || len(name) != 8 || !strings.HasPrefix(name, "boot") {
			continue
		}
		// Only upper-case hex names are boot options (UEFI 3.1.1).
		if e.Name()[4:8] != strings.ToUpper(e.Name()[4:8]) {
			continue
		}
		n, err := strconv.ParseUint(name[4:], 16, 16)
		if err != nil {
			continue
		}
		nums = append(nums, uint16(n))
	}
	slices.Sort(nums)
	return nums, nil
}

// BootEntries reads every Boot#### variable, sorted by number. Variables
// that cannot be read or decoded are left out with a warning; the error is
// only for a directory that cannot be listed.
func (v EFIVars) BootEntries() ([]LoadOption, error) {
	nums, err := v.bootNums()
	if err != nil {
		return nil, err
	}
	var out []LoadOption
	for _, n := range nums {
		_, data, err := v.read(bootVarName(n))
		if err == nil {
			var o LoadOption
			o, err = ParseLoadOption(data)
			if err == nil {
				o.Num = n
				out = append(out, o)
				continue
			}
		}
		v.log().Warn("skipping undecodable boot variable", "var", bootVarName(n), "err", err)
	}
	return out, nil
}

// BootOrder returns the BootOrder variable; empty when it does not exist.
func (v EFIVars) BootOrder() ([]uint16, error) {
	_, data, err := v.read("BootOrder")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(data)%2 != 0 {
		return nil, fmt.Errorf("read EFI variable BootOrder: odd length %d: %w", len(data), ErrBadLoadOption)
	}
	order := make([]uint16, len(data)/2)
	for i := range order {
		order[i] = binary.LittleEndian.Uint16(data[2*i:])
	}
	return order, nil
}

// SetBootOrder replaces the BootOrder variable, keeping its attributes when
// it exists and using NV|BS|RT otherwise.
func (v EFIVars) SetBootOrder(order []uint16) error {
	attrs, _, err := v.read("BootOrder")
	if err != nil {
		attrs = efiNVBSRT
	}
	data := make([]byte, 0, 2*len(order))
	for _, n := range order {
		data = binary.LittleEndian.AppendUint16(data, n)
	}
	return v.write("BootOrder", attrs, data)
}

// CreateBootEntry makes sure a Boot#### variable starts loader (an EFI
// path such as `\EFI\debian\shimx64.efi`; forward slashes are converted)
// from the GPT partition part, and returns its number.
//
// An existing entry with the same description and device path is reused
// (and made active if it was not); otherwise the lowest unused number gets
// a new active entry with attributes NV|BS|RT. With first, the number is
// moved to the front of BootOrder; without, it is appended when absent.
// On failure after the Boot#### variable was written, the variable stays
// and the error says which step failed.
func (v EFIVars) CreateBootEntry(desc string, part PartitionInfo, loader string, first bool) (uint16, error) {
	hd, err := hardDriveNode(part)
	if err != nil {
		return 0, fmt.Errorf("create boot entry %q: %w", desc, err)
	}
	want := LoadOption{
		Attributes:  LoadOptionActive,
		Description: desc,
		FilePath:    DevicePath{hd, filePathNode(loader), {Type: devicePathTypeEnd, SubType: endSubTypeEntirePath}},
	}
	wantPath, err := want.FilePath.MarshalBinary()
	if err != nil {
		return 0, fmt.Errorf("create boot entry %q: %w", desc, err)
	}
	existing, err := v.BootEntries()
	if err != nil {
		return 0, fmt.Errorf("create boot entry %q: %w", desc, err)
	}
	num, found := uint16(0), false
	for _, o := range existing {
		p, err := o.FilePath.MarshalBinary()
		if err == nil && o.Description == desc && bytes.Equal(p, wantPath) {
			num, found = o.Num, true
			if !o.Active() {
				o.Attributes |= LoadOptionActive
				if err := v.writeBootOption(o); err != nil {
					return 0, fmt.Errorf("create boot entry %q: activate existing: %w", desc, err)
				}
			}
			break
		}
	}
	if !found {
		nums, err := v.bootNums()
		if err != nil {
			return 0, fmt.Errorf("create boot entry %q: %w", desc, err)
		}
		num, err = lowestFree(nums)
		if err != nil {
			return 0, fmt.Errorf("create boot entry %q: %w", desc, err)
		}
		want.Num = num
		if err := v.writeBootOption(want); err != nil {
			return 0, fmt.Errorf("create boot entry %q: %w", desc, err)
		}
	}
	order, err := v.BootOrder()
	if err != nil {
		return num, fmt.Errorf("create boot entry %q as %s: %w", desc, bootVarName(num), err)
	}
	var newOrder []uint16
	if first {
		newOrder = append([]uint16{num}, slices.DeleteFunc(slices.Clone(order), func(n uint16) bool { return n == num })...)
	} else if !slices.Contains(order, num) {
		newOrder = append(slices.Clone(order), num)
	} else {
		newOrder = order
	}
	if !slices.Equal(newOrder, order) {
		if err := v.SetBootOrder(newOrder); err != nil {
			return num, fmt.Errorf("create boot entry %q as %s: %w", desc, bootVarName(num), err)
		}
	}
	return num, nil
}

func (v EFIVars) writeBootOption(o LoadOption) error {
	data, err := o.MarshalBinary()
	if err != nil {
		return err
	}
	attrs, _, err := v.read(bootVarName(o.Num))
	if err != nil {
		attrs = efiNVBSRT
	}
	return v.write(bootVarName(o.Num), attrs, data)
}

func lowestFree(used []uint16) (uint16, error) {
	var next uint32
	for _, n := range used { // sorted
		if uint32(n) > next {
			break
		}
		if uint32(n) == next {
			next++
		}
	}
	if next > 0xffff {
		return 0, errors.New("all 65536 Boot#### numbers are in use")
	}
	return uint16(next), nil
}

// RemoveBootEntries deletes every decodable Boot#### variable for which
// match returns true, then drops their numbers from BootOrder and deletes
// BootNext if it pointed at one of them. It returns the numbers removed,
// also on error (the entries removed before the failure).
func (v EFIVars) RemoveBootEntries(match func(LoadOption) bool) ([]uint16, error) {
	entries, err := v.BootEntries()
	if err != nil {
		return nil, fmt.Errorf("remove boot entries: %w", err)
	}
	var removed []uint16
	for _, o := range entries {
		if !match(o) {
			continue
		}
		if err := v.remove(bootVarName(o.Num)); err != nil {
			return removed, fmt.Errorf("remove boot entries: %w", err)
		}
		removed = append(removed, o.Num)
	}
	if len(removed) == 0 {
		return nil, nil
	}
	order, err := v.BootOrder()
	if err != nil {
		return removed, fmt.Errorf("remove boot entries: %w", err)
	}
	kept := slices.DeleteFunc(slices.Clone(order), func(n uint16) bool { return slices.Contains(removed, n) })
	if len(kept) != len(order) {
		if err := v.SetBootOrder(kept); err != nil {
			return removed, fmt.Errorf("remove boot entries: %w", err)
		}
	}
	if _, next, err := v.read("BootNext"); err == nil && len(next) == 2 &&
		slices.Contains(removed, binary.LittleEndian.Uint16(next)) {
		if err := v.remove("BootNext"); err != nil {
			return removed, fmt.Errorf("remove boot entries: %w", err)
		}
	}
	return removed, nil
}
