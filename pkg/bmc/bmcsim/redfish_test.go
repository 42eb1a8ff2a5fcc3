package bmcsim

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/booty-dev/booty/pkg/bmc"
)

// TestRedfishSchema checks the Redfish BMC's answers with a plain HTTPS
// client: the service root is open and links the collections, everything
// else needs credentials, bad values get DMTF error bodies, and the CA
// handed out verifies the certificate.
func TestRedfishSchema(t *testing.T) {
	m := &MemMachine{}
	r, err := NewRedfish(RedfishConfig{Machine: m, Username: "admin", Password: "pw-schema", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	base := "https://" + strings.TrimPrefix(strings.SplitN(r.Address(), "/redfish", 2)[0], "redfish://")
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: r.CertPool()}}}

	call := func(method, path, body string, auth bool) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(body))
		if auth {
			req.SetBasicAuth("admin", "pw-schema")
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var v map[string]any
		if len(data) > 0 {
			if err := json.Unmarshal(data, &v); err != nil {
				t.Fatalf("%s %s: answer is not JSON: %v: %s", method, path, err, data)
			}
		}
		return resp.StatusCode, v
	}
	errMsg := func(v map[string]any) string {
		e, _ := v["error"].(map[string]any)
		msg, _ := e["message"].(string)
		return msg
	}

	code, root := call("GET", "/redfish/v1", "", false)
	if code != 200 || root["Systems"].(map[string]any)["@odata.id"] != "/redfish/v1/Systems" || root["Managers"] == nil {
		t.Fatalf("service root: %d %v", code, root)
	}
	if code, v := call("GET", "/redfish/v1/Systems", "", false); code != 401 || errMsg(v) == "" {
		t.Fatalf("systems without credentials: %d %v, want 401 with a message", code, v)
	}
	code, sys := call("GET", "/redfish/v1/Systems/1", "", true)
	if code != 200 || sys["PowerState"] != "Off" || sys["@odata.type"] != "#ComputerSystem.v1_13_0.ComputerSystem" {
		t.Fatalf("system: %d %v", code, sys)
	}
	if code, v := call("PATCH", "/redfish/v1/Systems/1", `{"Boot":{"BootSourceOverrideTarget":"Floppy"}}`, true); code != 400 || !strings.Contains(errMsg(v), `"Floppy"`) {
		t.Fatalf("patch with a bad target: %d %v", code, v)
	}
	if code, v := call("POST", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", `{"ResetType":"Nmi"}`, true); code != 400 || !strings.Contains(errMsg(v), `"Nmi"`) {
		t.Fatalf("reset with a bad type: %d %v", code, v)
	}
	if code, _ := call("POST", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", `{"ResetType":"On"}`, true); code != 204 {
		t.Fatalf("reset On: %d", code)
	}
	if err := r.WaitPower(); err != nil {
		t.Fatal(err)
	}
	if m.State() != bmc.PowerOn {
		t.Fatal("machine not on after ResetType On")
	}
	if code, v := call("GET", "/redfish/v1/Nowhere", "", true); code != 404 || errMsg(v) == "" {
		t.Fatalf("unknown path: %d %v", code, v)
	}
	if code, vm := call("GET", cdPath, "", true); code != 200 || vm["Inserted"] != false {
		t.Fatalf("virtual cd: %d %v", code, vm)
	}
}
