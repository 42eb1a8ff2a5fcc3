package network

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestParseIPParam(t *testing.T) {
	a := netip.MustParseAddr
	p := netip.MustParsePrefix
	tests := []struct {
		in      string
		want    *StaticConfig
		wantErr string
	}{
		// Short forms from nfsroot.rst.
		{in: "dhcp", want: &StaticConfig{Method: MethodDHCP}},
		{in: "on", want: &StaticConfig{Method: MethodDHCP}},
		{in: "any", want: &StaticConfig{Method: MethodDHCP}},
		{in: "bootp", want: &StaticConfig{Method: MethodDHCP}},
		{in: "both", want: &StaticConfig{Method: MethodDHCP}},
		{in: "off", want: &StaticConfig{Method: MethodOff}},
		{in: "none", want: &StaticConfig{Method: MethodOff}},
		// The full form.
		{in: "192.168.1.10:192.168.1.1:192.168.1.254:255.255.255.0:node1:eth0:off:192.168.1.53:192.168.1.54:192.168.1.123",
			want: &StaticConfig{Method: MethodStatic, Address: p("192.168.1.10/24"), Server: a("192.168.1.1"), Gateway: a("192.168.1.254"),
				Hostname: "node1", Device: "eth0", DNS: []netip.Addr{a("192.168.1.53"), a("192.168.1.54")}, NTP: []netip.Addr{a("192.168.1.123")}}},
		{in: "10.0.0.5::10.0.0.1:255.255.255.0:::none",
			want: &StaticConfig{Method: MethodStatic, Address: p("10.0.0.5/24"), Gateway: a("10.0.0.1")}},
		// Trailing fields omitted, autoconf empty with an address: static.
		{in: "10.0.0.5::10.0.0.1:255.255.0.0", want: &StaticConfig{Method: MethodStatic, Address: p("10.0.0.5/16"), Gateway: a("10.0.0.1")}},
		// CIDR convenience.
		{in: "10.1.2.3/20::10.1.0.1::host:ens3", want: &StaticConfig{Method: MethodStatic, Address: p("10.1.2.3/20"), Gateway: a("10.1.0.1"), Hostname: "host", Device: "ens3"}},
		// Classful default netmasks.
		{in: "10.1.2.3", want: &StaticConfig{Method: MethodStatic, Address: p("10.1.2.3/8")}},
		{in: "172.16.0.9:::", want: &StaticConfig{Method: MethodStatic, Address: p("172.16.0.9/16")}},
		{in: "192.168.7.9::::", want: &StaticConfig{Method: MethodStatic, Address: p("192.168.7.9/24")}},
		// DHCP restricted to one device.
		{in: ":::::eth1:dhcp", want: &StaticConfig{Method: MethodDHCP, Device: "eth1"}},
		{in: "::::myhost::dhcp", want: &StaticConfig{Method: MethodDHCP, Hostname: "myhost"}},
		{in: "eth1:dhcp", want: &StaticConfig{Method: MethodDHCP, Device: "eth1"}},
		// No address and no autoconf: the kernel's default is any.
		{in: ":::::eth0:", want: &StaticConfig{Method: MethodDHCP, Device: "eth0"}},
		{in: ":::::eth0:off", want: &StaticConfig{Method: MethodOff, Device: "eth0"}},

		{in: "", wantErr: "empty"},
		{in: "maybe", wantErr: `unknown autoconf "maybe"`},
		{in: "rarp", wantErr: "rarp"},
		{in: "10.0.0.300::::", wantErr: "field 1 (client-ip)"},
		{in: "10.0.0.5:nope:::", wantErr: "field 2 (server-ip)"},
		{in: "10.0.0.5::10.0.0.x::", wantErr: "field 3 (gw-ip)"},
		{in: "10.0.0.5:::255.0.255.0", wantErr: "field 4 (netmask)"},
		{in: "10.0.0.5/24:::255.255.0.0", wantErr: "contradicts prefix length /24"},
		{in: "10.0.0.5:::::averyveryverylongifname", wantErr: "field 6 (device)"},
		{in: "10.0.0.5::::::dhcpv9", wantErr: "field 7 (autoconf)"},
		{in: "10.0.0.5:::::::1.2.3", wantErr: "field 8 (dns0-ip)"},
		{in: "10.0.0.5::::::::1.2.3.4.5", wantErr: "field 9 (dns1-ip)"},
		{in: "10.0.0.5:::::::::ntp", wantErr: "field 10 (ntp0-ip)"},
		{in: "1:2:3:4:5:6:7:8:9:10:11", wantErr: "at most 10"},
		{in: "10.0.0.5::10.0.0.5:::", wantErr: "equals the client address"},
		{in: "eth0:static", wantErr: "expected <device>:<autoconf>"},
		{in: "fe80::1", wantErr: "field 1 (client-ip)"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseIPParam(tt.in)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("ParseIPParam(%q) = %+v, want error containing %q", tt.in, got, tt.wantErr)
				}
				if !errors.Is(err, ErrInvalidIPParam) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseIPParam(%q) err = %v, want ErrInvalidIPParam containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseIPParam(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParseIPParam(%q)\n got %+v\nwant %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseStatic(t *testing.T) {
	c, err := ParseStatic("eth0", "10.0.0.5/24", "10.0.0.1", []string{"10.0.0.53"})
	if err != nil {
		t.Fatal(err)
	}
	want := &StaticConfig{Method: MethodStatic, Device: "eth0", Address: netip.MustParsePrefix("10.0.0.5/24"),
		Gateway: netip.MustParseAddr("10.0.0.1"), DNS: []netip.Addr{netip.MustParseAddr("10.0.0.53")}}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("ParseStatic = %+v, want %+v", c, want)
	}
	for _, bad := range [][4]string{
		{"", "10.0.0.5", "", ""}, {"", "10.0.0.5/24", "gw", ""}, {"", "10.0.0.5/24", "", "dns"},
	} {
		var dns []string
		if bad[3] != "" {
			dns = []string{bad[3]}
		}
		if _, err := ParseStatic(bad[0], bad[1], bad[2], dns); !errors.Is(err, ErrInvalidIPParam) {
			t.Errorf("ParseStatic(%q) err = %v, want ErrInvalidIPParam", bad, err)
		}
	}
}
