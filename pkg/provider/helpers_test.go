package provider

import (
	"encoding/pem"
	"log/slog"
	"os"
	"testing"
)

// testLogger routes a component's logs to the test output.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func pemOf(der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// sampleVars is CAPRF's /deploy/vars, shared with pkg/config's tests.
var sampleVars = func() string {
	b, err := os.ReadFile("../config/testdata/vars/sample.vars")
	if err != nil {
		panic(err)
	}
	return string(b)
}()
