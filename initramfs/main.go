// Command initramfs builds the booty initramfs:
//
//	CGO_ENABLED=0 go build -o booty ./cmd/booty
//	go run ./initramfs --booty booty --out booty.cpio.zst --kernel-out vmlinuz
//
// See package github.com/booty-dev/booty/pkg/initramfs for what goes in.
package main

import (
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/pflag"

	"github.com/booty-dev/booty/pkg/initramfs"
)

//go:embed modules.txt
var defaultModules []byte

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, stderr io.Writer) int {
	fs := pflag.NewFlagSet("initramfs", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		kver        = fs.String("kernel-version", "", "kernel version whose modules go in (default: newest vmlinuz-* in --boot-dir)")
		bootDir     = fs.String("boot-dir", "/boot", "directory with vmlinuz-KVER and config-KVER")
		modRoot     = fs.String("modules-root", "/lib/modules", "directory with KVER/ module trees")
		booty       = fs.String("booty", "", "booty binary (static, CGO_ENABLED=0) to install as /init (required)")
		out         = fs.String("out", "", "output initramfs path (required)")
		kernelOut   = fs.String("kernel-out", "", "also copy the chosen vmlinuz here")
		modList     = fs.String("modules-list", "", "module list file (default: the built-in initramfs/modules.txt)")
		noModules   = fs.Bool("no-modules", false, "include no kernel modules")
		deploy      = fs.String("deploy", "", "directory copied to /deploy in the initramfs")
		extras      = fs.StringArray("extra", nil, "extra file or directory as SRC:DST (repeatable)")
		ca          = fs.String("ca-certs", "", `CA bundle for /etc/ssl/certs/ca-certificates.crt (default: the host's; "-" for none)`)
		compression = fs.String("compression", "", "lz4, zstd, gzip or none (default: lz4 if the kernel config has CONFIG_RD_LZ4=y, else zstd if CONFIG_RD_ZSTD=y, else gzip)")
	)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: go run ./initramfs --booty PATH --out PATH [flags]\n\nBuilds the booty initramfs: /init, kernel modules with their dependencies,\nmodules metadata, CA bundle, optional /deploy and extra files.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == pflag.ErrHelp {
			return 0
		}
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if *booty == "" || *out == "" {
		fmt.Fprintln(stderr, "initramfs: --booty and --out are required")
		fs.Usage()
		return 2
	}
	opts := initramfs.Options{
		KernelVersion: *kver, BootDir: *bootDir, ModulesRoot: *modRoot,
		Init: *booty, Out: *out, KernelOut: *kernelOut,
		DeployDir: *deploy, CACerts: *ca, Compression: initramfs.Compression(*compression), Log: log,
	}
	for _, e := range *extras {
		x, err := initramfs.ParseExtra(e)
		if err != nil {
			fmt.Fprintln(stderr, "initramfs:", err)
			return 2
		}
		opts.Extra = append(opts.Extra, x)
	}
	if !*noModules {
		list := defaultModules
		if *modList != "" {
			b, err := os.ReadFile(*modList)
			if err != nil {
				fmt.Fprintln(stderr, "initramfs: read module list:", err)
				return 1
			}
			list = b
		}
		specs, err := initramfs.ParseModuleList(bytes.NewReader(list))
		if err != nil {
			fmt.Fprintln(stderr, "initramfs:", err)
			return 1
		}
		opts.Modules = specs
	}
	if _, err := initramfs.Build(opts); err != nil {
		fmt.Fprintln(stderr, "initramfs:", err)
		return 1
	}
	return 0
}
