package provider

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/health"
)

// TestServerProviderReportsHealth: the results reach bootyd's health route
// with the machine token, in their wire form.
func TestServerProviderReportsHealth(t *testing.T) {
	srv := newRecorder(t, nil)
	r, err := NewServerReporter(config.ServerSpec{URL: srv.URL, Token: "tok"}, "52:54:00:aa:bb:01", true)
	if err != nil {
		t.Fatal(err)
	}
	results := []health.CheckResult{
		{Name: "cpu", Status: health.StatusPass, Message: "4 logical CPUs", Duration: 3 * time.Millisecond, Figures: map[string]int64{"count": 4}},
		{Name: "disk:nvme0n1", Status: health.StatusFail, Message: "critical warning 0x04: reliability degraded", Blocking: true},
	}
	if err := r.ReportHealthChecks(context.Background(), results); err != nil {
		t.Fatal(err)
	}
	got := srv.requests()
	if len(got) != 1 || got[0].Path != "/v1/machines/52:54:00:aa:bb:01/health" || got[0].Auth != "Bearer tok" {
		t.Fatalf("requests %+v", got)
	}
	var body api.HealthReport
	if err := json.Unmarshal([]byte(got[0].Body), &body); err != nil {
		t.Fatal(err)
	}
	want := []api.HealthCheck{
		{Name: "cpu", Status: "pass", Message: "4 logical CPUs", DurationMS: 3, Figures: map[string]int64{"count": 4}},
		{Name: "disk:nvme0n1", Status: "fail", Message: "critical warning 0x04: reliability degraded", Blocking: true},
	}
	if !reflect.DeepEqual(body.Checks, want) || body.Time.IsZero() {
		t.Errorf("body %+v", body)
	}
}
