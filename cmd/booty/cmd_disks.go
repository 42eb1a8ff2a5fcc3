package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"

	"github.com/booty-dev/booty/pkg/disk"
)

func init() {
	register(command{name: "disks", summary: "list disks; with --hints, show which disk would be selected", run: runDisks})
}

// runDisks lists the disks the agent would consider. With --hints or
// --device it also evaluates the selection exactly as provisioning would
// and prints the chosen disk and why each other disk was rejected; it exits
// 1 when nothing matches.
func runDisks(args []string) int {
	fs := pflag.NewFlagSet("disks", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: booty disks [--json] [--hints JSON] [--device DEV] [--min-size SIZE]\n\n"+
			"Lists block devices from sysfs. With --hints (Ironic root device hints, e.g.\n"+
			"'{\"size\": \">= 60\", \"rotational\": false}') or --device it shows which disk\n"+
			"provisioning would select and why every other disk was rejected.\n\n")
		fs.PrintDefaults()
	}
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	hintsJSON := fs.String("hints", "", "root device hints as a JSON object")
	device := fs.String("device", "", "target device as in the config's disk.device (/dev/vda, vda, /dev/disk/by-path/...)")
	var minSize sizeValue
	fs.Var(&minSize, "min-size", "reject disks smaller than `SIZE`, like 60G or 4096 (bytes)")
	sysRoot := fs.String("sys", "/sys", "sysfs root")
	devRoot := fs.String("dev", "/dev", "device node root")
	if code := parseFlags(fs, args, os.Stderr, "booty disks"); code >= 0 {
		return code
	}
	m := disk.NewManager()
	m.SysRoot, m.DevRoot = *sysRoot, *devRoot

	if *hintsJSON == "" && *device == "" {
		disks, err := m.Disks()
		if err != nil {
			fmt.Fprintf(os.Stderr, "booty disks: %v\n", err)
			return 1
		}
		if *asJSON {
			return printJSON(disks)
		}
		printDiskTable(os.Stdout, disks)
		return 0
	}

	spec := disk.Spec{Device: *device}
	if *hintsJSON != "" {
		var raw map[string]any
		if err := json.Unmarshal([]byte(*hintsJSON), &raw); err != nil {
			fmt.Fprintf(os.Stderr, "booty disks: parse --hints: %v\n", err)
			return 2
		}
		h, err := disk.ParseHints(raw)
		if err != nil {
			fmt.Fprintf(os.Stderr, "booty disks: --hints: %v\n", err)
			return 2
		}
		spec.Hints = h
	}
	cands, err := m.Evaluate(spec, int64(minSize))
	if err != nil {
		fmt.Fprintf(os.Stderr, "booty disks: %v\n", err)
		return 1
	}
	chosen := disk.Choose(cands)
	if *asJSON {
		rc := printJSON(struct {
			Selected   *disk.Disk       `json:"selected"`
			Candidates []disk.Candidate `json:"candidates"`
		}{chosen, cands})
		if chosen == nil && rc == 0 {
			return 1
		}
		return rc
	}
	disks := make([]disk.Disk, len(cands))
	for i, c := range cands {
		disks[i] = c.Disk
	}
	printDiskTable(os.Stdout, disks)
	fmt.Println()
	if chosen == nil {
		fmt.Println("selected: none")
	} else {
		fmt.Printf("selected: %s (%s, smallest matching disk)\n", chosen.Path, disk.HumanSize(chosen.Size))
	}
	for _, c := range cands {
		switch {
		case chosen != nil && c.Disk.Name == chosen.Name:
		case len(c.Reasons) == 0:
			fmt.Printf("  %s: matches, but a smaller disk was chosen\n", c.Disk.Name)
		default:
			fmt.Printf("  %s: %s\n", c.Disk.Name, strings.Join(c.Reasons, "; "))
		}
	}
	if chosen == nil {
		return 1
	}
	return 0
}

func printDiskTable(w io.Writer, disks []disk.Disk) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSIZE\tMODEL\tSERIAL\tTRAN\tROTA\tRM\tRO\tBOOT")
	yn := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, d := range disks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Name, disk.HumanSize(d.Size), dash(d.Model), dash(d.Serial),
			dash(d.Tran), yn(d.Rotational), yn(d.Removable), yn(d.ReadOnly), yn(d.BootMedium))
	}
	tw.Flush()
}

func printJSON(v any) int {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(os.Stderr, "booty disks: write json: %v\n", err)
		return 1
	}
	return 0
}
