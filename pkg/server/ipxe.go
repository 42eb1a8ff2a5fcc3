package server

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/booty-dev/booty/pkg/bmdb"
)

// baseURL is PublicURL; never the request's Host header, which a client
// chooses. Without PublicURL it answers 503 and returns false.
func (s *Server) baseURL(w http.ResponseWriter) (string, bool) {
	if s.opts.PublicURL == "" {
		writeError(w, http.StatusServiceUnavailable, "bootyd serves no iPXE scripts without --public-url")
		return "", false
	}
	return s.opts.PublicURL, true
}

// fileURL is the URL of a path under /files/, each element escaped.
func fileURL(base, p string) string {
	parts := strings.Split(p, "/")
	for i, e := range parts {
		parts[i] = url.PathEscape(e)
	}
	return base + "/files/" + strings.Join(parts, "/")
}

// MachineIPXE returns the iPXE script that boots the booty agent on the
// machine with the canonical mac: the kernel and initrd from /files/, named
// so that EFI kernels find the initrd (initrd=initrd), with the command line
// "booty.server=<base> BOOTIF=01-<mac with dashes> <IPXECmdline>".
func (s *Server) MachineIPXE(base, mac string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#!ipxe\n")
	fmt.Fprintf(&b, "# booty agent for %s, from bootyd\n", mac)
	fmt.Fprintf(&b, "kernel --name kernel %s initrd=initrd booty.server=%s BOOTIF=01-%s %s || goto failed\n",
		fileURL(base, s.opts.IPXEKernel), base, macFileName(mac), s.opts.IPXECmdline)
	fmt.Fprintf(&b, "initrd --name initrd %s || goto failed\n", fileURL(base, s.opts.IPXEInitrd))
	fmt.Fprintf(&b, "boot || goto failed\n")
	fmt.Fprintf(&b, ":failed\n")
	fmt.Fprintf(&b, "echo booty: could not load the agent from %s\n", base)
	fmt.Fprintf(&b, "exit 1\n")
	return b.String()
}

// ChainIPXE returns the generic script for DHCP's boot filename: it chains to
// the per-MAC script, naming the MAC of the interface iPXE booted from
// (${netX/mac:hexhyp}, e.g. 52-54-00-12-34-56), and falls back to net0 for
// iPXE builds without netX. A per-MAC script that asked for a local boot
// (LocalBootIPXE) is not tried again: the script exits with a failure, so
// the firmware goes on to its next boot device.
func (s *Server) ChainIPXE(base string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#!ipxe\n")
	fmt.Fprintf(&b, "# bootyd: hand over to this machine's boot script\n")
	fmt.Fprintf(&b, "chain --autofree %s/v1/machines/${netX/mac:hexhyp}/ipxe || goto net0\n", base)
	fmt.Fprintf(&b, ":net0\n")
	fmt.Fprintf(&b, "isset ${%s} && goto local ||\n", localBootVar)
	fmt.Fprintf(&b, "chain --autofree %s/v1/machines/${net0/mac:hexhyp}/ipxe || goto failed\n", base)
	fmt.Fprintf(&b, ":failed\n")
	fmt.Fprintf(&b, "isset ${%s} && goto local ||\n", localBootVar)
	fmt.Fprintf(&b, "echo booty: bootyd at %s has no boot script for ${netX/mac} (no config for this MAC?)\n", base)
	fmt.Fprintf(&b, "exit 1\n")
	fmt.Fprintf(&b, ":local\n")
	fmt.Fprintf(&b, "exit 1\n")
	return b.String()
}

// localBootVar is the iPXE setting a local-boot script sets, so that
// ChainIPXE does not try the next MAC's script.
const localBootVar = "booty-local-boot"

// LocalBootIPXE returns the script for a machine that boots its disk: iPXE
// exits with a failure, and the firmware goes on to the next device of its
// boot order (Ironic's local boot); UEFI firmware would show its boot menu
// after a success.
func LocalBootIPXE(name string) string {
	return "#!ipxe\n# booty: " + name + " is provisioned: boot from its disk\nset " + localBootVar +
		" 1\necho booty: " + name + " is provisioned: on to the next boot device\nexit 1\n"
}

// localBoot reports whether machine m boots its disk instead of the agent:
// it is provisioned (or externally provisioned) and has a BMC, so the host
// reconciler drives it and a network boot comes from the agent's reboot
// after the write or from a power on. Machines without a BMC keep booting
// the agent, as their operators (and config files) expect.
func localBoot(m bmdb.Machine) bool {
	return m.BMC.Address != "" && (m.State == bmdb.StateProvisioned || m.State == bmdb.StateExternallyProvisioned)
}

// handleMachineIPXE serves MachineIPXE for a MAC bootyd knows (a machine
// of the BMDB, a config file, the default config) or, with auto-discovery
// on, for any MAC; 404 otherwise, so that unknown machines do not boot the
// agent. A machine that boots its disk (localBoot) gets LocalBootIPXE.
func (s *Server) handleMachineIPXE(w http.ResponseWriter, r *http.Request) {
	mac, ok := pathMAC(w, r)
	if !ok {
		return
	}
	base, ok := s.baseURL(w)
	if !ok {
		return
	}
	m, err := s.db.MachineByMAC(r.Context(), mac)
	if err != nil && !errors.Is(err, bmdb.ErrNotFound) {
		s.dbError(w, "iPXE script", err)
		return
	}
	if err != nil && !s.opts.AutoDiscover {
		if _, err := s.lookupConfig(mac); err != nil {
			writeError(w, http.StatusNotFound, "no machine %s", mac)
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err == nil && localBoot(m) {
		s.log.Info("serve iPXE script: local boot", "mac", mac, "machine", m)
		_, _ = w.Write([]byte(LocalBootIPXE(m.Name)))
		return
	}
	s.log.Info("serve iPXE script", "mac", mac)
	_, _ = w.Write([]byte(s.MachineIPXE(base, mac)))
}

// handleChainIPXE serves ChainIPXE.
func (s *Server) handleChainIPXE(w http.ResponseWriter, r *http.Request) {
	base, ok := s.baseURL(w)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(s.ChainIPXE(base)))
}
