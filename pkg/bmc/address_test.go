package bmc

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestParseAddress(t *testing.T) {
	tests := []struct {
		in       string
		want     Address // Raw is filled from in
		hostPort string
		baseURL  string
		errHas   string // non-empty: must fail, naming this
	}{
		{in: "ipmi://192.0.2.10", want: Address{Scheme: "ipmi", Protocol: ProtocolIPMI, Host: "192.0.2.10"}, hostPort: "192.0.2.10:623"},
		{in: "ipmi://bmc.example:6230", want: Address{Scheme: "ipmi", Protocol: ProtocolIPMI, Host: "bmc.example", Port: 6230}, hostPort: "bmc.example:6230"},
		{in: "192.0.2.10:6231", want: Address{Scheme: "ipmi", Protocol: ProtocolIPMI, Host: "192.0.2.10", Port: 6231}, hostPort: "192.0.2.10:6231"},
		{in: "ipmi://[2001:db8::1]:623", want: Address{Scheme: "ipmi", Protocol: ProtocolIPMI, Host: "2001:db8::1", Port: 623}, hostPort: "[2001:db8::1]:623"},
		{in: "redfish://bmc.example/redfish/v1/Systems/1", want: Address{Scheme: "redfish", Protocol: ProtocolRedfish, Host: "bmc.example", SystemPath: "/redfish/v1/Systems/1"}, hostPort: "bmc.example:443", baseURL: "https://bmc.example"},
		{in: "redfish://bmc.example:8443/redfish/v1/Systems/System.Embedded.1/", want: Address{Scheme: "redfish", Protocol: ProtocolRedfish, Host: "bmc.example", Port: 8443, SystemPath: "/redfish/v1/Systems/System.Embedded.1"}, baseURL: "https://bmc.example:8443"},
		{in: "redfish://bmc.example", want: Address{Scheme: "redfish", Protocol: ProtocolRedfish, Host: "bmc.example"}, baseURL: "https://bmc.example"},
		{in: "redfish+http://127.0.0.1:8000/redfish/v1/Systems/abc", want: Address{Scheme: "redfish+http", Protocol: ProtocolRedfish, Host: "127.0.0.1", Port: 8000, HTTP: true, SystemPath: "/redfish/v1/Systems/abc"}, hostPort: "127.0.0.1:8000", baseURL: "http://127.0.0.1:8000"},
		{in: "redfish+https://[2001:db8::2]/redfish/v1/Systems/1", want: Address{Scheme: "redfish+https", Protocol: ProtocolRedfish, Host: "2001:db8::2", SystemPath: "/redfish/v1/Systems/1"}, baseURL: "https://[2001:db8::2]"},
		{in: "redfish-virtualmedia://bmc/redfish/v1/Systems/1", want: Address{Scheme: "redfish-virtualmedia", Protocol: ProtocolRedfish, Host: "bmc", SystemPath: "/redfish/v1/Systems/1", VirtualMedia: true}},
		{in: "redfish-virtualmedia+http://bmc:80/redfish/v1/Systems/1", want: Address{Scheme: "redfish-virtualmedia+http", Protocol: ProtocolRedfish, Host: "bmc", Port: 80, HTTP: true, SystemPath: "/redfish/v1/Systems/1", VirtualMedia: true}},
		{in: "redfish-uefihttp://bmc/redfish/v1/Systems/1", want: Address{Scheme: "redfish-uefihttp", Protocol: ProtocolRedfish, Host: "bmc", SystemPath: "/redfish/v1/Systems/1"}},
		{in: "idrac-redfish://10.1.1.1/redfish/v1/Systems/System.Embedded.1", want: Address{Scheme: "idrac-redfish", Protocol: ProtocolRedfish, Host: "10.1.1.1", SystemPath: "/redfish/v1/Systems/System.Embedded.1"}},
		{in: "idrac-virtualmedia://10.1.1.1/redfish/v1/Systems/System.Embedded.1", want: Address{Scheme: "idrac-virtualmedia", Protocol: ProtocolRedfish, Host: "10.1.1.1", SystemPath: "/redfish/v1/Systems/System.Embedded.1", VirtualMedia: true}},
		{in: "ilo5-redfish://ilo/redfish/v1/Systems/1", want: Address{Scheme: "ilo5-redfish", Protocol: ProtocolRedfish, Host: "ilo", SystemPath: "/redfish/v1/Systems/1"}},
		{in: "ilo5-virtualmedia://ilo/redfish/v1/Systems/1", want: Address{Scheme: "ilo5-virtualmedia", Protocol: ProtocolRedfish, Host: "ilo", SystemPath: "/redfish/v1/Systems/1", VirtualMedia: true}},
		{in: "REDFISH://BMC/redfish/v1/Systems/1", want: Address{Scheme: "redfish", Protocol: ProtocolRedfish, Host: "BMC", SystemPath: "/redfish/v1/Systems/1"}},

		{in: "", errHas: "empty"},
		{in: "   ", errHas: "empty"},
		{in: "ftp://bmc", errHas: `unknown scheme "ftp"`},
		{in: "libvirt://bmc", errHas: `unknown scheme "libvirt"`},
		{in: "redfish+ftp://bmc", errHas: `transport "ftp"`},
		{in: "ipmi+http://bmc", errHas: "takes no transport"},
		{in: "ipmi://bmc/redfish/v1/Systems/1", errHas: "ipmi address has no path"},
		{in: "ipmi://", errHas: "no host"},
		{in: "redfish:///redfish/v1/Systems/1", errHas: "no host"},
		{in: "ipmi://bmc:0", errHas: `port "0"`},
		{in: "ipmi://bmc:70000", errHas: `port "70000"`},
		{in: "ipmi://bmc:abc", errHas: "does not parse"},
		{in: "redfish://bmc/redfish/v1/Managers/1", errHas: "want /redfish/v1/Systems/ID"},
		{in: "redfish://bmc/redfish/v1/Systems/", errHas: "want /redfish/v1/Systems/ID"},
		{in: "redfish://bmc/redfish/v1/Systems/1/Bios", errHas: "want /redfish/v1/Systems/ID"},
		{in: "redfish://bmc/redfish/v1/Systems/1?x=1", errHas: "query or fragment"},
		{in: "redfish://admin:hunter2@bmc/redfish/v1/Systems/1", errHas: "carries user info"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseAddress(tt.in)
			if tt.errHas != "" {
				if err == nil {
					t.Fatalf("ParseAddress(%q) = %+v, want an error naming %q", tt.in, got, tt.errHas)
				}
				if !errors.Is(err, ErrBadAddress) || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("ParseAddress(%q) error = %v, want ErrBadAddress naming %q", tt.in, err, tt.errHas)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Fatalf("error leaks the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseAddress(%q): %v", tt.in, err)
			}
			tt.want.Raw = tt.in
			if got != tt.want {
				t.Fatalf("ParseAddress(%q)\n got %+v\nwant %+v", tt.in, got, tt.want)
			}
			if tt.hostPort != "" && got.HostPort() != tt.hostPort {
				t.Errorf("HostPort() = %q, want %q", got.HostPort(), tt.hostPort)
			}
			if tt.baseURL != "" && got.BaseURL() != tt.baseURL {
				t.Errorf("BaseURL() = %q, want %q", got.BaseURL(), tt.baseURL)
			}
		})
	}
}

func TestCredentialsNeverPrinted(t *testing.T) {
	c := Credentials{Username: "admin", Password: "hunter2"}
	for _, s := range []string{c.String(), c.GoString(), c.LogValue().String()} {
		if strings.Contains(s, "hunter2") {
			t.Errorf("credentials print their password: %q", s)
		}
	}
}

func TestRedactKeepsChain(t *testing.T) {
	err := redact(fmt.Errorf("login with hunter2 refused: %w", ErrAuth), "hunter2")
	if strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "login with REDACTED refused") {
		t.Fatalf("redact: %q", err)
	}
	if !errors.Is(err, ErrAuth) {
		t.Fatal("redact lost the error chain")
	}
	plain := errors.New("no secret here")
	if redact(plain, "hunter2") != plain || redact(plain, "no") != plain {
		t.Fatal("redact changed an error without the secret, or searched for a short one")
	}
}

func TestRedfishResolveStaysOnTheService(t *testing.T) {
	a, err := ParseAddress("redfish://bmc.example:8443/redfish/v1/Systems/1")
	if err != nil {
		t.Fatal(err)
	}
	r, _ := newRedfish(a, Credentials{Username: "u"}, Options{}.withDefaults())
	for in, want := range map[string]string{
		"/redfish/v1/Systems/1":                          "https://bmc.example:8443/redfish/v1/Systems/1",
		"https://bmc.example:8443/redfish/v1/Managers/1": "https://bmc.example:8443/redfish/v1/Managers/1",
		"https://evil.example/redfish/v1/Managers/1":     "",
		"http://bmc.example:8443/redfish/v1/Managers/1":  "",
		"redfish/v1/Systems/1":                           "",
	} {
		got, err := r.resolve(in)
		if want == "" {
			if err == nil {
				t.Errorf("resolve(%q) = %q, want an error", in, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("resolve(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
