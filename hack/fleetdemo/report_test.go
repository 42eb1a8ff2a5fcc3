package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/bmc"
)

var t0 = time.Date(2026, 12, 3, 9, 30, 0, 0, time.Local)

// events as bootyd's BMDB records them: a registration, transitions with
// their "from → to" messages, and others that are not transitions.
func demoEvents() []api.Event {
	ev := func(id int64, after time.Duration, reason, msg string) api.Event {
		return api.Event{ID: id, Time: t0.Add(after), Type: "Normal", Reason: reason, Message: msg}
	}
	return []api.Event{
		ev(1, 0, "Registered", "registered through the operator API"),
		ev(2, 12*time.Second, "InspectionStarted", "registering → inspecting, command inspect at generation 2"),
		ev(3, 13*time.Second, "AgentBootRequested", "boot device PXE (once), powered on, for command inspect at generation 2"),
		ev(4, 2*time.Minute, "Inspected", "inspecting → available"),
		ev(5, 2*time.Minute+time.Second, "ProvisioningStarted", "available → provisioning, command provision at generation 4"),
		ev(6, 6*time.Minute, "Provisioned", "provisioning → provisioned: the agent succeeded"),
	}
}

func TestTimeline(t *testing.T) {
	now := t0.Add(7 * time.Minute)
	got := timeline(t0, demoEvents(), now)
	want := []stateSpan{
		{State: "registering", At: t0, Took: 12 * time.Second},
		{State: "inspecting", At: t0.Add(12 * time.Second), Took: 108 * time.Second},
		{State: "available", At: t0.Add(2 * time.Minute), Took: time.Second},
		{State: "provisioning", At: t0.Add(2*time.Minute + time.Second), Took: 3*time.Minute + 59*time.Second},
		{State: "provisioned", At: t0.Add(6 * time.Minute), Took: time.Minute, Current: true},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("timeline\n got %v\nwant %v", got, want)
	}
	if got := timeline(t0, demoEvents()[:1], now); len(got) != 0 {
		t.Fatalf("no transitions: %v", got)
	}
	// A state with spaces, and an error after the to-state.
	got = timeline(t0, []api.Event{{Time: t0.Add(time.Second), Message: "provisioned → powering off before delete"},
		{Time: t0.Add(2 * time.Second), Message: "inspecting → inspecting, inspection error: bmc: power on failed"}}, now)
	if len(got) != 3 || got[1].State != "powering off before delete" || got[2].State != "inspecting" {
		t.Fatalf("got %v", got)
	}
}

// The console watch finds the installed OS's proof among console lines
// arriving in pieces; a proof after the agent's kexec is kept apart, the
// first after a firmware boot (OVMF's or iPXE's lines since the agent)
// ends the wait, with the boot device of its power on; proof lines are
// printed (and, when asked, every line).
func TestConsoleWatch(t *testing.T) {
	var out bytes.Buffer
	dev := bmc.DevicePXE
	c := newConsoleWatch("node-1", &out, false, func() bmc.Device { return dev })
	write := func(s string) {
		if n, err := c.Write([]byte(s)); err != nil || n != len(s) {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	// The agent provisions, then kexecs into the installed OS.
	write("iPXE initialising devices...\r\n")
	write("time=... level=INFO msg=\"booty agent starting\" component=initsys\n")
	write("BOOTY-PROOF hostname=node-1\nBOOTY-PROOF rootdev=/dev/vda2\nBOOTY-PROOF done\n")
	select {
	case <-c.Done():
		t.Fatal("done after the kexec's proof")
	default:
	}
	if k := c.KexecProof(); strings.Join(k, "|") != "hostname=node-1|rootdev=/dev/vda2|done" {
		t.Fatalf("kexec proof %q", k)
	}
	// Powered on again from the disk: the firmware prints, then the OS.
	dev = bmc.DevicePXE
	write("BdsDxe: loading Boot0008 \"debian\" from HD(1,GPT,...)\n")
	write("[  OK  ] Started booty-proof.service\nBOOTY-PROOF hostname=node-1\nBOOTY-PROOF kernel=6.1.0")
	select {
	case <-c.Done():
		t.Fatal("done before the proof ended")
	default:
	}
	if p, _ := c.Proof(); p != nil {
		t.Fatalf("proof before done: %q", p)
	}
	dev = bmc.DeviceDisk
	write("-13-amd64\n[   5.1] systemd[1]: BOOTY-PROOF rootdev=/dev/vda2\nBOOTY-PROOF done\n")
	select {
	case <-c.Done():
	default:
		t.Fatal("not done after BOOTY-PROOF done")
	}
	p, d := c.Proof()
	if strings.Join(p, "|") != "hostname=node-1|kernel=6.1.0-13-amd64|rootdev=/dev/vda2|done" || d != bmc.DeviceDisk {
		t.Fatalf("proof %q after a %s boot", p, d)
	}
	// A second boot's proof does not replace the first.
	write("BOOTY-PROOF hostname=again\nBOOTY-PROOF done\n")
	if p, _ := c.Proof(); p[0] != "hostname=node-1" {
		t.Fatalf("proof replaced: %q", p)
	}
	if strings.Contains(out.String(), "iPXE") || !strings.Contains(out.String(), "node-1 | BOOTY-PROOF rootdev=/dev/vda2\n") {
		t.Fatalf("output:\n%s", out.String())
	}

	out.Reset()
	all := newConsoleWatch("node-2", &out, true, nil)
	all.Write([]byte("iPXE initialising devices...\n"))
	if out.String() != "node-2 | iPXE initialising devices...\n" {
		t.Fatalf("with all: %q", out.String())
	}
}

func TestSummary(t *testing.T) {
	now := t0.Add(7 * time.Minute)
	booted := machineReport{Name: "node-1", BMC: "ipmi://127.0.0.1:623", MAC: "52:54:00:de:00:01",
		Machine: &api.Machine{Name: "node-1", State: "provisioned", CreatedAt: t0}, Events: demoEvents(),
		Boots: []bmc.Device{bmc.DevicePXE, bmc.DevicePXE, bmc.DeviceDisk},
		Proof: []string{"hostname=node-1", "kernel=6.1.0-13-amd64", "rootdev=/dev/vda2", "efi-current=Boot0004", "done"}, ProofBoot: bmc.DeviceDisk,
		KexecProof: []string{"hostname=node-1", "done"}}
	stuck := machineReport{Name: "node-2", BMC: "redfish://127.0.0.1:8443/redfish/v1/Systems/1", MAC: "52:54:00:de:00:02",
		Machine: &api.Machine{Name: "node-2", State: "inspecting", StateChangedAt: t0.Add(time.Minute), CreatedAt: t0,
			Error: &api.MachineError{Type: "inspection error", Message: "power on node-2: the power did not change"}},
		Console: "/w/node-2/console.log"}

	s := summary{Machines: []machineReport{booted, booted}, Took: 7 * time.Minute, Now: now}
	if !s.ok() {
		t.Fatal("two booted machines: not ok")
	}
	var b bytes.Buffer
	s.write(&b)
	for _, want := range []string{
		"summary after 7m",
		"node-1  ipmi://127.0.0.1:623  boot MAC 52:54:00:de:00:01",
		"states   " + t0.Format("15:04:05") + "  registering   12s",
		t0.Add(6*time.Minute).Format("15:04:05") + "  provisioned   1m0s so far",
		"boots    pxe, pxe, disk",
		"kexec    the agent kexec'd into the installed OS, which printed its proof (2 lines)",
		"proof    the firmware booted the installed OS from the disk (BMC boot device disk); it printed 5 BOOTY-PROOF lines, ending in done:",
		"rootdev=/dev/vda2", "efi-current=Boot0004",
		"result   OK: booted its installed OS from its disk",
		"result     OK: both machines booted their installed OS",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}

	s = summary{Machines: []machineReport{booted, stuck}, Took: 7 * time.Minute, Now: now, TimedOut: true, Timeout: 7 * time.Minute}
	if s.ok() {
		t.Fatal("a machine that did not boot: ok")
	}
	b.Reset()
	s.write(&b)
	for _, want := range []string{
		"states   " + t0.Add(time.Minute).Format("15:04:05") + "  inspecting  6m0s so far",
		"error    inspection error: power on node-2: the power did not change",
		"boots    none",
		"proof    none: the firmware booted no installed OS that printed a complete BOOTY-PROOF (console: /w/node-2/console.log)",
		"result   NOT BOOTED: inspecting",
		"result     TIMEOUT: not every machine booted its installed OS within 7m",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}

	s = summary{Machines: []machineReport{booted, booted}, Err: errors.New("bootyd exited")}
	b.Reset()
	s.write(&b)
	if s.ok() || !strings.Contains(b.String(), "result     FAILED: bootyd exited") {
		t.Fatalf("a demo error: ok=%v\n%s", s.ok(), b.String())
	}
}
