package server

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// baseURL is PublicURL, or the scheme and Host of the request when unset.
func (s *Server) baseURL(r *http.Request) string {
	if s.opts.PublicURL != "" {
		return s.opts.PublicURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
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
// iPXE builds without netX.
func (s *Server) ChainIPXE(base string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#!ipxe\n")
	fmt.Fprintf(&b, "# bootyd: hand over to this machine's boot script\n")
	fmt.Fprintf(&b, "chain --autofree %s/v1/machines/${netX/mac:hexhyp}/ipxe || goto net0\n", base)
	fmt.Fprintf(&b, ":net0\n")
	fmt.Fprintf(&b, "chain --autofree %s/v1/machines/${net0/mac:hexhyp}/ipxe || goto failed\n", base)
	fmt.Fprintf(&b, ":failed\n")
	fmt.Fprintf(&b, "echo booty: bootyd at %s has no boot script for ${netX/mac} (no config for this MAC?)\n", base)
	fmt.Fprintf(&b, "exit 1\n")
	return b.String()
}

// handleMachineIPXE serves MachineIPXE for a MAC that has a config (or a
// default config); 404 otherwise, so that unknown machines do not boot the agent.
func (s *Server) handleMachineIPXE(w http.ResponseWriter, r *http.Request) {
	mac, ok := pathMAC(w, r)
	if !ok {
		return
	}
	if _, ok := s.machineConfig(w, mac); !ok {
		return
	}
	s.log.Info("serve iPXE script", "mac", mac)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(s.MachineIPXE(s.baseURL(r), mac)))
}

// handleChainIPXE serves ChainIPXE.
func (s *Server) handleChainIPXE(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(s.ChainIPXE(s.baseURL(r))))
}
