package server

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
)

// TestFailedRunEnrollsAgainAtOnce: with the real agent client, a provision
// that fails is reported; the machine's next boot (a new agent) enrolls at
// once instead of being refused (409) until the failed agent's session
// times out, and the old token stops working.
func TestFailedRunEnrollsAgainAtOnce(t *testing.T) {
	e := newEnv(t, nil)
	const mac = "52:54:00:00:70:01"
	p := agentFor(e, mac)
	defer p.Close()
	got := load(t, p)
	eventually(t, "the enrollment", func() bool { return p.MAC() != "" })
	name := e.show(t, mac).Name
	if code, _, body := e.do(t, "POST", "/v1/machines/"+name+"/inspect", testOperatorToken, nil, nil); code != 200 {
		t.Fatalf("inspect: %d %s", code, body)
	}
	eventually(t, "the inspection", func() bool { return e.show(t, name).State == api.MachineAvailable })
	req := api.ProvisionRequest{Spec: &api.MachineSpec{Image: api.ImageSpec{URL: "http://10.0.0.1/files/os.img.zst",
		Checksum: "sha256:" + strings.Repeat("ab", 32)}, Hostname: "n1", RootDeviceHints: &api.RootDeviceHints{DeviceName: "/dev/vda"}}}
	if code, _, body := e.do(t, "POST", "/v1/machines/"+name+"/provision", testOperatorToken, req, nil); code != 200 {
		t.Fatalf("provision: %d %s", code, body)
	}
	select {
	case l := <-got:
		if l.err != nil {
			t.Fatal(l.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not get the provision")
	}
	oldToken := tokenOf(t, p)
	if err := p.CompleteCommand(context.Background(), errors.New("stream-image: checksum mismatch")); err != nil {
		t.Fatal(err)
	}
	d := e.show(t, name)
	if d.Status != api.StatusError || d.Agent == nil || d.Agent.Live || d.Agent.EndReason != "command provision failed" {
		t.Fatalf("after the failed run: %+v, agent %+v", d.Machine, d.Agent)
	}
	if code, _, _ := e.do(t, "POST", "/v1/machines/"+mac+"/heartbeat", oldToken, `{}`, nil); code != http.StatusUnauthorized {
		t.Fatalf("heartbeat with the failed run's token: %d, want 401", code)
	}
	// The next boot: enrolled at once (the first try), not refused.
	code, _, body := e.do(t, "POST", "/v1/enroll", "", api.EnrollRequest{MACs: []string{mac}}, nil)
	if code != 200 || !strings.Contains(body, `"token"`) {
		t.Fatalf("enrollment of the next boot: %d %s, want 200 at once", code, body)
	}
}
