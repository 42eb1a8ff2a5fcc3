package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"sync"

	"github.com/spf13/pflag"
	xssh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/booty-dev/booty/pkg/bmc"
	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/manager"
	"github.com/booty-dev/booty/pkg/manager/ssh"
	"github.com/booty-dev/booty/pkg/provisioner"
	"github.com/booty-dev/booty/pkg/reconciler"
)

const usageLoops = `
Machines with a BMC (registered with bmc.address and credentials) are driven
by the host reconciler (--reconcile, on by default): registering → inspected
(powered on into PXE, the agent reports the hardware) → available → with an
image in the spec and online: provisioned and booted from disk; powered on
or off as online says; deprovisioned when the image is removed. A failure
puts the machine in an error state with the reason and is retried with a
backoff kept in the database (--reconcile-error-backoff doubling up to
--reconcile-error-backoff-max). Machines without a BMC are left to their
operator's commands. The Recoverer (--recover, on by default) power-cycles,
through the BMC, machines whose agent went silent. With several replicas on
one PostgreSQL, each machine is worked by one replica at a time.

The Provisioner (--inventory FILE, off by default) brings the machines of an
inventory file into the database, labelled booty.dev/provider=inventory, up
to --provisioner-max-count: with their BMC, online as the file says, and the
credentials it names stored under credentialsName. A password is read from
passwordFile (its first line; relative to the inventory), never written in
the inventory. It refuses to act while the file and the database disagree
about a machine (one it brought in that the file lost and that has not
failed). A bad inventory stops bootyd at start, and so does a
--provisioner-* flag without --inventory.

  machines:
  - name: node-1
    bootMAC: 52:54:00:12:34:56
    bmcAddress: redfish://10.0.1.11/redfish/v1/Systems/1
    credentialsName: bmc-node-1
    username: admin
    passwordFile: node-1.pass
    online: true
    sshAddress: 10.0.2.11:22   # for the Initializer

The Initializer (on with --initializer-executable, needs --inventory) takes
over registered machines of the inventory that run Linux and have no agent:
it logs in over SSH at their sshAddress (as --initializer-ssh-user, with the
ed25519 key at --ssh-key-path, generated when missing, its public key
logged at start for authorized_keys; host keys checked against
--initializer-known-hosts), uploads booty and runs 'booty takeover', which
kexecs into the agent; the agent enrolls with --initializer-endpoint
(default --public-url). Its flags without --initializer-executable are
refused.

  bootyd --state-dir /var/lib/bootyd --public-url https://10.0.0.1:8443 … \
      --inventory /etc/booty/inventory.yaml \
      --initializer-executable /usr/lib/booty/booty \
      --initializer-ca-cert /etc/booty/ca.crt \
      --initializer-known-hosts /etc/booty/known_hosts
`

// loopsConfig is the command line of bootyd's control loops.
type loopsConfig struct {
	reconcile bool
	rec       reconciler.Config
	recover   bool
	recoverer manager.RecovererConfig
	// bmc tunes the BMC drivers of both loops.
	bmc bmc.Options

	inventoryPath string
	prov          manager.ProvisionerConfig
	// inventory is loaded by check when inventoryPath is set.
	inventory *manager.Inventory

	init            manager.InitializerConfig
	sshKey          *manager.SSHKey
	sshUser         string
	knownHosts      string
	insecureHostKey bool
	// hostKeys is built by check from knownHosts or insecureHostKey.
	hostKeys xssh.HostKeyCallback

	// fs is the flag set, for check to find flags of a loop that is off.
	fs *pflag.FlagSet
}

// inventorySource names the Provisioner's source: the value of the
// booty.dev/provider label of the machines it brings in.
const inventorySource = "inventory"

// addLoopFlags declares --reconcile, --recover and their loops' flags.
func addLoopFlags(fs *pflag.FlagSet, c *loopsConfig) {
	c.fs = fs
	fs.BoolVar(&c.reconcile, "reconcile", true, "run the host reconciler: drive machines with a BMC through inspection, provisioning and power as their spec and online say")
	c.rec.AddFlags(fs, "reconcile")
	fs.BoolVar(&c.recover, "recover", true, "run the Recoverer: power-cycle, through their BMC, machines whose agent went silent")
	c.recoverer.AddFlags(fs)
	fs.StringVar(&c.inventoryPath, "inventory", "", "run the Provisioner: bring the machines of this inventory file (YAML or JSON) into the database (default off)")
	c.prov.MaxCount = 1000
	c.prov.AddFlags(fs)
	c.init.AddFlags(fs)
	fs.StringVar(&c.sshUser, "initializer-ssh-user", "root", "user the Initializer logs in as")
	fs.StringVar(&c.knownHosts, "initializer-known-hosts", "", "OpenSSH known_hosts file the machines' host keys are checked against")
	fs.BoolVar(&c.insecureHostKey, "initializer-insecure-ignore-host-key", false, "accept any SSH host key (a machine in the middle could then take the upload)")
	c.sshKey = &manager.SSHKey{}
	c.sshKey.AddFlags(fs)
	fs.Lookup("ssh-key-path").Usage += " (default <state-dir>/initializer_ed25519)"
	fs.Lookup("initializer-executable").Usage += "; given, the Initializer runs (it needs --inventory)"
	fs.Lookup("initializer-endpoint").Usage += " (default --public-url)"
}

// check validates the loops' flags (copies: the loops are built later, with
// the database), loads --inventory and, for the Initializer, defaults the
// endpoint to publicURL and the SSH key to <stateDir>/initializer_ed25519.
func (c *loopsConfig) check(publicURL, stateDir string) error {
	if c.reconcile {
		rc := c.rec
		rc.Factory = provisioner.NewFactory(nil, provisioner.Config{})
		if err := rc.Check(); err != nil {
			return fmt.Errorf("--reconcile-*: %w", err)
		}
	}
	if c.recover {
		rv := c.recoverer
		if err := rv.Check(); err != nil {
			return fmt.Errorf("--recoverer-*: %w", err)
		}
	}
	if err := c.offLoopFlags(); err != nil {
		return err
	}
	if c.inventoryPath != "" {
		pc := c.prov
		if err := pc.Check(); err != nil {
			return fmt.Errorf("--provisioner-*: %w", err)
		}
		inv, err := manager.LoadInventory(inventorySource, c.inventoryPath)
		if err != nil {
			return fmt.Errorf("--inventory: %w", err)
		}
		c.inventory = inv
	}
	if len(c.init.Executable) > 0 {
		return c.checkInitializer(publicURL, stateDir)
	}
	return nil
}

// offLoopFlags refuses a --provisioner-* flag without --inventory and an
// Initializer flag without --initializer-executable: the operator meant a
// loop that would not run.
func (c *loopsConfig) offLoopFlags() error {
	var err error
	c.fs.Visit(func(f *pflag.Flag) {
		switch {
		case err != nil:
		case strings.HasPrefix(f.Name, "provisioner-") && c.inventoryPath == "":
			err = fmt.Errorf("--%s is given without --inventory: the Provisioner is off", f.Name)
		case (strings.HasPrefix(f.Name, "initializer-") || f.Name == "ssh-key-path") && len(c.init.Executable) == 0:
			err = fmt.Errorf("--%s is given without --initializer-executable: the Initializer is off", f.Name)
		}
	})
	return err
}

// checkInitializer validates the Initializer's flags and builds its host
// key check.
func (c *loopsConfig) checkInitializer(publicURL, stateDir string) error {
	if c.inventory == nil {
		return errors.New("--initializer-executable needs --inventory: the Initializer takes over the inventory's machines at their sshAddress")
	}
	if c.init.Endpoint == "" {
		c.init.Endpoint = publicURL
	}
	if c.init.Endpoint == "" {
		return errors.New("--initializer-executable needs --initializer-endpoint or --public-url: the URL the taken-over agent enrolls with")
	}
	if u, err := url.Parse(c.init.Endpoint); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("--initializer-endpoint %q: want an http(s)://host[:port] URL", c.init.Endpoint)
	}
	ic := c.init
	if err := ic.Check(); err != nil {
		return fmt.Errorf("--initializer-*: %w", err)
	}
	switch {
	case (c.knownHosts == "") == !c.insecureHostKey:
		return errors.New("--initializer-executable needs exactly one of --initializer-known-hosts and --initializer-insecure-ignore-host-key")
	case c.insecureHostKey:
		c.hostKeys = xssh.InsecureIgnoreHostKey()
	default:
		cb, err := knownhosts.New(c.knownHosts)
		if err != nil {
			return fmt.Errorf("--initializer-known-hosts: %w", err)
		}
		c.hostKeys = cb
	}
	if c.sshKey.KeyPersistPath == "" {
		if stateDir == "" {
			return errors.New("--initializer-executable needs --ssh-key-path or --state-dir (the key goes to <state-dir>/initializer_ed25519)")
		}
		c.sshKey.KeyPersistPath = filepath.Join(stateDir, "initializer_ed25519")
	}
	if c.sshUser == "" {
		return errors.New("--initializer-ssh-user is empty")
	}
	return nil
}

// startLoops starts the enabled loops over db and returns the function that
// stops them and waits for them to end.
func startLoops(ctx context.Context, c loopsConfig, db *bmdb.DB, log *slog.Logger) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	stop := func() { cancel(); wg.Wait() }
	if c.reconcile {
		c.rec.Logger = log
		c.rec.Factory = provisioner.NewFactory(db, provisioner.Config{BMC: c.bmc, Logger: log})
		rec, err := reconciler.New(db, c.rec)
		if err != nil {
			cancel()
			return nil, err
		}
		wg.Go(func() {
			if err := rec.Run(ctx); err != nil {
				log.Error("host reconciler stopped", "err", err)
			}
		})
	}
	if c.recover {
		c.recoverer.Logger = log
		rv, err := manager.NewRecoverer(&manager.BMCPowerCycler{DB: db, Options: c.bmc}, c.recoverer)
		if err != nil {
			stop()
			return nil, err
		}
		wg.Go(func() {
			if err := manager.RunControlLoop(ctx, db, rv); err != nil {
				log.Error("recoverer stopped", "err", err)
			}
		})
	}
	if c.inventory != nil {
		c.prov.Logger = log
		p, err := manager.NewProvisioner(c.inventory, c.prov)
		if err != nil {
			stop()
			return nil, err
		}
		wg.Go(func() {
			if err := p.Run(ctx, db); err != nil {
				log.Error("provisioner stopped", "err", err)
			}
		})
	}
	initialize := len(c.init.Executable) > 0
	if initialize {
		if err := startInitializer(ctx, &wg, c, db, log); err != nil {
			stop()
			return nil, err
		}
	}
	if !c.reconcile && !c.recover && c.inventory == nil {
		return stop, nil
	}
	log.Info("control loops started", "reconcile", c.reconcile, "recover", c.recover,
		"provision", c.inventoryPath, "initialize", initialize)
	return stop, nil
}

// startInitializer loads or generates the SSH key (logging its public half
// for authorized_keys) and starts the Initializer's loop in wg.
func startInitializer(ctx context.Context, wg *sync.WaitGroup, c loopsConfig, db *bmdb.DB, log *slog.Logger) error {
	signer, err := c.sshKey.Signer()
	if err != nil {
		return fmt.Errorf("initializer: %w", err)
	}
	log.Info("initializer SSH key", "path", c.sshKey.KeyPersistPath,
		"authorized_key", strings.TrimSpace(string(xssh.MarshalAuthorizedKey(signer.PublicKey()))))
	c.init.Logger = log
	client := &ssh.PlainClient{Signer: signer, Username: c.sshUser, HostKeyCallback: c.hostKeys}
	in, err := manager.NewInitializer(c.inventory, client, c.init)
	if err != nil {
		return err
	}
	wg.Go(func() {
		if err := manager.RunControlLoop(ctx, db, in); err != nil {
			log.Error("initializer stopped", "err", err)
		}
	})
	return nil
}
