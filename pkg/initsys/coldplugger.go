package initsys

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// deviceSource reports devices the kernel adds (its uevents). Coldplug
// reads it after every module load: the devices a driver creates while it
// probes are announced before the load returns, so reading the source
// then sees all of them, with no pause and no guess.
type deviceSource interface {
	// Drain returns, without blocking, the devices added since the last
	// call; lost is true when events were dropped (a full buffer) and the
	// caller must scan /sys again.
	Drain() (devs []Device, lost bool, err error)
	// Wait blocks until there may be something to drain or bound passed.
	Wait(bound time.Duration) bool
	Close() error
}

// coldplugger loads the drivers of the present devices, and of the devices
// those drivers expose, in parallel where dependencies allow; see
// System.startColdplug for the order of events.
type coldplugger struct {
	log *slog.Logger
	// scan lists the present devices; match returns the modules whose
	// aliases match a modalias; present reports whether the kernel has
	// a module; load loads one module with its dependencies (safe for
	// concurrent use) and returns what it loaded.
	scan    func() ([]Device, error)
	match   func(modalias string) []string
	present func(string) bool
	load    func(string) ([]string, error)
	// loadDeps loads what a module needs before it, not the module
	// itself; nil loads no dependencies first (see storageDepsFirst).
	loadDeps func(string) ([]string, error)
	// src reports added devices; nil scans /sys again after every load.
	src deviceSource
	// parallel bounds the loads in flight; timeout bounds the wait for
	// all of them (a module whose init hangs).
	parallel int
	timeout  time.Duration
	// listed are modules to load whatever the devices (modules-load).
	listed []string

	mu       sync.Mutex
	loaded   []string
	errs     []error
	netReady chan struct{} // closed when the network drivers are loaded
	settled  chan struct{} // closed when every driver is loaded
	stop     chan struct{}
	stopOnce sync.Once
	finished chan struct{}  // closed when run returns
	waiter   sync.WaitGroup // hotplug's wait on src

	// Owned by run.
	requested map[string]bool
	jobs      map[string]*coldplugJob
	netPaths  []string
	ifaces    []string        // network interfaces added (from the source)
	live      map[string]bool // modules whose init finished (from the source)
	pending   []Device        // devices whose drivers wait (see handle)
	done      chan coldplugResult
	sem       chan struct{}
}

type coldplugJob struct {
	module string
	net    bool
}

type coldplugResult struct {
	module string
	loaded []string
	err    error
}

func newColdplugger() *coldplugger {
	return &coldplugger{
		netReady:  make(chan struct{}),
		settled:   make(chan struct{}),
		stop:      make(chan struct{}),
		finished:  make(chan struct{}),
		requested: map[string]bool{},
		live:      map[string]bool{},
		jobs:      map[string]*coldplugJob{},
		done:      make(chan coldplugResult),
	}
}

// run loads the listed modules and the drivers of the scanned devices,
// then, after every finished load, the drivers of the devices that
// appeared (src, or a new scan). NetReady closes once no load for a
// network controller (or a device below one) is in flight; Settled once
// no load at all is. With a source, it then goes on loading drivers for
// devices that appear later (USB, hotplug) until Stop.
func (c *coldplugger) run() {
	defer close(c.finished)
	if c.parallel <= 0 {
		c.parallel = 8
	}
	c.sem = make(chan struct{}, c.parallel)
	start := time.Now()
	devs, err := c.scan()
	if err != nil {
		c.fail(fmt.Errorf("coldplug: %w", err))
	}
	c.storageDepsFirst(devs)
	for _, m := range c.listed {
		c.start(m, false)
	}
	c.handle(devs)
	c.log.Info("coldplug started", "devices", len(devs), "loading", len(c.jobs), "events", c.src != nil)
	c.checkNet()
	// With a source, devices and interfaces are handled as they come,
	// also while every load in flight is still blocked (see checkNet).
	var ready <-chan struct{}
	var ack chan<- struct{}
	if c.src != nil {
		ready, ack = c.startWaiter()
	}

	deadline := time.NewTimer(c.timeout)
	defer deadline.Stop()
	for !isClosed(c.settled) {
		if len(c.jobs) == 0 {
			c.update()
			if len(c.jobs) == 0 {
				c.markSettled(start)
				break
			}
		}
		select {
		case r := <-c.done:
			c.finish(r)
			c.update()
		case <-ready:
			c.update()
			select {
			case ack <- struct{}{}:
			case <-c.stop:
				c.markSettled(start)
				return
			}
		case <-deadline.C:
			var names []string
			for m := range c.jobs {
				names = append(names, m)
			}
			slices.Sort(names)
			c.log.Warn("coldplug: giving up waiting for module loads", "bound", c.timeout, "loading", names)
			c.markSettled(start)
		case <-c.stop:
			c.markSettled(start)
			return
		}
		c.checkNet()
	}
	if c.src == nil {
		// No hotplug after this: the loads the deadline gave up on are
		// still recorded when they end, or until Stop.
		for len(c.jobs) > 0 {
			select {
			case r := <-c.done:
				c.finish(r)
			case <-c.stop:
				return
			}
		}
		return
	}
	c.handle(nil) // what still waited for a load's init (its deadline passed)
	c.hotplug(ready, ack)
}

// depsFirstBound bounds storageDepsFirst: then the other drivers load
// whatever it still waits for.
const depsFirstBound = 5 * time.Second

// storageDepsFirst loads, before any other driver, the dependencies of the
// drivers of the PCI mass-storage controllers among devs (class 01: SATA,
// NVMe, SAS, RAID, virtio-blk), several at a time. A disk controller's
// driver probes slowly, mostly waiting (ahci: 0.3-0.4 s for six empty
// SATA ports under emulation, CPU idle), and the agent waits for every
// disk: with its dependencies in first its probe starts at once, and the
// other drivers (the network's among them) load during that wait instead
// of before it. Under TCG this started ahci's probe 0.1-0.2 s earlier.
// Bounded by depsFirstBound; failures are logged and recorded like any load's.
func (c *coldplugger) storageDepsFirst(devs []Device) {
	if c.loadDeps == nil {
		return
	}
	var mods []string
	for _, d := range devs {
		if !storageModalias(d.Modalias) {
			continue
		}
		for _, m := range c.match(d.Modalias) {
			if !slices.Contains(mods, m) && !c.present(m) {
				mods = append(mods, m)
			}
		}
	}
	if len(mods) == 0 {
		return
	}
	start := time.Now()
	results := make(chan coldplugResult, len(mods))
	for _, m := range mods {
		go func() {
			c.sem <- struct{}{}
			loaded, err := c.loadDeps(m)
			<-c.sem
			results <- coldplugResult{module: m, loaded: loaded, err: err}
		}()
	}
	bound := time.NewTimer(depsFirstBound)
	defer bound.Stop()
	for left := len(mods); left > 0; left-- {
		select {
		case r := <-results:
			c.record(r)
		case <-bound.C:
			c.log.Warn("coldplug: storage drivers' dependencies still loading; the other drivers load now", "bound", depsFirstBound, "drivers", mods)
			go func() { // recorded when they end
				for ; left > 0; left-- {
					c.record(<-results)
				}
			}()
			return
		}
	}
	c.log.Info("storage drivers' dependencies loaded", "drivers", mods, "took", time.Since(start).Round(time.Millisecond))
}

// startWaiter waits on the source in a goroutine that sends on ready each
// time there is something to drain, then waits for ack (the drain) before
// it waits again; it ends with Stop.
func (c *coldplugger) startWaiter() (<-chan struct{}, chan<- struct{}) {
	ready := make(chan struct{})
	ack := make(chan struct{})
	c.waiter.Add(1)
	go func() {
		defer c.waiter.Done()
		for {
			select {
			case <-c.stop:
				return
			default:
			}
			if !c.src.Wait(500 * time.Millisecond) {
				continue
			}
			select {
			case ready <- struct{}{}:
			case <-c.stop:
				return
			}
			select {
			case <-ack:
			case <-c.stop:
				return
			}
		}
	}()
	return ready, ack
}

// hotplug loads drivers for devices added after coldplug settled, until
// Stop, as the waiter on the source hands them over.
func (c *coldplugger) hotplug(ready <-chan struct{}, ack chan<- struct{}) {
	for {
		select {
		case <-c.stop:
			return
		case r := <-c.done:
			c.finish(r)
		case <-ready:
			devs, err := c.poll()
			if err != nil {
				c.log.Warn("hotplug", "err", err)
			}
			c.handle(devs)
			select {
			case ack <- struct{}{}:
			case <-c.stop:
				return
			}
		}
	}
}

// update handles the devices added since the last look.
func (c *coldplugger) update() {
	devs, err := c.poll()
	if err != nil {
		c.fail(err)
	}
	c.handle(devs)
}

// poll returns the devices added since the last look.
func (c *coldplugger) poll() ([]Device, error) {
	if c.src == nil {
		return c.scan()
	}
	devs, lost, err := c.src.Drain()
	if err != nil || lost {
		more, serr := c.scan()
		return append(devs, more...), errors.Join(err, serr)
	}
	return devs, nil
}

// handle starts the loads the devices need that are neither loaded nor
// asked for yet; a network device's load is marked as one NetReady waits
// for, also when a load of that module is already in flight.
//
// The drivers of CPU features (cpu: modaliases: crc32c_intel,
// crct10dif_pclmul and the like) are never loaded here: they only make
// checksums and crypto the kernel already has built in faster, which
// nothing the agent does needs, and their load is CPU time in the kernel
// taken from the boot (under emulation 0.1-0.2 s each, on the path from
// the network to the first image byte even when put off to after the
// coldplug at the lowest priority). A kernel user that needs a module it
// lacks still asks for it through modprobe.
//
// With a source, until the coldplug settles, the drivers of new devices
// wait until every load in flight finished its module's init (its module
// event): a driver loaded while another still probes would take the
// devices it finds in the order they appear, not the bus's, and the same
// two virtio disks came up as vda and vdb one boot, vdb and vda the next.
// A load's return can come much later than its init (the kernel waits for
// every background probe first), so the init is what counts.
func (c *coldplugger) handle(devs []Device) {
	for _, d := range devs {
		switch {
		case d.Interface:
			c.ifaces = append(c.ifaces, d.Path)
		case d.Module != "":
			c.live[d.Module] = true
		default:
			c.pending = append(c.pending, d)
		}
	}
	if c.src != nil && !isClosed(c.settled) && c.initializing() {
		return
	}
	devs, c.pending = c.pending, nil
	for _, d := range devs {
		if strings.HasPrefix(d.Modalias, "cpu:") {
			continue
		}
		net := c.isNet(d)
		for _, m := range c.match(d.Modalias) {
			if c.requested[m] {
				if j := c.jobs[m]; j != nil && net {
					j.net = true
				}
				continue
			}
			c.start(m, net)
		}
	}
}

// initializing reports whether a load in flight has not finished its
// module's init (no module event yet).
func (c *coldplugger) initializing() bool {
	for m := range c.jobs {
		if !c.live[m] {
			return true
		}
	}
	return false
}

func (c *coldplugger) isNet(d Device) bool {
	if netModalias(d.Modalias) {
		if !slices.Contains(c.netPaths, d.Path) {
			c.netPaths = append(c.netPaths, d.Path)
		}
		return true
	}
	for _, p := range c.netPaths {
		if strings.HasPrefix(d.Path, p+"/") {
			return true
		}
	}
	return false
}

// start starts the load of m in a goroutine.
func (c *coldplugger) start(m string, net bool) {
	c.requested[m] = true
	if c.present(m) {
		return
	}
	c.jobs[m] = &coldplugJob{module: m, net: net}
	go func() {
		select {
		case c.sem <- struct{}{}:
		case <-c.stop:
			return
		}
		loaded, err := c.load(m)
		<-c.sem
		select {
		case c.done <- coldplugResult{module: m, loaded: loaded, err: err}:
		case <-c.stop:
		}
	}()
}

func (c *coldplugger) finish(r coldplugResult) {
	delete(c.jobs, r.module)
	c.record(r)
}

// record keeps what a load loaded and its failure; safe from any goroutine.
func (c *coldplugger) record(r coldplugResult) {
	c.mu.Lock()
	c.loaded = append(c.loaded, r.loaded...)
	if r.err != nil {
		c.errs = append(c.errs, r.err)
	}
	c.mu.Unlock()
	if r.err != nil {
		c.log.Warn("coldplug: module not loaded", "module", r.module, "err", r.err)
	}
}

func (c *coldplugger) fail(err error) {
	c.log.Warn("coldplug", "err", err)
	c.mu.Lock()
	c.errs = append(c.errs, err)
	c.mu.Unlock()
}

// checkNet closes netReady when no load for a network device is in
// flight, or when every network device has its interface: a driver's
// module load returns only after every probe the kernel runs in the
// background ended, a disk controller's slow one included (the kernel
// syncs all async work at the end of every module init), but its
// interface is there, and usable, as soon as its own probe returned.
func (c *coldplugger) checkNet() {
	if isClosed(c.netReady) {
		return
	}
	var loading []string
	for _, j := range c.jobs {
		if j.net {
			loading = append(loading, j.module)
		}
	}
	// A NIC's driver still loading, or waiting to start (see handle).
	waiting := len(loading) > 0 || slices.ContainsFunc(c.pending, c.isNet)
	if waiting && !c.everyNICHasInterface() {
		return
	}
	c.mu.Lock()
	n := len(c.loaded)
	c.mu.Unlock()
	slices.Sort(loading)
	c.log.Info("network drivers loaded", "network_devices", len(c.netPaths), "modules", n,
		"interfaces", len(c.ifaces), "loads_returning", loading)
	close(c.netReady)
}

// everyNICHasInterface reports whether there are network devices and an
// interface was added below each.
func (c *coldplugger) everyNICHasInterface() bool {
	if len(c.netPaths) == 0 {
		return false
	}
	for _, p := range c.netPaths {
		if !slices.ContainsFunc(c.ifaces, func(i string) bool { return strings.HasPrefix(i, p+"/") }) {
			return false
		}
	}
	return true
}

func (c *coldplugger) markSettled(start time.Time) {
	if !isClosed(c.netReady) {
		close(c.netReady)
	}
	c.mu.Lock()
	n := len(c.loaded)
	c.mu.Unlock()
	c.log.Info("coldplug done", "modules", n, "took", time.Since(start).Round(time.Millisecond))
	close(c.settled)
}

// Stop ends hotplug and waits for run to return (once; later calls return
// at once); loads in flight finish in the kernel on their own. The source
// is closed once hotplug's wait on it ends (within its 500 ms bound), in
// the background, so a handoff does not wait for that.
func (c *coldplugger) Stop() {
	c.stopOnce.Do(func() {
		close(c.stop)
		<-c.finished
		go func() {
			c.waiter.Wait()
			if c.src != nil {
				c.src.Close()
			}
		}()
	})
}

// Loaded returns the modules loaded so far, in the order the loads ended,
// and their failures joined.
func (c *coldplugger) Loaded() ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.loaded), errors.Join(c.errs...)
}

// wait blocks until ch closes or ctx ends.
func wait(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
