package agent

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/entropy"
	"github.com/booty-dev/booty/pkg/initsys"
	"github.com/booty-dev/booty/pkg/network"
)

func TestNeedsTLS(t *testing.T) {
	for _, tt := range []struct {
		urls []string
		want string
	}{
		{nil, ""},
		{[]string{"http://10.0.2.2:8080/files/a.img", "", "::bad"}, ""},
		{[]string{"https://boot.example/files/a.img"}, "https://boot.example"},
		{[]string{"http://a", "oci://registry.example/os:1", "HTTPS://b:8443/x", "https://b:8443/y"}, "oci://registry.example, https://b:8443"},
	} {
		if got := needsTLS(tt.urls...); got != tt.want {
			t.Errorf("needsTLS(%q) = %q, want %q", tt.urls, got, tt.want)
		}
	}
}

// The pool is only waited for when something needs TLS; a pool that never
// fills fails the run within the bound with the reason, said on the console
// and in the shipped log, and the failure policy runs.
func TestRunWaitsForRandomOnlyForTLS(t *testing.T) {
	tests := []struct {
		name    string
		cmdline string
		image   string
		server  string
		ready   bool
		asked   bool
		want    initsys.Action
		ran     string
	}{
		{name: "plain http: never asked", image: "http://10.0.2.2/a.img", server: "http://10.0.2.2:8080", asked: false, want: initsys.Poweroff, ran: "provision"},
		{name: "https image, pool ready", image: "https://boot.example/a.img", ready: true, asked: true, want: initsys.Poweroff, ran: "provision"},
		{name: "https image, pool never ready", image: "https://boot.example/a.img", asked: true, want: initsys.Reboot},
		{name: "https config source, pool never ready", cmdline: "booty.server=https://boot.example", image: "http://10.0.2.2/a.img", asked: true, want: initsys.Reboot},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &fakePipeline{}
			cfg := cfgWith(func(c *config.MachineConfig) { c.Image.URL, c.Server.URL = tt.image, tt.server })
			a, out, _, sink := testAgent(t, tt.cmdline, cfg, nil, r)
			asks := 0 // the first is the start-up log of the sources
			a.Random = &entropy.Pool{
				Ready:    func() (bool, error) { asks++; return tt.ready, nil },
				Kick:     func() {},
				Interval: time.Millisecond, Timeout: 20 * time.Millisecond,
			}
			h := a.Run(context.Background())
			if h.Action != tt.want || r.ran != tt.ran {
				t.Fatalf("handoff %s, ran %q; want %s, %q\n%s", h.Action, r.ran, tt.want, tt.ran, out)
			}
			if asked := asks > 1; asked != tt.asked {
				t.Errorf("pool waited for = %v (%d asks), want %v", asked, asks, tt.asked)
			}
			if tt.asked && !tt.ready {
				console := out.String()
				if strings.Count(console, entropy.Message) != 1 || !strings.Contains(console, "not ready after waiting") {
					t.Errorf("console does not say the message once and the reason:\n%s", console)
				}
				if tt.cmdline == "" {
					shipped := ""
					for _, l := range sink.lines {
						shipped += l.Message + "\n"
					}
					if !strings.Contains(shipped, entropy.Message) {
						t.Errorf("shipped log lacks the message: %q", shipped)
					}
				}
			}
		})
	}
}

// Without a network nothing is fetched, so nothing waits for the pool.
func TestRunWithoutNetworkDoesNotWaitForRandom(t *testing.T) {
	for _, cmdline := range []string{"booty.server=https://boot.example", ""} {
		r := &fakePipeline{}
		cfg := cfgWith(func(c *config.MachineConfig) { c.Image.URL = "https://boot.example/a.img" })
		a, out, _, _ := testAgent(t, cmdline, cfg, nil, r)
		a.ConfigureNetwork = func(context.Context, network.Options) (*network.Result, error) {
			return nil, errors.New("no usable network links: links [lo]")
		}
		asks := 0
		a.Random = &entropy.Pool{Ready: func() (bool, error) { asks++; return false, nil }, Kick: func() {},
			Interval: time.Millisecond, Timeout: time.Hour}
		a.Run(context.Background())
		if asks != 1 || strings.Contains(out.String(), entropy.Message) {
			t.Errorf("cmdline %q: the pool was waited for without a network (%d asks):\n%s", cmdline, asks, out)
		}
	}
}
