// Package api holds the wire types that the booty agent and the bootyd server
// exchange. Every route is versioned under /v1/; fields are only ever added.
//
// The routes are listed in fleet.go: the operator API (machines by name, ID
// or MAC, operator token) and the agent protocol (enroll, heartbeat, command
// long poll, reports; machine token). The reports below are the agent's;
// each carries the generation of the command it belongs to.
package api

import "time"

// Version is the API version prefix of every route.
const Version = "v1"

// Step states carried in StatusReport.State.
const (
	StateStarted   = "started"
	StateSucceeded = "succeeded"
	StateFailed    = "failed"
)

// Machine-level outcomes carried in StatusReport.State with Step == StepMachine.
const (
	// StepMachine is the pseudo-step name used for whole-run outcomes.
	StepMachine = "machine"
	// StepLoadConfig is the pseudo-step under which a config that could not
	// be loaded (unknown field, invalid value) is reported.
	StepLoadConfig = "load-config"
	// StateProvisioned is reported once every step succeeded.
	StateProvisioned = "provisioned"
	// StateDeprovisioned is reported once a deprovision run succeeded.
	StateDeprovisioned = "deprovisioned"
	// StateError is reported when the run failed; Error holds the cause and Step-independent detail.
	StateError = "error"
)

// StatusReport tells the server that a step started, succeeded or failed.
type StatusReport struct {
	Step       string    `json:"step"`
	Index      int       `json:"index"` // 1-based position of the step in the plan
	Total      int       `json:"total"` // number of steps in the plan
	State      string    `json:"state"`
	Error      string    `json:"error,omitempty"`
	DurationMS int64     `json:"durationMs,omitempty"`
	Time       time.Time `json:"time"`
	// Detail carries step-specific facts (the chosen disk's identity, bytes written, ...).
	Detail map[string]string `json:"detail,omitempty"`
	// Generation is the generation of the command the step belongs to.
	Generation int64 `json:"generation,omitempty"`
}

// ProgressReport tells the server how far a long step (the image write) is.
type ProgressReport struct {
	Step       string    `json:"step"`
	BytesDone  int64     `json:"bytesDone"`
	BytesTotal int64     `json:"bytesTotal"` // 0 when unknown
	RateBPS    float64   `json:"rateBps"`    // bytes per second, recent average
	ETASeconds float64   `json:"etaSeconds"` // 0 when unknown
	Time       time.Time `json:"time"`
	// Generation is the generation of the command being run.
	Generation int64 `json:"generation,omitempty"`
}

// LogLine is one line of agent log output.
type LogLine struct {
	Time    time.Time `json:"time"`
	Level   string    `json:"level"`
	Message string    `json:"message"`
}

// LogBatch carries several log lines in one request.
type LogBatch struct {
	Lines []LogLine `json:"lines"`
	// Generation is the generation of the command being run (0 while the
	// agent waits).
	Generation int64 `json:"generation,omitempty"`
}

// MachineState is what bootyd recorded about one machine.
type MachineState struct {
	MAC      string          `json:"mac"`
	State    string          `json:"state"` // last machine-level outcome, or "running"
	Steps    []StatusReport  `json:"steps"`
	Progress *ProgressReport `json:"progress,omitempty"`
	Logs     []LogLine       `json:"logs,omitempty"` // most recent lines, bounded
	Updated  time.Time       `json:"updated"`
}

// Error is the body of every non-2xx answer.
type Error struct {
	Error string `json:"error"`
}
