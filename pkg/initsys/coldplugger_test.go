package initsys

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeKernel plays the devices of a QEMU q35 machine: loading a driver
// makes the devices it exposes appear (as uevents on the source, or in
// the next scan), and chosen loads block until released.
type fakeKernel struct {
	mu       sync.Mutex
	devices  []Device            // what a scan sees
	events   []Device            // not drained yet
	exposes  map[string][]Device // module -> devices its probe creates
	block    map[string]chan struct{}
	deps     map[string][]string // module -> what it needs first
	after    map[string]string   // module -> a module whose load its probe waits for
	early    map[string]bool     // module -> its init ends (devices, module event) before its load's held return
	probe    map[string]func()   // module -> runs in its init, before the devices of exposes appear
	starts   []string            // "start m" and "end m", in order
	loaded   []string
	lost     bool // the next Drain reports lost events
	wake     chan struct{}
	useEvent bool
}

// scan lists what ScanDevices would: devices with a modalias, no
// interfaces.
func (k *fakeKernel) scan() ([]Device, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(k.devices), func(d Device) bool { return d.Interface }), nil
}

// load loads m after its dependencies, as kmod.Loader.Load does.
func (k *fakeKernel) load(m string) ([]string, error) {
	out, _ := k.loadDeps(m)
	if !k.present(m) {
		k.loadOne(m)
		out = append(out, m)
	}
	return out, nil
}

// loadDeps loads m's dependencies, not m.
func (k *fakeKernel) loadDeps(m string) ([]string, error) {
	var out []string
	for _, d := range k.deps[m] {
		if !k.present(d) {
			k.loadOne(d)
			out = append(out, d)
		}
	}
	return out, nil
}

func (k *fakeKernel) loadOne(m string) {
	if f := k.probe[m]; f != nil {
		f()
	}
	k.mu.Lock()
	k.starts = append(k.starts, "start "+m)
	early := k.early[m]
	if early {
		// The init ran; the load has yet to return (the kernel syncs
		// every background probe at the end of a module's init).
		k.initDone(m)
		select {
		case k.wake <- struct{}{}:
		default:
		}
	}
	k.mu.Unlock()
	if ch := k.block[m]; ch != nil {
		<-ch
	}
	if w := k.after[m]; w != "" {
		for end := time.Now().Add(10 * time.Second); !k.present(w) && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.starts = append(k.starts, "end "+m)
	k.loaded = append(k.loaded, m)
	if !early {
		k.initDone(m)
	}
}

// initDone announces the devices m's init made, then m's module event, as
// the kernel does; with k.mu held.
func (k *fakeKernel) initDone(m string) {
	k.devices = append(k.devices, k.exposes[m]...)
	k.events = append(k.events, k.exposes[m]...)
	k.events = append(k.events, Device{Module: m})
	k.starts = append(k.starts, "init done "+m)
}

func (k *fakeKernel) present(m string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Contains(k.loaded, m)
}

// plug adds a device later (USB enumeration, hotplug).
func (k *fakeKernel) plug(d Device) {
	k.mu.Lock()
	k.devices = append(k.devices, d)
	k.events = append(k.events, d)
	k.mu.Unlock()
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

func (k *fakeKernel) Drain() ([]Device, bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out, lost := k.events, k.lost
	k.events, k.lost = nil, false
	return out, lost, nil
}

func (k *fakeKernel) Wait(bound time.Duration) bool {
	select {
	case <-k.wake:
		return true
	case <-time.After(bound):
		return false
	}
}

func (k *fakeKernel) Close() error { return nil }

// match maps modaliases to drivers the way modules.alias does.
func match(a string) []string {
	switch a {
	case "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00", // virtio net
		"pci:v00001AF4d00001001sv00001AF4sd00000002bc01sc00i00": // virtio blk
		return []string{"virtio_pci"}
	case "pci:v00008086d00002922sv00001AF4sd00001100bc01sc06i01":
		return []string{"ahci"}
	case "virtio:d00000001v00001AF4":
		return []string{"virtio_net"}
	case "virtio:d00000002v00001AF4":
		return []string{"virtio_blk"}
	case "usb:v0BDAp8153d3000dc00dsc00dp00icFFiscFFip00in00":
		return []string{"r8152"}
	case "cpu:type:x86,ven0000fam0006mod003F:feature:,0000,0094":
		return []string{"crc32c_intel", "crct10dif_pclmul"}
	}
	return nil
}

func q35(useEvents bool) *fakeKernel {
	return &fakeKernel{
		devices: []Device{
			{Path: "/devices/pci0000:00/0000:00:02.0", Modalias: "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00"},
			{Path: "/devices/pci0000:00/0000:00:03.0", Modalias: "pci:v00001AF4d00001001sv00001AF4sd00000002bc01sc00i00"},
			{Path: "/devices/pci0000:00/0000:00:1f.2", Modalias: "pci:v00008086d00002922sv00001AF4sd00001100bc01sc06i01"},
		},
		exposes: map[string][]Device{
			"virtio_pci": {
				{Path: "/devices/pci0000:00/0000:00:02.0/virtio0", Modalias: "virtio:d00000001v00001AF4"},
				{Path: "/devices/pci0000:00/0000:00:03.0/virtio1", Modalias: "virtio:d00000002v00001AF4"},
			},
		},
		block:    map[string]chan struct{}{},
		wake:     make(chan struct{}, 1),
		useEvent: useEvents,
	}
}

func newTestColdplugger(t *testing.T, k *fakeKernel) *coldplugger {
	c := newColdplugger()
	c.log = slog.New(slog.NewTextHandler(t.Output(), nil))
	c.scan, c.match, c.present, c.load = k.scan, match, k.present, k.load
	c.timeout = time.Minute
	if k.useEvent {
		c.src = k
	}
	t.Cleanup(c.Stop)
	return c
}

func waitClosed(t *testing.T, what string, ch chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s not reached in 30s", what)
	}
}

// The network drivers are ready while the storage driver (ahci, whose
// probe waits for six empty SATA links) still loads; coldplug settles
// only once ahci ended too; the virtio devices virtio_pci exposed got
// their drivers, from the events or from a new scan.
func TestColdplugNetworkFirst(t *testing.T) {
	for _, events := range []bool{true, false} {
		name := "rescan"
		if events {
			name = "uevents"
		}
		t.Run(name, func(t *testing.T) {
			k := q35(events)
			release := make(chan struct{})
			k.block["ahci"] = release
			k.early = map[string]bool{"ahci": true} // its SATA links are probed in the background
			c := newTestColdplugger(t, k)
			go c.run()

			waitClosed(t, "network drivers", c.netReady)
			if !k.present("virtio_net") {
				t.Errorf("network ready before virtio_net loaded: %v", k.loaded)
			}
			if isClosed(c.settled) {
				t.Error("coldplug settled while ahci was still loading")
			}
			close(release)
			waitClosed(t, "coldplug", c.settled)
			got, err := c.Loaded()
			if err != nil {
				t.Error(err)
			}
			slices.Sort(got)
			if want := []string{"ahci", "virtio_blk", "virtio_net", "virtio_pci"}; !slices.Equal(got, want) {
				t.Errorf("loaded %v, want %v", got, want)
			}
		})
	}
}

// A storage driver still loading when the network's are in does not hold
// the network back, but a shared bus driver (virtio_pci, needed by the
// disk first) does until the network device below it has its driver.
// The dependencies of the disk controllers' drivers load before anything
// else; the controller's own probe (which mostly waits) then runs while
// the other drivers, the network's first, load: ahci's probe here ends
// only once virtio_net is in.
func TestColdplugStorageDepsFirst(t *testing.T) {
	k := q35(true)
	k.deps = map[string][]string{
		"ahci":       {"scsi_mod", "libata", "libahci"},
		"virtio_pci": {"virtio", "virtio_ring"},
		"virtio_net": {"failover", "net_failover"},
		"virtio_blk": {"virtio"},
	}
	k.after = map[string]string{"ahci": "virtio_net"}
	k.early = map[string]bool{"ahci": true} // its SATA links are probed in the background
	c := newTestColdplugger(t, k)
	c.loadDeps = k.loadDeps
	go c.run()
	waitClosed(t, "coldplug", c.settled)

	k.mu.Lock()
	starts := slices.Clone(k.starts)
	k.mu.Unlock()
	at := func(e string) int {
		i := slices.Index(starts, e)
		if i < 0 {
			t.Fatalf("%q not in %v", e, starts)
		}
		return i
	}
	lastDep := 0
	for _, d := range []string{"scsi_mod", "libata", "libahci", "virtio", "virtio_ring"} {
		lastDep = max(lastDep, at("end "+d))
	}
	for _, m := range []string{"ahci", "virtio_pci", "virtio_net", "failover", "net_failover", "virtio_blk"} {
		if at("start "+m) < lastDep {
			t.Errorf("%s started before the disk controllers' dependencies were in: %v", m, starts)
		}
	}
	if at("end virtio_net") > at("end ahci") {
		t.Errorf("virtio_net loaded after ahci's probe ended: %v", starts)
	}
	got, err := c.Loaded()
	if err != nil {
		t.Error(err)
	}
	slices.Sort(got)
	want := []string{"ahci", "failover", "libahci", "libata", "net_failover", "scsi_mod", "virtio", "virtio_blk", "virtio_net", "virtio_pci", "virtio_ring"}
	if !slices.Equal(got, want) {
		t.Errorf("loaded %v, want %v", got, want)
	}
}

// A NIC's interface, announced while its driver's load has yet to return
// (held up by a disk controller's background probe), makes the network
// ready; the coldplug settles only once the load returned. Without events
// (scans) the load's return decides, as before.
func TestColdplugNetworkReadyOnInterface(t *testing.T) {
	// start runs a coldplug whose virtio_net probe has made eth0 but whose
	// load is held until the returned channel closes.
	start := func(events bool) (*fakeKernel, *coldplugger, chan struct{}) {
		k := q35(events)
		k.exposes["virtio_net"] = []Device{{Path: "/devices/pci0000:00/0000:00:02.0/virtio0/net/eth0", Interface: true}}
		k.early = map[string]bool{"virtio_net": true}
		release := make(chan struct{})
		k.block["virtio_net"] = release
		c := newTestColdplugger(t, k)
		go c.run()
		return k, c, release
	}
	k, c, release := start(true)
	waitClosed(t, "network ready", c.netReady)
	if k.present("virtio_net") || isClosed(c.settled) {
		t.Errorf("virtio_net returned %v, settled %v: want the network ready while its load is held", k.present("virtio_net"), isClosed(c.settled))
	}
	close(release)
	waitClosed(t, "coldplug", c.settled)

	_, c, release = start(false)
	time.Sleep(200 * time.Millisecond)
	if isClosed(c.netReady) {
		t.Error("without events: network ready before virtio_net's load returned")
	}
	close(release)
	waitClosed(t, "network ready", c.netReady)
	waitClosed(t, "coldplug", c.settled)
}

// A driver for devices that appear while another driver's init still
// probes starts only once that init is done: virtio_blk then finds both
// virtio disks on the bus and names them in bus order (vda, vdb), not in
// the order they appeared around its own load.
func TestColdplugWaitsForInitsBeforeDrivers(t *testing.T) {
	k := q35(true)
	disk1 := Device{Path: "/devices/pci0000:00/0000:00:03.0/virtio1", Modalias: "virtio:d00000002v00001AF4"}
	k.exposes["virtio_pci"] = []Device{
		{Path: "/devices/pci0000:00/0000:00:02.0/virtio0", Modalias: "virtio:d00000001v00001AF4"},
		{Path: "/devices/pci0000:00/0000:00:04.0/virtio2", Modalias: "virtio:d00000002v00001AF4"},
	}
	k.probe = map[string]func(){"virtio_pci": func() {
		// The first disk appears; the init goes on probing the next
		// PCI functions for a while.
		k.plug(disk1)
		time.Sleep(300 * time.Millisecond)
	}}
	k.early = map[string]bool{"ahci": true}
	c := newTestColdplugger(t, k)
	go c.run()
	waitClosed(t, "coldplug", c.settled)
	k.mu.Lock()
	starts := slices.Clone(k.starts)
	k.mu.Unlock()
	blk, done := slices.Index(starts, "start virtio_blk"), slices.Index(starts, "init done virtio_pci")
	if blk < 0 || done < 0 || blk < done {
		t.Errorf("virtio_blk started before virtio_pci's init was done: %v", starts)
	}
}

func TestStorageModalias(t *testing.T) {
	for a, want := range map[string]bool{
		"pci:v00008086d00002922sv00001AF4sd00001100bc01sc06i01": true,  // ahci
		"pci:v0000144Dd0000A808sv0000144Dsd0000A801bc01sc08i02": true,  // nvme
		"pci:v00001AF4d00001001sv00001AF4sd00000002bc01sc00i00": true,  // virtio-blk
		"pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00": false, // virtio-net
		"virtio:d00000002v00001AF4":                             false,
		"usb:v0781p5581d0100dc00dsc00dp00ic08isc06ip50in00":     false,
	} {
		if got := storageModalias(a); got != want {
			t.Errorf("storageModalias(%q) = %v, want %v", a, got, want)
		}
	}
}

func TestColdplugSharedBusDriver(t *testing.T) {
	k := q35(true)
	release := make(chan struct{})
	k.block["virtio_pci"] = release
	c := newTestColdplugger(t, k)
	go c.run()
	time.Sleep(50 * time.Millisecond)
	if isClosed(c.netReady) {
		t.Fatal("network ready while virtio_pci, the NIC's bus driver, was loading")
	}
	close(release)
	waitClosed(t, "network drivers", c.netReady)
	if !k.present("virtio_net") {
		t.Errorf("network ready before virtio_net loaded: %v", k.loaded)
	}
}

// Lost events (a full socket buffer) make coldplug scan /sys, so no device
// goes without its driver.
func TestColdplugLostEvents(t *testing.T) {
	k := q35(true)
	k.exposes["virtio_pci"] = append(k.exposes["virtio_pci"], Device{Path: "/devices/x", Modalias: "virtio:d00000002v00001AF4"})
	c := newTestColdplugger(t, k)
	k.mu.Lock()
	k.lost = true
	k.events = nil
	k.mu.Unlock()
	// Drop virtio_pci's events as they come: only a scan finds its devices.
	c.load = func(m string) ([]string, error) {
		r, err := k.load(m)
		k.mu.Lock()
		if m == "virtio_pci" {
			k.events, k.lost = nil, true
		}
		k.mu.Unlock()
		return r, err
	}
	go c.run()
	waitClosed(t, "coldplug", c.settled)
	for _, m := range []string{"virtio_net", "virtio_blk"} {
		if !k.present(m) {
			t.Errorf("%s not loaded after lost events: %v", m, k.loaded)
		}
	}
}

// A device that comes after coldplug settled (a USB NIC enumerated late)
// still gets its driver, until Stop.
func TestColdplugHotplug(t *testing.T) {
	k := q35(true)
	c := newTestColdplugger(t, k)
	go c.run()
	waitClosed(t, "coldplug", c.settled)
	k.plug(Device{Path: "/devices/pci0000:00/0000:00:1d.0/usb1/1-1/1-1:1.0", Modalias: "usb:v0BDAp8153d3000dc00dsc00dp00icFFiscFFip00in00"})
	deadline := time.Now().Add(30 * time.Second)
	for !k.present("r8152") {
		if time.Now().After(deadline) {
			t.Fatalf("late USB NIC got no driver: %v", k.loaded)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.Stop()
	select {
	case <-c.finished:
	default:
		t.Error("Stop returned before coldplug ended")
	}
}

// A load that never ends (a driver waiting for firmware) is given up on
// after the bound: coldplug settles and says so, the boot goes on.
func TestColdplugTimeout(t *testing.T) {
	k := q35(true)
	k.block["ahci"] = make(chan struct{}) // never released
	c := newTestColdplugger(t, k)
	c.timeout = 100 * time.Millisecond
	go c.run()
	waitClosed(t, "coldplug", c.settled)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := wait(ctx, c.netReady); err != nil {
		t.Error("network not ready after the bound")
	}
}

// The CPU feature drivers are not loaded, with or without events; the
// other devices' drivers are.
func TestColdplugSkipsCPUFeatures(t *testing.T) {
	for _, events := range []bool{true, false} {
		k := q35(events)
		k.devices = append(k.devices, Device{Path: "/devices/system/cpu/cpu0", Modalias: "cpu:type:x86,ven0000fam0006mod003F:feature:,0000,0094"})
		c := newTestColdplugger(t, k)
		go c.run()
		waitClosed(t, "coldplug", c.settled)
		c.Stop()
		if !k.present("ahci") {
			t.Errorf("events=%v: ahci not loaded: %v", events, k.loaded)
		}
		if k.present("crc32c_intel") || k.present("crct10dif_pclmul") {
			t.Errorf("events=%v: CPU feature drivers loaded: %v", events, k.loaded)
		}
	}
}

func TestNetModalias(t *testing.T) {
	for a, want := range map[string]bool{
		"pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00": true,
		"pci:v00008086d000010D3sv00008086sd00000000bc02sc00i00": true,
		"pci:v00001AF4d00001001sv00001AF4sd00000002bc01sc00i00": false,
		"virtio:d00000001v00001AF4":                             true,
		"virtio:d00000002v00001AF4":                             false,
		"usb:v0BDAp8153d3000dc00dsc00dp00ic02isc06ip00in00":     true,
		"usb:v0781p5581d0100dc00dsc00dp00ic08isc06ip50in00":     false,
		"platform:serial8250":                                   false,
	} {
		if got := netModalias(a); got != want {
			t.Errorf("netModalias(%s) = %v, want %v", a, got, want)
		}
	}
}
