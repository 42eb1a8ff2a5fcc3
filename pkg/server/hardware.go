package server

import (
	"encoding/json"
	"net/http"

	"github.com/booty-dev/booty/pkg/api"
)

// handleHardware stores a hardware report an enrolled agent sends outside
// an inspection (POST /v1/machines/{mac}/hardware): the LLDP neighbours it
// heard after enrolling. It replaces the machine's last report; the
// machine's state and command are untouched. A body that is not a
// HardwareDetails gets 400, one past the bound 413, a static config token
// 401 (enroll first).
func (s *Server) handleHardware(w http.ResponseWriter, r *http.Request) {
	a, ok := s.agentSession(w, r)
	if !ok {
		return
	}
	if !s.allow(w, a.mac, 1) {
		return
	}
	var hw api.HardwareDetails
	if !s.decodeBodyMax(w, r, &hw, "HardwareDetails", max(s.opts.MaxBodyBytes, maxEnrollBodies)) {
		return
	}
	b, err := json.Marshal(hw)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid HardwareDetails: %v", err)
		return
	}
	if err := s.db.ReportHardware(r.Context(), a.id, b); err != nil {
		s.dbError(w, "record hardware", err)
		return
	}
	s.log.Info("hardware report", "mac", a.mac, "machine", a.id)
	writeJSON(w, http.StatusOK, okBody)
}
