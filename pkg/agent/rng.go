package agent

import (
	"context"
	"log/slog"
	"net/url"
	"slices"
	"strings"

	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/provider"
)

// needsTLS returns what of these URLs will be fetched over TLS (https://,
// oci:// registries), for the log, or "" when none will: only those need
// the kernel's random number generator.
func needsTLS(urls ...string) string {
	var what []string
	for _, s := range urls {
		u, err := url.Parse(s)
		if err != nil {
			continue
		}
		switch strings.ToLower(u.Scheme) {
		case "https", "oci":
			if w := u.Scheme + "://" + u.Host; !slices.Contains(what, w) {
				what = append(what, w)
			}
		}
	}
	return strings.Join(what, ", ")
}

// configNeedsTLS is needsTLS of what a run with cfg fetches or reports to.
func configNeedsTLS(cfg *config.MachineConfig) string {
	return needsTLS(cfg.Server.URL, cfg.Image.URL, cfg.Image.BmapURL)
}

// cmdlineNeedsTLS is needsTLS of the config sources on the kernel command line.
func cmdlineNeedsTLS(cl provider.Cmdline) string {
	src, _ := cl.Get(provider.CmdlineConfig)
	srv, _ := cl.Get(provider.CmdlineServer)
	return needsTLS(src, srv)
}

// waitRandom waits, bounded, for the kernel's random number generator
// before TLS to what (see entropy.Pool.Wait, which says so once on log);
// nothing to wait for when what is empty or Random is nil.
func (a *Agent) waitRandom(ctx context.Context, log *slog.Logger, what string) error {
	if what == "" || a.Random == nil {
		return nil
	}
	_, err := a.Random.Wait(ctx, log, "tls to "+what)
	return err
}
