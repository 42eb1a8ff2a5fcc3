package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/booty-dev/booty/pkg/api"
)

// bmcTimeout is the request bound of the bmc commands when --timeout is
// not given: bootyd answers once the BMC reports the wanted power state,
// and a soft power off may take minutes (bootyd bounds it).
const bmcTimeout = 10 * time.Minute

// bmcCommands returns every `bootyctl bmc` command by name.
func bmcCommands() map[string]command {
	m := map[string]command{}
	for _, c := range []command{bmcPowerCommand(), bmcBootdevCommand()} {
		c.group = "bmc"
		m[c.name] = c
	}
	return m
}

var powerVerbs = []string{api.PowerActionOn, api.PowerActionOff, api.PowerActionSoftOff, api.PowerActionReset, "status"}

// bmcWait gives the bmc commands their longer default request bound.
func bmcWait(c *client, fs *pflag.FlagSet) {
	if !fs.Changed("timeout") {
		c.http.Timeout = bmcTimeout
	}
}

func bmcPowerCommand() command {
	return command{
		name: "power", args: "on|off|soft-off|reset|status MACHINE",
		short: "power a machine on, off or reset it through its BMC; show its power",
		long: "Asks bootyd to drive the machine's BMC (IPMI or Redfish) with the\n" +
			"credentials bootyd keeps; they never reach bootyctl. on, off (the power\n" +
			"is cut), soft-off (the OS is asked to shut down) and reset (a hard\n" +
			"restart; a machine that is off is turned on) wait until the BMC reports\n" +
			"the new power state and print it; status prints the state the BMC\n" +
			"reports. Every call is recorded in the machine's events. A machine\n" +
			"without BMC or credentials gets bootyd's 409, a BMC that fails its 502\n" +
			"with the BMC's error.",
		example: "  bootyctl bmc power status node-1\n  bootyctl bmc power on node-1\n  bootyctl bmc power soft-off node-1 --timeout 15m",
		run: func(ctx context.Context, e *env, c *client, args []string, fs *pflag.FlagSet) error {
			verb, ref := args[0], args[1]
			if !slices.Contains(powerVerbs, verb) {
				return usageError{"power", fmt.Sprintf("%q: want one of %s", verb, strings.Join(powerVerbs, ", "))}
			}
			bmcWait(c, fs)
			var raw []byte
			var err error
			if verb == "status" {
				raw, err = c.do(ctx, http.MethodGet, machinePath(ref, "bmc", "power"), nil, nil)
			} else {
				raw, err = c.do(ctx, http.MethodPost, machinePath(ref, "bmc", "power"), nil, api.BMCPowerRequest{Action: verb})
			}
			if err != nil {
				return err
			}
			if e.output != formatTable {
				return writeRaw(e.stdout, e.output, raw)
			}
			var p api.BMCPower
			if err := json.Unmarshal(raw, &p); err != nil {
				return fmt.Errorf("decode bootyd's answer: %w", err)
			}
			if verb == "status" {
				_, err = fmt.Fprintf(e.stdout, "%s: power is %s\n", ref, cell(p.State))
			} else {
				_, err = fmt.Fprintf(e.stdout, "%s: power %s done, power is %s\n", ref, verb, cell(p.State))
			}
			return err
		},
		minArgs: 2, maxArgs: 2,
	}
}

var bootDevices = []string{"pxe", "disk", "cdrom"}

func bmcBootdevCommand() command {
	var (
		persistent bool
		mode       string
	)
	return command{
		name: "bootdev", args: "pxe|disk|cdrom MACHINE",
		short: "set the device a machine boots from next through its BMC",
		long: "Asks bootyd to set the machine's boot device through its BMC: pxe\n" +
			"(network boot, into the booty agent), disk or cdrom (virtual media).\n" +
			"The override holds for the next boot only, unless --persistent. The\n" +
			"call is recorded in the machine's events.",
		example: "  bootyctl bmc bootdev pxe node-1\n  bootyctl bmc bootdev disk node-1 --persistent --mode legacy",
		flags: func(fs *pflag.FlagSet) {
			fs.BoolVar(&persistent, "persistent", false, "keep the boot device for every following boot")
			fs.StringVar(&mode, "mode", "uefi", "firmware boot mode: uefi or legacy")
		},
		run: func(ctx context.Context, e *env, c *client, args []string, fs *pflag.FlagSet) error {
			dev, ref := args[0], args[1]
			if !slices.Contains(bootDevices, dev) {
				return usageError{"bootdev", fmt.Sprintf("%q: want one of %s", dev, strings.Join(bootDevices, ", "))}
			}
			if mode != "uefi" && mode != "legacy" {
				return usageError{"--mode", fmt.Sprintf("%q: want uefi or legacy", mode)}
			}
			bmcWait(c, fs)
			raw, err := c.do(ctx, http.MethodPost, machinePath(ref, "bmc", "bootdev"), nil,
				api.BMCBootDeviceRequest{Device: dev, Persistent: persistent, Mode: mode})
			if err != nil {
				return err
			}
			if e.output != formatTable {
				return writeRaw(e.stdout, e.output, raw)
			}
			var b api.BMCBootDeviceRequest
			if err := json.Unmarshal(raw, &b); err != nil {
				return fmt.Errorf("decode bootyd's answer: %w", err)
			}
			when := "next boot"
			if b.Persistent {
				when = "every boot"
			}
			_, err = fmt.Fprintf(e.stdout, "%s: boots from %s (%s, %s)\n", ref, cell(b.Device), when, cell(b.Mode))
			return err
		},
		minArgs: 2, maxArgs: 2,
	}
}
