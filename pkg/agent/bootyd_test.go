package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/inventory"
	"github.com/booty-dev/booty/pkg/network"
	"github.com/booty-dev/booty/pkg/provider"
	"github.com/booty-dev/booty/pkg/server"
)

const (
	testOperatorToken = "operator-token-for-agent-tests"
	testMAC           = "52:54:00:12:34:56"
)

// bootyd is the real bootyd (pkg/server over a temp SQLite BMDB) behind
// httptest. While down is set, every request's connection is closed
// unanswered: the agent's network is gone.
type bootyd struct {
	t     *testing.T
	url   string
	down  atomic.Bool
	downs atomic.Int64 // requests refused while down
}

func startBootyd(t *testing.T) *bootyd {
	t.Helper()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	db, err := bmdb.Open(context.Background(), filepath.Join(t.TempDir(), "bmdb.db"), bmdb.WithLogger(log))
	if err != nil {
		t.Fatalf("open BMDB: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	b := &bootyd{t: t}
	ts := httptest.NewUnstartedServer(nil)
	b.url = "http://" + ts.Listener.Addr().String()
	srv, err := server.New(server.Options{DB: db, OperatorTokens: []string{testOperatorToken}, PublicURL: b.url,
		AutoDiscover: true, Output: io.Discard, Logger: log})
	if err != nil {
		t.Fatalf("new bootyd: %v", err)
	}
	h := srv.Handler()
	ts.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b.down.Load() {
			b.downs.Add(1)
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
			}
			return
		}
		h.ServeHTTP(w, r)
	})
	ts.Start()
	t.Cleanup(func() {
		ts.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Close(ctx) // the parked polls and heartbeats, before the database closes
	})
	return b
}

// get fetches an operator route into out.
func (b *bootyd) get(path string, out any) error {
	req, _ := http.NewRequest(http.MethodGet, b.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+testOperatorToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// until polls cond every 50 ms for at most a generous bound.
func until(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		ok, err := cond()
		if ok {
			return
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within 60s (last error: %v)", what, last)
}

// fakeHost writes the smallest tree inventory.Collector reads: memory,
// one CPU and the NIC eth0 with carrier.
func fakeHost(t *testing.T) string {
	root := t.TempDir()
	files := map[string]string{
		"proc/meminfo":                               "MemTotal:        2097152 kB\n",
		"proc/cpuinfo":                               "processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: fpu sse2\n\n",
		"sys/class/net/eth0/address":                 testMAC + "\n",
		"sys/class/net/eth0/carrier":                 "1\n",
		"sys/devices/pci0000:00/0000:00:03.0/vendor": "0x1af4\n",
	}
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"sys/block", "sys/class/block", "sys/bus/pci/devices", "dev"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../../../devices/pci0000:00/0000:00:03.0", filepath.Join(root, "sys/class/net/eth0/device")); err != nil {
		t.Fatal(err)
	}
	return root
}

// testFleetAgent is an Agent wired as New wires it for bootyd (its chain
// options, outbox and LLDP state), over a fake host, whose LLDP listener
// hears what the test sends on its channel.
func testFleetAgent(t *testing.T, frames <-chan inventory.Neighbor) *Agent {
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	a := &Agent{Log: log, Cmdline: provider.ParseCmdline("")}
	inv := &inventory.Collector{Root: fakeHost(t), Arch: "x86_64", Neighbors: a.neighbours.known, Log: log}
	a.outbox = newOutbox(log, &a.neighbours, inv.Collect)
	a.ListenLLDP = func(ctx context.Context, links []string, wait time.Duration, heard func(string, inventory.Neighbor)) map[string]inventory.Neighbor {
		got := map[string]inventory.Neighbor{}
		for {
			select {
			case <-ctx.Done():
				return got
			case n := <-frames:
				got[links[0]] = n
				heard(links[0], n)
			}
		}
	}
	a.ConfigureNetwork = func(context.Context, network.Options) (*network.Result, error) {
		return &network.Result{Method: network.MethodDHCP, Interface: "eth0", MAC: testMAC, Address: netip.MustParsePrefix("10.0.2.15/24")}, nil
	}
	return a
}

// enroll runs the agent's bootyd provider (built by the chain with the
// agent's options) until the test ends: it enrolls and waits for a command.
func enroll(t *testing.T, ctx context.Context, a *Agent, b *bootyd) {
	ps := provider.ProvidersFromCmdline(provider.ParseCmdline("booty.server="+b.url+" booty.insecure-http=1"),
		append(a.chainOptions(), provider.WithMACs(func() ([]string, error) { return []string{testMAC}, nil }),
			provider.WithBackoff(provider.Backoff{Attempts: 2, Initial: 50 * time.Millisecond, Max: 100 * time.Millisecond}))...)
	sp, ok := ps[len(ps)-1].(*provider.ServerProvider)
	if !ok {
		t.Fatalf("the chain's last provider is %T, want bootyd's", ps[len(ps)-1])
	}
	done := make(chan error, 1)
	go func() { _, err := sp.Load(ctx); done <- err }()
	t.Cleanup(func() {
		sp.Close()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("bootyd provider: %v", err)
		}
	})
}

// The agent enrolls at once, without waiting for LLDP; a neighbour heard
// afterwards reaches bootyd's stored hardware report in a new report.
func TestLLDPNeighbourReachesBootyd(t *testing.T) {
	b := startBootyd(t)
	frames := make(chan inventory.Neighbor)
	a := testFleetAgent(t, frames)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.outbox.run(ctx)
	if _, err := a.network(ctx, nil); err != nil { // starts the LLDP listen
		t.Fatal(err)
	}
	enroll(t, ctx, a, b)

	var m api.MachineDetail
	until(t, "enrollment with the hardware report", func() (bool, error) {
		err := b.get("/v1/machines/"+testMAC, &m)
		return err == nil && m.Hardware != nil, err
	})
	if len(m.Hardware.NIC) != 1 || m.Hardware.NIC[0].Name != "eth0" || m.Hardware.NIC[0].LLDP != nil {
		t.Fatalf("enrolled nics %+v, want eth0 without lldp (none heard yet)", m.Hardware.NIC)
	}
	enrolledAt := m.HardwareAt

	frames <- inventory.Neighbor{ChassisID: "aa:bb:cc:00:11:22", PortID: "Ethernet1/7", SystemName: "leaf-12", PVID: 100}
	want := api.LLDP{SwitchID: "aa:bb:cc:00:11:22", PortID: "Ethernet1/7", SwitchSystemName: "leaf-12"}
	until(t, "the hardware report with eth0's lldp neighbour", func() (bool, error) {
		var m api.MachineDetail
		err := b.get("/v1/machines/"+testMAC, &m)
		if err != nil || m.Hardware == nil || len(m.Hardware.NIC) != 1 {
			return false, err
		}
		n := m.Hardware.NIC[0]
		return n.LLDP != nil && *n.LLDP == want && n.VLANID == 100 && !m.HardwareAt.Before(enrolledAt), nil
	})
}

// A lost lease reaches bootyd's stored logs, though bootyd is unreachable
// at first (the address was removed): the outbox keeps the line and
// delivers it once the network is back.
func TestLeaseLossReachesBootyd(t *testing.T) {
	b := startBootyd(t)
	a := testFleetAgent(t, nil)
	var opts network.Options
	a.ConfigureNetwork = func(_ context.Context, o network.Options) (*network.Result, error) {
		opts = o
		return &network.Result{Method: network.MethodDHCP, Interface: "eth0", MAC: testMAC, Address: netip.MustParsePrefix("10.0.2.15/24")}, nil
	}
	a.ListenLLDP = nil
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.outbox.run(ctx)
	if _, err := a.network(ctx, nil); err != nil {
		t.Fatal(err)
	}
	enroll(t, ctx, a, b)
	until(t, "enrollment", func() (bool, error) {
		var m api.MachineDetail
		err := b.get("/v1/machines/"+testMAC, &m)
		return err == nil && m.Agent != nil, err
	})

	b.down.Store(true)
	opts.OnLeaseLost("eth0", fmt.Errorf("%w on eth0: dhcp address 10.0.2.15/24 removed: no answer", network.ErrLeaseLost))
	until(t, "a refused delivery", func() (bool, error) { return b.downs.Load() >= 2, nil })
	b.down.Store(false)

	until(t, "the lost lease in bootyd's logs", func() (bool, error) {
		var l api.LogList
		err := b.get("/v1/machines/"+testMAC+"/logs", &l)
		for _, line := range l.Lines {
			if line.Level == "ERROR" && strings.Contains(line.Message, "network lost on eth0") &&
				strings.Contains(line.Message, "10.0.2.15/24 removed") {
				return true, nil
			}
		}
		return false, err
	})
}
