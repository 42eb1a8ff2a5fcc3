package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/humanize"
	"github.com/booty-dev/booty/pkg/image"
)

// commands returns every `bootyctl machines` command by name.
func commands() map[string]command {
	cs := []command{
		listCommand(), showCommand(), registerCommand(), provisionCommand(),
		actionCommand("deprovision", "wipe a provisioned machine and bring it back to available",
			"Asks the machine's agent to deprovision: bootyd moves the machine to\ndeprovisioning and the agent wipes the disk it wrote; the machine ends\navailable.",
			"  bootyctl machines deprovision node-1"),
		actionCommand("inspect", "have the agent report the machine's hardware again",
			"Asks the machine's agent to inspect: bootyd moves the machine to\ninspecting and the agent reports its hardware (disks, NICs, CPU, memory);\nthe machine ends available.",
			"  bootyctl machines inspect node-1"),
		deleteCommand(), eventsCommand(), logsCommand(), watchCommand(),
	}
	m := make(map[string]command, len(cs))
	for _, c := range cs {
		c.group = "machines"
		m[c.name] = c
	}
	return m
}

// machinePath is the route of one machine, by name, ID or MAC.
func machinePath(ref string, sub ...string) string {
	p := "/v1/machines/" + url.PathEscape(ref)
	for _, s := range sub {
		p += "/" + s
	}
	return p
}

// listAll fetches every page of GET /v1/machines.
func listAll(ctx context.Context, c *client, states []string) (api.MachineList, error) {
	var all api.MachineList
	all.Machines = []api.Machine{}
	q := url.Values{}
	if len(states) > 0 {
		q.Set("state", strings.Join(states, ","))
	}
	for page := 0; page < 10000; page++ {
		var l api.MachineList
		if _, err := c.get(ctx, "/v1/machines", q, &l); err != nil {
			return all, err
		}
		all.Machines = append(all.Machines, l.Machines...)
		if l.Next == "" {
			return all, nil
		}
		q.Set("after", l.Next)
	}
	return all, fmt.Errorf("list machines: more than 10000 pages")
}

// knownStates are the provisioning states --state accepts.
var knownStates = []string{api.MachineRegistering, api.MachineInspecting, api.MachineAvailable, api.MachinePreparing,
	api.MachineProvisioning, api.MachineProvisioned, api.MachineDeprovisioning, api.MachineExternallyProvisioned,
	api.MachinePoweringOffBeforeDelete, api.MachineDeleting}

func checkStates(states []string) error {
	for _, s := range states {
		ok := false
		for _, k := range knownStates {
			ok = ok || s == k
		}
		if !ok {
			return usageError{"--state", fmt.Sprintf("%q: want one of %s", s, strings.Join(knownStates, ", "))}
		}
	}
	return nil
}

func listCommand() command {
	var states []string
	return command{
		name: "list", short: "list machines with their state, status and progress",
		long:    "Lists every machine bootyd knows, ordered by name: registered ones and\nthe discovered ones whose agent enrolled unasked.",
		example: "  bootyctl machines list\n  bootyctl machines list --state provisioning --state provisioned -o json",
		flags: func(fs *pflag.FlagSet) {
			fs.StringArrayVar(&states, "state", nil, "only machines in this state (repeatable): "+strings.Join(knownStates, ", "))
		},
		run: func(ctx context.Context, e *env, c *client, _ []string, _ *pflag.FlagSet) error {
			if err := checkStates(states); err != nil {
				return err
			}
			l, err := listAll(ctx, c, states)
			if err != nil {
				return err
			}
			if e.output != formatTable {
				raw, err := json.Marshal(l)
				if err != nil {
					return err
				}
				return writeRaw(e.stdout, e.output, raw)
			}
			rows := make([][]string, 0, len(l.Machines))
			for _, m := range l.Machines {
				rows = append(rows, []string{m.Name, m.State, statusCell(m), m.BootMAC, strconv.FormatInt(m.Generation, 10),
					agentCell(m.Agent, e.now()), m.Command, percentCell(m)})
			}
			return table(e.stdout, []string{"NAME", "STATE", "STATUS", "BOOT MAC", "GEN", "AGENT", "COMMAND", "PROGRESS"}, rows)
		},
		maxArgs: 0,
	}
}

// agentCell says whether the machine's agent is live and when it was last heard.
func agentCell(a *api.AgentInfo, now time.Time) string {
	switch {
	case a == nil:
		return ""
	case a.Live:
		return "live " + ago(a.LastHeartbeat, now)
	case !a.EndedAt.IsZero():
		return "ended"
	}
	return "silent " + ago(a.LastHeartbeat, now)
}

func ago(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	return humanize.Duration(now.Sub(t).Truncate(time.Second)) + " ago"
}

func percentCell(m api.Machine) string {
	if p := m.Progress; p != nil && p.BytesTotal > 0 {
		return fmt.Sprintf("%d%%", int(float64(p.BytesDone)/float64(p.BytesTotal)*100))
	}
	return ""
}

func showCommand() command {
	return command{
		name: "show", args: "MACHINE", short: "show one machine: spec, hardware, install steps",
		long:    "Shows one machine (by name, ID or any of its MACs): its lifecycle, BMC,\nspec (cloud-init data is shown only as its size), the disks and NICs its\nagent reported, and the steps of its current or last install.",
		example: "  bootyctl machines show node-1\n  bootyctl machines show 52:54:00:12:34:56 -o yaml",
		run: func(ctx context.Context, e *env, c *client, args []string, _ *pflag.FlagSet) error {
			var d api.MachineDetail
			raw, err := c.get(ctx, machinePath(args[0]), nil, &d)
			if err != nil {
				return err
			}
			if e.output != formatTable {
				return writeRaw(e.stdout, e.output, raw)
			}
			return writeDetail(e, d)
		},
		minArgs: 1, maxArgs: 1,
	}
}

// writeDetail prints one machine for people.
func writeDetail(e *env, d api.MachineDetail) error {
	w := e.stdout
	kv := [][2]string{
		{"Name", d.Name}, {"ID", d.ID}, {"State", d.State}, {"Status", d.Status},
		{"Generation", strconv.FormatInt(d.Generation, 10)},
		{"Boot MAC", d.BootMAC}, {"MACs", strings.Join(d.MACs, ", ")},
		{"Labels", labelsString(d.Labels)},
		{"BMC", d.BMC.Address}, {"BMC credentials", d.BMC.CredentialsRef},
		{"Agent", agentCell(d.Agent, e.now())},
		{"Command", d.Command},
	}
	if d.Error != nil && d.Error.Message != "" {
		kv = append(kv, [2]string{"Error", fmt.Sprintf("%s: %s (%d in a row)", d.Error.Type, d.Error.Message, d.Error.Count)})
	}
	s := d.Spec
	kv = append(kv, [2]string{"Image", s.Image.URL}, [2]string{"Checksum", s.Image.Checksum}, [2]string{"Hostname", s.Hostname})
	if h := s.RootDeviceHints; h != nil {
		b, _ := json.Marshal(h)
		kv = append(kv, [2]string{"Root device hints", string(b)})
	}
	for _, x := range [][2]string{{"User data", s.UserData}, {"Network data", s.NetworkData}, {"Meta data", s.MetaData}} {
		if x[1] != "" {
			kv = append(kv, [2]string{x[0], humanize.Bytes(int64(len(x[1]))) + " (not shown)"})
		}
	}
	if err := keyValues(w, kv); err != nil {
		return err
	}
	if h := d.Hardware; h != nil {
		fmt.Fprintf(w, "\nHardware (reported %s):\n", d.HardwareAt.Format(time.RFC3339))
		hw := [][2]string{
			{"  System", strings.TrimSpace(h.SystemVendor.Manufacturer + " " + h.SystemVendor.ProductName + " " + h.SystemVendor.SerialNumber)},
			{"  CPU", fmt.Sprintf("%d × %s %s", h.CPU.Count, h.CPU.Arch, h.CPU.Model)},
			{"  Memory", humanize.Bytes(int64(h.RAMMebibytes) << 20)},
		}
		if err := keyValues(w, hw); err != nil {
			return err
		}
		if len(h.Storage) > 0 {
			fmt.Fprintln(w)
			rows := [][]string{}
			for _, st := range h.Storage {
				rows = append(rows, []string{st.Name, string(st.Type), humanize.Bytes(st.SizeBytes), st.Model, st.SerialNumber, st.WWN, st.HCTL})
			}
			if err := table(w, []string{"DISK", "TYPE", "SIZE", "MODEL", "SERIAL", "WWN", "HCTL"}, rows); err != nil {
				return err
			}
		}
		if len(h.NIC) > 0 {
			fmt.Fprintln(w)
			rows := [][]string{}
			for _, n := range h.NIC {
				rows = append(rows, []string{n.Name, n.MAC, n.IP, n.Model})
			}
			if err := table(w, []string{"NIC", "MAC", "IP", "MODEL"}, rows); err != nil {
				return err
			}
		}
	}
	if in := d.Install; in != nil {
		result := in.Result
		if result == "" {
			result = "running"
		}
		fmt.Fprintf(w, "\nInstall (%s, generation %d, %s", in.Kind, in.Generation, result)
		if p := in.Progress; p != nil && p.BytesTotal > 0 && in.Result == "" {
			fmt.Fprintf(w, ", %s %s", p.Step, bar(p.BytesDone, p.BytesTotal))
		}
		fmt.Fprintln(w, "):")
		if in.Error != "" {
			fmt.Fprintf(w, "  error: %s\n", cell(in.Error))
		}
		rows := [][]string{}
		for _, st := range in.Steps {
			rows = append(rows, []string{fmt.Sprintf("%d/%d", st.Index, st.Total), st.Name, st.Result,
				humanize.Duration(time.Duration(st.DurationMS) * time.Millisecond), st.Error})
		}
		if len(rows) > 0 {
			return table(w, []string{"STEP", "NAME", "RESULT", "DURATION", "ERROR"}, rows)
		}
	}
	return nil
}

func labelsString(l map[string]string) string {
	var parts []string
	for k, v := range l {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// specFlags are the flags that set a machine's spec, shared by register
// and provision.
type specFlags struct {
	image, checksum, checksumType, format, hostname string
	checksums                                       []string
	userData, networkData, metaData, overrides      string
	hints                                           api.RootDeviceHints
	rotational                                      string
}

func (s *specFlags) declare(fs *pflag.FlagSet) {
	fs.StringVar(&s.image, "image", "", "OS image URL: http(s)://…, file://… or oci://…")
	fs.StringVar(&s.checksum, "checksum", "", "the image's digest: sha256:HEX or sha512:HEX (bare HEX with --checksum-type)")
	fs.StringVar(&s.checksumType, "checksum-type", "", "type of a bare-hex --checksum: sha256 or sha512 (metal3's form)")
	fs.StringArrayVar(&s.checksums, "extra-checksum", nil, "another digest of the image's streams, sha256:HEX (repeatable)")
	fs.StringVar(&s.format, "image-format", "", "image format when the URL does not tell: raw, qcow2, …")
	fs.StringVar(&s.hostname, "hostname", "", "hostname of the installed OS")
	fs.StringVar(&s.userData, "user-data-file", "", "cloud-init user data, from this file")
	fs.StringVar(&s.networkData, "network-data-file", "", "cloud-init network data, from this file")
	fs.StringVar(&s.metaData, "meta-data-file", "", "cloud-init meta data, from this file")
	fs.StringVar(&s.overrides, "config-overrides-file", "", "JSON object merged over the MachineConfig bootyd renders, from this file")
	fs.StringVar(&s.hints.DeviceName, "root-device-name", "", "root device hint: device name, e.g. /dev/sda")
	fs.StringVar(&s.hints.HCTL, "root-hctl", "", "root device hint: SCSI host:channel:target:lun")
	fs.StringVar(&s.hints.Model, "root-model", "", "root device hint: disk model")
	fs.StringVar(&s.hints.Vendor, "root-vendor", "", "root device hint: disk vendor")
	fs.StringVar(&s.hints.SerialNumber, "root-serial", "", "root device hint: disk serial number")
	fs.IntVar(&s.hints.MinSizeGigabytes, "root-min-size-gb", 0, "root device hint: smallest disk size in GB")
	fs.StringVar(&s.hints.WWN, "root-wwn", "", "root device hint: WWN")
	fs.StringVar(&s.hints.WWNWithExtension, "root-wwn-with-extension", "", "root device hint: WWN with vendor extension")
	fs.StringVar(&s.hints.WWNVendorExtension, "root-wwn-vendor-extension", "", "root device hint: WWN vendor extension")
	fs.StringVar(&s.rotational, "root-rotational", "", "root device hint: true (HDD) or false (SSD, NVMe)")
}

var specFlagNames = []string{"image", "checksum", "checksum-type", "extra-checksum", "image-format", "hostname",
	"user-data-file", "network-data-file", "meta-data-file", "config-overrides-file"}

// changed says whether any spec flag was given.
func (s *specFlags) changed(fs *pflag.FlagSet) bool {
	for _, n := range specFlagNames {
		if fs.Changed(n) {
			return true
		}
	}
	return s.hintsChanged(fs)
}

func (s *specFlags) hintsChanged(fs *pflag.FlagSet) bool {
	changed := false
	fs.VisitAll(func(f *pflag.Flag) {
		changed = changed || (strings.HasPrefix(f.Name, "root-") && f.Changed)
	})
	return changed
}

// apply checks the given spec flags and writes them over spec; flags not
// given leave spec's fields as they are.
func (s *specFlags) apply(fs *pflag.FlagSet, spec *api.MachineSpec) error {
	if fs.Changed("image") {
		if err := image.CheckSource(s.image); err != nil {
			return usageError{"--image", fmt.Sprintf("%q: want an http://, https://, file:// or oci:// URL: %v", s.image, err)}
		}
		spec.Image.URL = s.image
	}
	if fs.Changed("checksum-type") {
		if s.checksumType != "sha256" && s.checksumType != "sha512" {
			return usageError{"--checksum-type", fmt.Sprintf("%q: want sha256 or sha512", s.checksumType)}
		}
		spec.Image.ChecksumType = s.checksumType
	}
	if fs.Changed("checksum") {
		if spec.Image.ChecksumType == "" {
			if err := image.CheckChecksum(s.checksum); err != nil {
				return usageError{"--checksum", fmt.Sprintf("%q: want sha256:HEX or sha512:HEX (or bare HEX with --checksum-type): %v", s.checksum, err)}
			}
		}
		spec.Image.Checksum = s.checksum
	}
	if fs.Changed("extra-checksum") {
		for _, c := range s.checksums {
			if err := image.CheckChecksum(c); err != nil {
				return usageError{"--extra-checksum", fmt.Sprintf("%q: want sha256:HEX or sha512:HEX: %v", c, err)}
			}
		}
		spec.Image.Checksums = s.checksums
	}
	if fs.Changed("image-format") {
		spec.Image.Format = s.format
	}
	if fs.Changed("hostname") {
		spec.Hostname = s.hostname
	}
	for _, f := range []struct {
		flag string
		dst  *string
	}{{"user-data-file", &spec.UserData}, {"network-data-file", &spec.NetworkData}, {"meta-data-file", &spec.MetaData}} {
		if !fs.Changed(f.flag) {
			continue
		}
		b, err := os.ReadFile(fs.Lookup(f.flag).Value.String())
		if err != nil {
			return fmt.Errorf("read --%s: %w", f.flag, err)
		}
		*f.dst = string(b)
	}
	if fs.Changed("config-overrides-file") {
		b, err := os.ReadFile(s.overrides)
		if err != nil {
			return fmt.Errorf("read --config-overrides-file: %w", err)
		}
		var obj map[string]any
		if err := json.Unmarshal(b, &obj); err != nil {
			return usageError{"--config-overrides-file", fmt.Sprintf("%s: want a JSON object: %v", s.overrides, err)}
		}
		spec.ConfigOverrides = b
	}
	if s.hintsChanged(fs) {
		h := s.hints
		if spec.RootDeviceHints != nil {
			h = mergeHints(fs, *spec.RootDeviceHints, s.hints)
		}
		if fs.Changed("root-min-size-gb") && s.hints.MinSizeGigabytes < 0 {
			return usageError{"--root-min-size-gb", fmt.Sprintf("%d: want a size in GB, 0 or more", s.hints.MinSizeGigabytes)}
		}
		if fs.Changed("root-rotational") {
			b, err := strconv.ParseBool(s.rotational)
			if err != nil {
				return usageError{"--root-rotational", fmt.Sprintf("%q: want true or false", s.rotational)}
			}
			h.Rotational = &b
		}
		spec.RootDeviceHints = &h
	}
	return nil
}

// mergeHints writes the hint flags given over old.
func mergeHints(fs *pflag.FlagSet, old, n api.RootDeviceHints) api.RootDeviceHints {
	set := func(flag string, dst *string, v string) {
		if fs.Changed(flag) {
			*dst = v
		}
	}
	set("root-device-name", &old.DeviceName, n.DeviceName)
	set("root-hctl", &old.HCTL, n.HCTL)
	set("root-model", &old.Model, n.Model)
	set("root-vendor", &old.Vendor, n.Vendor)
	set("root-serial", &old.SerialNumber, n.SerialNumber)
	set("root-wwn", &old.WWN, n.WWN)
	set("root-wwn-with-extension", &old.WWNWithExtension, n.WWNWithExtension)
	set("root-wwn-vendor-extension", &old.WWNVendorExtension, n.WWNVendorExtension)
	if fs.Changed("root-min-size-gb") {
		old.MinSizeGigabytes = n.MinSizeGigabytes
	}
	return old
}

// parseMAC checks a MAC flag: six bytes, any common spelling.
func parseMAC(flag, s string) (string, error) {
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != 6 {
		return "", usageError{flag, fmt.Sprintf("%q: want a 6-byte MAC such as 52:54:00:12:34:56", s)}
	}
	return hw.String(), nil
}

// bmcSchemes are the BMC address schemes --bmc accepts (metal3's).
var bmcSchemes = []string{"ipmi", "redfish", "redfish-virtualmedia", "redfish-uefihttp", "redfish-https",
	"idrac-redfish", "idrac-virtualmedia", "ilo5-redfish", "ilo5-virtualmedia"}

func checkBMC(s string) error {
	if err := checkBMCAddress(s); err != nil {
		return usageError{"--bmc", err.Error()}
	}
	return nil
}

// checkBMCAddress checks a BMC address: one of bmcSchemes and a host.
func checkBMCAddress(s string) error {
	u, err := url.Parse(s)
	ok := err == nil && u.Host != ""
	if ok {
		ok = false
		for _, sc := range bmcSchemes {
			ok = ok || u.Scheme == sc
		}
	}
	if !ok {
		return fmt.Errorf("%q: want SCHEME://HOST[:PORT][/PATH] with SCHEME one of %s", s, strings.Join(bmcSchemes, ", "))
	}
	return nil
}

// readPasswordFile returns the first line of path, the whole of it (a
// password may start with # or hold spaces). The error names the file,
// never its content.
func readPasswordFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	pw, _, _ := strings.Cut(string(b), "\n")
	if pw = strings.TrimSuffix(pw, "\r"); pw == "" {
		return "", fmt.Errorf("%s: its first line is empty; want the password there", path)
	}
	return pw, nil
}

func registerCommand() command {
	var (
		name, mac, bmc, bmcCreds, bmcUser, bmcPassFile string
		macs, labels                                   []string
		bmcInsecure, external                          bool
		spec                                           specFlags
	)
	return command{
		name: "register", short: "register a machine before it boots",
		long: "Registers a machine: its name, the MAC it network-boots from, its other\nMACs, its BMC and the spec a provision writes (image, checksum, root\ndevice hints, hostname, cloud-init data). The machine starts in\nregistering; when its agent enrolls it is inspected and becomes\navailable. The BMC password is read from a file, never from the\ncommand line.",
		example: "  bootyctl machines register --name node-1 --mac 52:54:00:12:34:56 \\\n" +
			"      --bmc ipmi://10.0.1.11:623 --bmc-username admin --bmc-password-file ./bmc.pass \\\n" +
			"      --image https://10.0.0.1:8443/files/debian.raw.zst --checksum sha256:9f86d0… \\\n" +
			"      --root-min-size-gb 100 --root-rotational=false --hostname node-1 --label rack=r1",
		flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&name, "name", "", "the machine's name (required; unique; DNS-label characters)")
			fs.StringVar(&mac, "mac", "", "the MAC the machine network-boots from (required), e.g. 52:54:00:12:34:56")
			fs.StringArrayVar(&macs, "other-mac", nil, "another MAC of the machine (repeatable)")
			fs.StringArrayVar(&labels, "label", nil, "a label KEY=VALUE (repeatable)")
			fs.StringVar(&bmc, "bmc", "", "BMC address: ipmi://HOST:PORT, redfish://HOST/redfish/v1/Systems/ID, redfish-virtualmedia://…")
			fs.StringVar(&bmcCreds, "bmc-credentials", "", "name of stored BMC credentials (default: bmc-NAME when --bmc-username is given)")
			fs.StringVar(&bmcUser, "bmc-username", "", "BMC user name, stored as the credentials")
			fs.StringVar(&bmcPassFile, "bmc-password-file", "", "file holding the BMC password (with --bmc-username)")
			fs.BoolVar(&bmcInsecure, "bmc-insecure-tls", false, "do not verify the BMC's TLS certificate (Redfish)")
			fs.BoolVar(&external, "externally-provisioned", false, "the machine already runs its OS: register it as externally provisioned")
			spec.declare(fs)
		},
		run: func(ctx context.Context, e *env, c *client, _ []string, fs *pflag.FlagSet) error {
			if name == "" {
				return usageError{"--name", "is required: the machine's name, e.g. --name node-1"}
			}
			if mac == "" {
				return usageError{"--mac", "is required: the MAC the machine boots from, e.g. --mac 52:54:00:12:34:56"}
			}
			req := api.RegisterRequest{Name: name, ExternallyProvisioned: external}
			var err error
			if req.BootMAC, err = parseMAC("--mac", mac); err != nil {
				return err
			}
			for _, m := range macs {
				pm, err := parseMAC("--other-mac", m)
				if err != nil {
					return err
				}
				req.MACs = append(req.MACs, pm)
			}
			if req.Labels, err = parseLabels(labels); err != nil {
				return err
			}
			if bmc == "" && (bmcCreds != "" || bmcUser != "" || bmcPassFile != "" || bmcInsecure) {
				return usageError{"--bmc", "is required with --bmc-credentials, --bmc-username, --bmc-password-file and --bmc-insecure-tls"}
			}
			if bmc != "" {
				if err := checkBMC(bmc); err != nil {
					return err
				}
				req.BMC = &api.BMCRequest{Address: bmc, CredentialsRef: bmcCreds, Username: bmcUser, DisableCertificateVerification: bmcInsecure}
				if (bmcUser == "") != (bmcPassFile == "") {
					return usageError{"--bmc-password-file", "and --bmc-username go together"}
				}
				if bmcPassFile != "" {
					pw, err := readPasswordFile(bmcPassFile)
					if err != nil {
						return usageError{"--bmc-password-file", err.Error()}
					}
					req.BMC.Password = pw
				}
			}
			if err := spec.apply(fs, &req.Spec); err != nil {
				return err
			}
			raw, err := c.do(ctx, http.MethodPost, "/v1/machines", nil, req)
			if err != nil {
				return err
			}
			return writeResult(e, raw, "registered")
		},
	}
}

// parseLabels parses KEY=VALUE flags.
func parseLabels(ls []string) (map[string]string, error) {
	if len(ls) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, l := range ls {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return nil, usageError{"--label", fmt.Sprintf("%q: want KEY=VALUE", l)}
		}
		out[k] = v
	}
	return out, nil
}

// writeResult prints the machine an action answered with: as bootyd sent it
// for -o json|yaml, one line for the table format.
func writeResult(e *env, raw []byte, did string) error {
	if e.output != formatTable {
		return writeRaw(e.stdout, e.output, raw)
	}
	var m api.Machine
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	_, err := fmt.Fprintf(e.stdout, "machine %s %s: state %s, generation %d\n", cell(m.Name), did, m.State, m.Generation)
	return err
}

func provisionCommand() command {
	var (
		spec       specFlags
		generation int64
		message    string
	)
	return command{
		name: "provision", args: "MACHINE", short: "write the OS image onto an available machine",
		long: "Provisions a machine: bootyd moves it to provisioning and its agent\nwrites the spec's image onto the disk the root device hints pick, then\nhands over to the installed OS; the machine ends provisioned. Spec flags\ngiven here are written over the machine's spec first (the others stay).\nFollow it with `bootyctl machines watch`.",
		example: "  bootyctl machines provision node-1\n" +
			"  bootyctl machines provision node-1 --image https://10.0.0.1:8443/files/debian.raw.zst \\\n" +
			"      --checksum sha256:9f86d0… --root-serial S3Z9NB0K123456",
		flags: func(fs *pflag.FlagSet) {
			spec.declare(fs)
			fs.Int64Var(&generation, "generation", 0, "act only if the machine is still at this generation (0: any)")
			fs.StringVar(&message, "message", "", "why, recorded in the machine's event")
		},
		run: func(ctx context.Context, e *env, c *client, args []string, fs *pflag.FlagSet) error {
			req := api.ProvisionRequest{Generation: generation, Message: message}
			if spec.changed(fs) {
				var d api.MachineDetail
				if _, err := c.get(ctx, machinePath(args[0]), nil, &d); err != nil {
					return err
				}
				if err := spec.apply(fs, &d.Spec); err != nil {
					return err
				}
				req.Spec = &d.Spec
				if req.Generation == 0 {
					req.Generation = d.Generation // the spec read is the spec changed
				}
			}
			raw, err := c.do(ctx, http.MethodPost, machinePath(args[0], "provision"), nil, req)
			if err != nil {
				return err
			}
			return writeResult(e, raw, "provisioning")
		},
		minArgs: 1, maxArgs: 1,
	}
}

func actionCommand(verb, short, long, example string) command {
	var (
		generation int64
		message    string
	)
	return command{
		name: verb, args: "MACHINE", short: short, long: long, example: example,
		flags: func(fs *pflag.FlagSet) {
			fs.Int64Var(&generation, "generation", 0, "act only if the machine is still at this generation (0: any)")
			fs.StringVar(&message, "message", "", "why, recorded in the machine's event")
		},
		run: func(ctx context.Context, e *env, c *client, args []string, _ *pflag.FlagSet) error {
			raw, err := c.do(ctx, http.MethodPost, machinePath(args[0], verb), nil, api.ActionRequest{Generation: generation, Message: message})
			if err != nil {
				return err
			}
			return writeResult(e, raw, verb+" requested")
		},
		minArgs: 1, maxArgs: 1,
	}
}

func deleteCommand() command {
	return command{
		name: "delete", args: "MACHINE", short: "forget a machine and its history",
		long:    "Deletes a machine from bootyd: its spec, state, events, logs and\nhardware report are gone. The machine itself is not touched; an agent\nstill running on it is refused from then on.",
		example: "  bootyctl machines delete node-1",
		run: func(ctx context.Context, e *env, c *client, args []string, _ *pflag.FlagSet) error {
			if _, err := c.do(ctx, http.MethodDelete, machinePath(args[0]), nil, nil); err != nil {
				return err
			}
			if e.output != formatTable {
				return writeRaw(e.stdout, e.output, []byte(fmt.Sprintf(`{"deleted":%q}`, args[0])))
			}
			_, err := fmt.Fprintf(e.stdout, "machine %s deleted\n", cell(args[0]))
			return err
		},
		minArgs: 1, maxArgs: 1,
	}
}

func eventsCommand() command {
	var after int64
	var limit int
	return command{
		name: "events", args: "MACHINE", short: "a machine's history: transitions, commands, refusals",
		long:    "Lists a machine's events, oldest first: every transition with its\nreason, every command, enrollment and refused request.",
		example: "  bootyctl machines events node-1\n  bootyctl machines events node-1 --after 120 -o json",
		flags: func(fs *pflag.FlagSet) {
			fs.Int64Var(&after, "after", 0, "only events after this event ID")
			fs.IntVar(&limit, "limit", 0, "at most this many events (0: bootyd's default)")
		},
		run: func(ctx context.Context, e *env, c *client, args []string, _ *pflag.FlagSet) error {
			if limit < 0 {
				return usageError{"--limit", fmt.Sprintf("%d: want 0 or more", limit)}
			}
			q := url.Values{}
			if after > 0 {
				q.Set("after", strconv.FormatInt(after, 10))
			}
			if limit > 0 {
				q.Set("limit", strconv.Itoa(limit))
			}
			var l api.EventList
			raw, err := c.get(ctx, machinePath(args[0], "events"), q, &l)
			if err != nil {
				return err
			}
			if e.output != formatTable {
				return writeRaw(e.stdout, e.output, raw)
			}
			rows := [][]string{}
			for _, ev := range l.Events {
				rows = append(rows, []string{strconv.FormatInt(ev.ID, 10), ev.Time.Local().Format(time.DateTime), ev.Type, ev.Reason,
					strconv.FormatInt(ev.Generation, 10), ev.Message})
			}
			return table(e.stdout, []string{"ID", "TIME", "TYPE", "REASON", "GEN", "MESSAGE"}, rows)
		},
		minArgs: 1, maxArgs: 1,
	}
}

func logsCommand() command {
	var limit int
	return command{
		name: "logs", args: "MACHINE", short: "the newest lines of a machine's agent log",
		long:    "Prints the newest lines the machine's agent logged, oldest first\n(bootyd keeps a bounded log per machine).",
		example: "  bootyctl machines logs node-1 --limit 50",
		flags: func(fs *pflag.FlagSet) {
			fs.IntVar(&limit, "limit", 200, "print at most this many lines, the newest")
		},
		run: func(ctx context.Context, e *env, c *client, args []string, _ *pflag.FlagSet) error {
			if limit <= 0 {
				return usageError{"--limit", fmt.Sprintf("%d: want 1 or more", limit)}
			}
			var l api.LogList
			raw, err := c.get(ctx, machinePath(args[0], "logs"), url.Values{"limit": {strconv.Itoa(limit)}}, &l)
			if err != nil {
				return err
			}
			if e.output != formatTable {
				return writeRaw(e.stdout, e.output, raw)
			}
			for _, ln := range l.Lines {
				if _, err := fmt.Fprintf(e.stdout, "%s %-5s %s\n", ln.Time.Local().Format("2006-01-02 15:04:05.000"), cell(ln.Level), cell(ln.Message)); err != nil {
					return err
				}
			}
			return nil
		},
		minArgs: 1, maxArgs: 1,
	}
}

func watchCommand() command {
	var (
		interval time.Duration
		frames   int
		states   []string
	)
	return command{
		name: "watch", args: "[MACHINE…]", short: "a live table of machines, a progress bar per writing machine",
		long:    "Redraws a table of machines (all, or the ones named) every --interval:\nstate, status, the step of a running install and, for each machine\nwriting its image, a progress bar with bytes written. When stdout is not\na terminal it prints a line per change instead (a new state, status or\nstep, or another tenth of the write). A fleet taller than the terminal\nshows its busy machines (writing, installing, inspecting, in error) and\ncounts the rest by state; --state narrows what is fetched. Stop it with\nCtrl-C.",
		example: "  bootyctl machines watch\n  bootyctl machines watch node-1 node-2 --interval 500ms\n  bootyctl machines watch --state provisioning | tee provision.log",
		flags: func(fs *pflag.FlagSet) {
			fs.DurationVar(&interval, "interval", time.Second, "how often to refresh (at least 100ms)")
			fs.IntVar(&frames, "count", 0, "stop after this many refreshes (0: until Ctrl-C)")
			fs.StringArrayVar(&states, "state", nil, "only machines in this state (repeatable)")
		},
		run: func(ctx context.Context, e *env, c *client, args []string, _ *pflag.FlagSet) error {
			if interval < 100*time.Millisecond {
				return usageError{"--interval", fmt.Sprintf("%s: want 100ms or more", interval)}
			}
			if frames < 0 {
				return usageError{"--count", fmt.Sprintf("%d: want 0 (until Ctrl-C) or more", frames)}
			}
			if e.output != formatTable {
				return usageError{"-o/--output", fmt.Sprintf("%q: watch draws a table; for JSON or YAML use `machines list -o %s`", e.output, e.output)}
			}
			if err := checkStates(states); err != nil {
				return err
			}
			return watch(ctx, e, c, watchOptions{names: args, states: states, interval: interval, frames: frames})
		},
		maxArgs: -1,
	}
}

type watchOptions struct {
	names, states []string
	interval      time.Duration
	frames        int
}

// watch polls the machine list and redraws until ctx ends or the frames
// are drawn. A failed poll is shown and retried at the next tick; after 10
// failures in a row watch gives up with the last error.
func watch(ctx context.Context, e *env, c *client, o watchOptions) error {
	tty := e.isTerminal(e.stdout)
	var lw lineWatcher
	if tty {
		fmt.Fprint(e.stdout, "\x1b[?25l\x1b[2J")
		defer fmt.Fprint(e.stdout, "\x1b[?25h\n")
	}
	want := map[string]bool{}
	for _, n := range o.names {
		want[n] = true
	}
	t := time.NewTicker(o.interval)
	defer t.Stop()
	failures := 0
	for frame := 1; ; frame++ {
		l, err := listAll(ctx, c, o.states)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil:
			failures++
			if failures >= 10 {
				return err
			}
			fmt.Fprintf(e.stderr, "bootyctl: machines watch: %v (retrying)\n", err)
		default:
			failures = 0
			ms := l.Machines
			if len(want) > 0 {
				ms = ms[:0]
				for _, m := range l.Machines {
					if want[m.Name] || want[m.ID] || want[m.BootMAC] {
						ms = append(ms, m)
					}
				}
			}
			sortMachines(ms)
			if tty {
				cols, rows := e.termSize(e.stdout)
				err = drawScreen(e.stdout, ms, c.base.Host, e.now(), cols, rows)
			} else {
				err = lw.update(e.stdout, ms, e.now())
			}
			if err != nil {
				return err
			}
		}
		if o.frames > 0 && frame >= o.frames {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
