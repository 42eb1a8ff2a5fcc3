package server

import (
	"errors"
	"strings"
	"testing"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/bmdb"
)

// TestRefusedRequestsStoreNoCredentials: a registration or update that
// bootyd refuses (name taken, MAC taken, stale generation, bad address)
// leaves the secret store as it was; an accepted one stores the
// credentials, and a PATCH with only new credentials is a change.
func TestRefusedRequestsStoreNoCredentials(t *testing.T) {
	e := newEnv(t, nil)
	db := e.srv.db
	reg := func(r api.RegisterRequest) (int, string) {
		t.Helper()
		code, _, body := e.do(t, "POST", "/v1/machines", testOperatorToken, r, nil)
		return code, body
	}
	bmcReq := func(pw string) *api.BMCRequest {
		return &api.BMCRequest{Address: "ipmi://127.0.0.1:623", Username: "admin", Password: pw}
	}
	if code, body := reg(api.RegisterRequest{Name: "c-1", BootMAC: "52:54:00:00:40:01", BMC: bmcReq("pw-first")}); code != 201 {
		t.Fatalf("register c-1: %d %s", code, body)
	}
	for _, tc := range []struct {
		name string
		req  api.RegisterRequest
		want int
	}{
		{"name taken", api.RegisterRequest{Name: "c-1", BootMAC: "52:54:00:00:40:02", BMC: &api.BMCRequest{Address: "ipmi://127.0.0.1:623", CredentialsRef: "bmc-c-1", Username: "admin", Password: "pw-thief"}}, 409},
		{"MAC taken", api.RegisterRequest{Name: "c-2", BootMAC: "52:54:00:00:40:01", BMC: bmcReq("pw-c2")}, 409},
		{"bad address", api.RegisterRequest{Name: "c-3", BootMAC: "52:54:00:00:40:03", BMC: &api.BMCRequest{Address: "telnet://x", Username: "admin", Password: "pw-c3"}}, 400},
		{"no user name", api.RegisterRequest{Name: "c-4", BootMAC: "52:54:00:00:40:04", BMC: &api.BMCRequest{Address: "ipmi://x", Password: "pw-c4"}}, 400},
	} {
		if code, body := reg(tc.req); code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, code, body, tc.want)
		}
	}
	names, err := db.ListCredentials(t.Context())
	if err != nil || strings.Join(names, ",") != "bmc-c-1" {
		t.Fatalf("credentials after refused registrations: %v %v, want only bmc-c-1", names, err)
	}
	if c, err := db.GetCredentials(t.Context(), "bmc-c-1"); err != nil || c.Password != "pw-first" {
		t.Fatalf("bmc-c-1 was overwritten by a refused registration: %v", err)
	}

	d := e.show(t, "c-1")
	stale := api.UpdateRequest{Generation: d.Generation + 7, BMC: bmcReq("pw-stale")}
	if code, _, body := e.do(t, "PATCH", "/v1/machines/c-1", testOperatorToken, stale, nil); code != 409 {
		t.Fatalf("stale PATCH: %d %s, want 409", code, body)
	}
	if c, _ := db.GetCredentials(t.Context(), "bmc-c-1"); c.Password != "pw-first" {
		t.Fatal("a stale PATCH changed the stored credentials")
	}
	same := api.UpdateRequest{Generation: d.Generation, BMC: bmcReq("pw-first")}
	if code, _, body := e.do(t, "PATCH", "/v1/machines/c-1", testOperatorToken, same, nil); code != 200 {
		t.Fatalf("PATCH with the same credentials: %d %s", code, body)
	}
	if d2 := e.show(t, "c-1"); !d2.UpdatedAt.Equal(d.UpdatedAt) {
		t.Errorf("PATCH with the same credentials changed the machine: updated %v → %v", d.UpdatedAt, d2.UpdatedAt)
	}
	if code, _, body := e.do(t, "PATCH", "/v1/machines/c-1", testOperatorToken, api.UpdateRequest{BMC: bmcReq("pw-second")}, nil); code != 200 {
		t.Fatalf("PATCH new credentials: %d %s", code, body)
	}
	if c, _ := db.GetCredentials(t.Context(), "bmc-c-1"); c.Password != "pw-second" {
		t.Fatal("PATCH did not store the new credentials")
	}
	d3 := e.show(t, "c-1")
	if d3.Generation != d.Generation {
		t.Errorf("new credentials bumped the generation: %d (was %d)", d3.Generation, d.Generation)
	}
	evs, _ := db.Events(t.Context(), d.ID, 0, 0)
	if last := evs[len(evs)-1]; last.Reason != "Updated" || !strings.Contains(last.Message, "bmc credentials") || strings.Contains(last.Message, "pw-") {
		t.Errorf("last event %+v, want Updated naming bmc credentials without the password", last)
	}
	if strings.Contains(e.logs.String(), "pw-") {
		t.Errorf("a password reached bootyd's logs:\n%s", e.logs.String())
	}
	if _, err := db.GetCredentials(t.Context(), "bmc-c-2"); !errors.Is(err, bmdb.ErrNotFound) {
		t.Errorf("bmc-c-2: %v, want not found", err)
	}
}
