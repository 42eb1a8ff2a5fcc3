package server

import (
	"testing"

	"github.com/booty-dev/booty/pkg/api"
)

// TestHardwareReport: an enrolled agent's later hardware report replaces
// the stored one; a body that is not a report gets 400 and changes
// nothing; an agent of a static config token (no enrollment) gets 401.
func TestHardwareReport(t *testing.T) {
	e := newEnv(t, nil)
	p := agentFor(e, "52:54:00:00:30:01")
	defer p.Close()
	load(t, p)
	eventually(t, "the enrollment", func() bool { return p.MAC() != "" })

	hw := api.HardwareDetails{CPU: api.CPU{Arch: "x86_64", Count: 2}, NIC: []api.NIC{{Name: "eth0", MAC: "52:54:00:00:30:01",
		LLDP: &api.LLDP{SwitchID: "aa:bb:cc:00:11:22", PortID: "swp3", SwitchSystemName: "leaf-1"}}}}
	if code, _, body := e.agentDo(t, p, "hardware", hw); code != 200 {
		t.Fatalf("hardware report: %d %s", code, body)
	}
	d := e.show(t, "52:54:00:00:30:01")
	if d.Hardware == nil || len(d.Hardware.NIC) != 1 || d.Hardware.NIC[0].LLDP == nil || *d.Hardware.NIC[0].LLDP != *hw.NIC[0].LLDP {
		t.Fatalf("stored hardware %+v, want the report's nic with its lldp", d.Hardware)
	}
	if code, _, _ := e.agentDo(t, p, "hardware", `{"nics": "eth0"}`); code != 400 {
		t.Errorf("a report whose nics are a string: %d, want 400", code)
	}
	if d := e.show(t, "52:54:00:00:30:01"); d.Hardware == nil || len(d.Hardware.NIC) != 1 || d.Hardware.NIC[0].LLDP == nil {
		t.Errorf("a refused report changed the stored one: %+v", d.Hardware)
	}
	if code, _, _ := e.do(t, "POST", "/v1/machines/"+testMAC+"/hardware", testToken, hw, nil); code != 401 {
		t.Errorf("hardware report with the config file's static token: %d, want 401", code)
	}
}
