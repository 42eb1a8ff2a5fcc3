package server

import (
	"context"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/bmdb"
)

// decorateAll is decorate for a page of machines: their agent sessions and
// install progress come from one bmdb.ListDetails instead of one or two
// queries per machine. When that read fails, each machine is decorated on
// its own.
func (s *Server) decorateAll(ctx context.Context, ms []bmdb.Machine) []api.Machine {
	out := make([]api.Machine, 0, len(ms))
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	d, err := s.db.ListDetails(ctx, ids)
	if err != nil {
		s.log.Warn("list machines: read their sessions and installs in one go; reading them one by one", "err", err)
		for _, m := range ms {
			out = append(out, s.decorate(ctx, m))
		}
		return out
	}
	for _, m := range ms {
		a := apiMachine(m)
		if as, ok := d.Sessions[m.ID]; ok {
			a.Agent = &api.AgentInfo{StartedAt: as.StartedAt, LastHeartbeat: as.HeartbeatAt, EndedAt: as.EndedAt, EndReason: as.EndReason, Live: as.Live}
		}
		if m.State == bmdb.StateProvisioning || m.State == bmdb.StateDeprovisioning {
			if p, ok := d.Progress[m.ID]; ok {
				a.Progress = apiProgress(p)
			}
		}
		out = append(out, a)
	}
	return out
}
