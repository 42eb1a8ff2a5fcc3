package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/disk"
	"github.com/booty-dev/booty/pkg/inventory"
)

func init() {
	register(command{name: "inventory", summary: "print this machine's hardware report (metal3 HardwareDetails)", run: func(args []string) int {
		return runInventory(args, os.Stdout, os.Stderr)
	}})
}

// runInventory collects the hardware report and prints it as JSON
// (--json, metal3's HardwareDetails shape) or as a summary. It listens for
// LLDP on every link with carrier for at most --lldp-wait (0 skips it),
// which needs root; without root the report has no LLDP neighbours.
func runInventory(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("inventory", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: booty inventory [--json] [--lldp-wait DUR]\n\n"+
			"Prints this machine's hardware: SMBIOS identity, CPU, memory, NICs with their\n"+
			"LLDP neighbours, disks, GPUs and PCI devices. --json prints metal3's\n"+
			"HardwareDetails JSON, which the agent also reports.\n\n")
		fs.PrintDefaults()
	}
	asJSON := fs.Bool("json", false, "print the report as JSON")
	wait := fs.Duration("lldp-wait", inventory.DefaultLLDPWait, "listen for LLDP on links with carrier for at most `DUR`; 0 skips it")
	root := fs.String("root", "/", "root of /sys, /proc and pci.ids (for a copied tree)")
	if code := parseFlags(fs, args, stderr, "booty inventory"); code >= 0 {
		return code
	}
	if *wait < 0 {
		fmt.Fprintf(stderr, "booty inventory: --lldp-wait: want 0 or a positive duration like 5s, got %s\nRun 'booty inventory --help' for usage.\n", *wait)
		return 2
	}
	c := inventory.NewCollector()
	c.Root, c.LLDPWait = *root, *wait
	if *root != "/" {
		c.Addrs, c.LLDP = nil, nil // the links of a copied tree are not this host's
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	hw, err := c.Collect(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "booty inventory: %v\n", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(hw); err != nil {
			fmt.Fprintf(stderr, "booty inventory: write json: %v\n", err)
			return 1
		}
		return 0
	}
	printInventory(stdout, hw, *wait)
	return 0
}

func printInventory(w io.Writer, hw *api.HardwareDetails, wait time.Duration) {
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	fmt.Fprintf(w, "system:   %s %s, serial %s\n", dash(hw.SystemVendor.Manufacturer), dash(hw.SystemVendor.ProductName), dash(hw.SystemVendor.SerialNumber))
	fmt.Fprintf(w, "bios:     %s %s (%s)\n", dash(hw.Firmware.BIOS.Vendor), dash(hw.Firmware.BIOS.Version), dash(hw.Firmware.BIOS.Date))
	fmt.Fprintf(w, "hostname: %s\n", dash(hw.Hostname))
	fmt.Fprintf(w, "cpu:      %d x %s (%s, %.0f MHz, %d flags)\n", hw.CPU.Count, dash(hw.CPU.Model), hw.CPU.Arch, hw.CPU.ClockMegahertz, len(hw.CPU.Flags))
	fmt.Fprintf(w, "memory:   %d MiB\n\n", hw.RAMMebibytes)

	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NIC\tMAC\tIP\tGBPS\tPXE\tPCI\tLLDP (switch / port / name)\tMODEL")
	for _, n := range hw.NIC {
		lldp := "-"
		if n.LLDP != nil {
			lldp = n.LLDP.SwitchID + " / " + n.LLDP.PortID + " / " + dash(n.LLDP.SwitchSystemName)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%v\t%s\t%s\t%s\n", n.Name, n.MAC, dash(n.IP), n.SpeedGbps, n.PXE, dash(n.PCIAddress), lldp, dash(n.Model))
	}
	tw.Flush()
	if wait == 0 {
		fmt.Fprintln(w, "(LLDP not listened for: --lldp-wait 0)")
	}
	fmt.Fprintln(w)

	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DISK\tTYPE\tSIZE\tMODEL\tSERIAL\tWWN\tHCTL")
	for _, s := range hw.Storage {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Type, disk.HumanSize(s.SizeBytes), dash(s.Model), dash(s.SerialNumber), dash(s.WWN), dash(s.HCTL))
	}
	tw.Flush()
	if len(hw.GPUs) > 0 {
		fmt.Fprintln(w)
		for _, g := range hw.GPUs {
			fmt.Fprintf(w, "gpu: %s %s:%s %s\n", g.Address, g.VendorID, g.DeviceID, strings.TrimSpace(g.VendorName+" "+g.DeviceName))
		}
	}
	fmt.Fprintf(w, "\n%d PCI devices (booty inventory --json lists them)\n", len(hw.PCIDevices))
}
