package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"

	"github.com/booty-dev/booty/pkg/config"
)

func init() {
	register(command{
		name:    "config",
		summary: "validate or show a MachineConfig file",
		run:     func(args []string) int { return runConfig(args, os.Stdout, os.Stderr) },
	})
}

const configUsage = `Usage:
  booty config validate FILE...   check each file; print "FILE: ok" or every problem
  booty config show [--show-secrets] FILE
                                  print FILE decoded, with defaults applied and secrets
                                  redacted: server.token, cloudInit.userData and
                                  networkConfig, postProvisionCommands, and the user info
                                  and query of every URL (--show-secrets prints them, for
                                  your own terminal only)

FILE is a MachineConfig in YAML or JSON ("-" reads standard input), or a
telekom BOOTy vars file (export KEY="value" lines) when --vars is given.

Exit status: 0 all valid, 1 a file is invalid or unreadable, 2 usage error.
Reference: docs/config.md
`

// runConfig implements "booty config"; it returns the exit status.
func runConfig(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, configUsage)
		return 2
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, configUsage)
		return 0
	case "validate", "show":
	default:
		fmt.Fprintf(stderr, "booty config: unknown subcommand %q\n\n%s", sub, configUsage)
		return 2
	}

	fs := pflag.NewFlagSet("booty config "+sub, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	vars := fs.Bool("vars", false, "read FILE as a telekom BOOTy /deploy/vars file instead of a MachineConfig")
	var showSecrets *bool
	if sub == "show" {
		showSecrets = fs.Bool("show-secrets", false, "print secrets as written instead of <redacted> (never into a log)")
	}
	fs.Usage = func() {
		fmt.Fprint(stderr, configUsage+"\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "booty config %s: %v\nRun 'booty config %s --help' for usage.\n", sub, err, sub)
		return 2
	}
	files := fs.Args()
	if len(files) == 0 || (sub == "show" && len(files) != 1) {
		fmt.Fprintf(stderr, "booty config %s: want %s\n\n%s", sub, map[string]string{"validate": "at least one FILE", "show": "exactly one FILE"}[sub], configUsage)
		return 2
	}

	if sub == "show" {
		cfg, err := loadConfigFile(files[0], *vars)
		if err != nil {
			printProblems(stderr, files[0], err)
			return 1
		}
		if !*showSecrets {
			cfg = cfg.Redacted()
		}
		out, err := config.MarshalYAML(cfg)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", files[0], err)
			return 1
		}
		stdout.Write(out)
		return 0
	}

	status := 0
	for _, f := range files {
		if _, err := loadConfigFile(f, *vars); err != nil {
			printProblems(stdout, f, err)
			status = 1
			continue
		}
		fmt.Fprintf(stdout, "%s: ok\n", f)
	}
	return status
}

// loadConfigFile reads and parses one file ("-" is standard input).
func loadConfigFile(name string, vars bool) (*config.MachineConfig, error) {
	var data []byte
	var err error
	if name == "-" {
		data, err = io.ReadAll(io.LimitReader(os.Stdin, config.MaxConfigSize+1))
	} else {
		data, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, err
	}
	if len(data) > config.MaxConfigSize {
		return nil, fmt.Errorf("larger than %d bytes", config.MaxConfigSize)
	}
	if vars {
		cfg, _, err := config.ParseVars(data)
		return cfg, err
	}
	return config.Parse(data)
}

// printProblems writes "FILE: problem" for each problem of a
// ValidationError, or one line for any other error.
func printProblems(w io.Writer, name string, err error) {
	var ve *config.ValidationError
	if errors.As(err, &ve) {
		for _, p := range ve.Problems {
			fmt.Fprintf(w, "%s: %s\n", name, p)
		}
		return
	}
	fmt.Fprintf(w, "%s: %v\n", name, err)
}
