package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/manager"
)

// The Debian image files make debian-image writes.
const (
	imageZst      = "debian.img.zst"
	imageRaw      = "debian.img"
	checksumsFile = "SHA256SUMS"
)

// demoLabel marks the demo's machines.
const demoLabel = "booty.dev/demo"

// host is one machine of the demo as bootyctl apply registers it.
type host struct {
	Name         string
	MAC          string
	BMCAddress   string
	Username     string
	PasswordFile string // relative to hosts.yaml's directory, or absolute
	Image        api.ImageSpec
	RootDevice   string
	// FromPool: the machine comes from the demo's QEMU pool, an inventory
	// bootyd's Provisioner loop brings into the BMDB (pool.yaml, with its
	// BMC and credentials); its BareMetalHost document then only adds the
	// image, the hint and the demo's label.
	FromPool bool
}

// hostDoc is a BareMetalHost document in the fields bootyctl apply reads
// (metal3's names).
type hostDoc struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels,omitempty"`
	} `json:"metadata"`
	Spec struct {
		Online          bool                 `json:"online"`
		BootMACAddress  string               `json:"bootMACAddress,omitempty"`
		BMC             *hostBMC             `json:"bmc,omitempty"`
		Image           api.ImageSpec        `json:"image"`
		RootDeviceHints *api.RootDeviceHints `json:"rootDeviceHints,omitempty"`
	} `json:"spec"`
}

type hostBMC struct {
	Address     string `json:"address"`
	Credentials struct {
		Username     string `json:"username"`
		PasswordFile string `json:"passwordFile"`
	} `json:"credentials"`
}

// hostsYAML returns the hosts as BareMetalHost documents separated by
// "---", each online (so the reconciler provisions it and boots it) with
// its BMC, credentials from a password file, image and root device hint.
// It fails, naming the host and the field, when one lacks a field.
func hostsYAML(hosts []host) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# The fleet demo's machines (go run ./hack/fleetdemo --help); bootyctl apply -f this file.\n")
	for i, h := range hosts {
		for _, f := range []struct{ name, v string }{
			{"name", h.Name}, {"MAC", h.MAC}, {"BMC address", h.BMCAddress}, {"username", h.Username},
			{"password file", h.PasswordFile}, {"image URL", h.Image.URL}, {"image checksum", h.Image.Checksum},
		} {
			if f.v == "" {
				return nil, fmt.Errorf("hosts yaml: host %d (%q) has no %s", i+1, h.Name, f.name)
			}
		}
		var d hostDoc
		d.APIVersion, d.Kind = "booty.dev/v1alpha1", "BareMetalHost"
		d.Metadata.Name = h.Name
		d.Metadata.Labels = map[string]string{demoLabel: "fleet"}
		if h.FromPool {
			// apply replaces the labels: keep the one the Provisioner loop
			// knows its machines by.
			d.Metadata.Labels[manager.LabelProvider] = poolSource
		}
		d.Spec.Online = true
		if !h.FromPool {
			d.Spec.BootMACAddress = h.MAC
			d.Spec.BMC = &hostBMC{Address: h.BMCAddress}
			d.Spec.BMC.Credentials.Username = h.Username
			d.Spec.BMC.Credentials.PasswordFile = h.PasswordFile
		}
		d.Spec.Image = h.Image
		if h.RootDevice != "" {
			d.Spec.RootDeviceHints = &api.RootDeviceHints{DeviceName: h.RootDevice}
		}
		y, err := yaml.Marshal(d)
		if err != nil {
			return nil, fmt.Errorf("hosts yaml: host %s: %w", h.Name, err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.Bytes(), nil
}

// poolSource is the source name bootyd gives its --inventory.
const poolSource = "inventory"

// poolEntry is one machine of pool.yaml in the fields of bootyd's
// --inventory (pkg/manager.LoadInventory).
type poolEntry struct {
	Name            string `json:"name"`
	BootMAC         string `json:"bootMAC"`
	BMCAddress      string `json:"bmcAddress"`
	CredentialsName string `json:"credentialsName"`
	Username        string `json:"username"`
	PasswordFile    string `json:"passwordFile"`
	Online          bool   `json:"online"`
}

// poolYAML returns the inventory of the hosts FromPool (the demo's QEMU
// pool), each online with its BMC and credentials from its password file
// (never a password), or nil when no host is.
func poolYAML(hosts []host) ([]byte, error) {
	var f struct {
		Machines []poolEntry `json:"machines"`
	}
	for _, h := range hosts {
		if h.FromPool {
			f.Machines = append(f.Machines, poolEntry{Name: h.Name, BootMAC: h.MAC, BMCAddress: h.BMCAddress,
				CredentialsName: "bmc-" + h.Name, Username: h.Username, PasswordFile: h.PasswordFile, Online: true})
		}
	}
	if len(f.Machines) == 0 {
		return nil, nil
	}
	y, err := yaml.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("pool yaml: %w", err)
	}
	return append([]byte("# The fleet demo's QEMU pool: bootyd --inventory brings these machines into its database.\n"), y...), nil
}

// readChecksums reads a sha256sum file and returns the sums of the
// named files as "sha256:HEX", in the order asked. It fails naming the
// file when one is missing or malformed.
func readChecksums(path string, names ...string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read checksums: %w", err)
	}
	defer f.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 {
			continue
		}
		sums[strings.TrimPrefix(fields[1], "*")] = fields[0]
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read checksums %s: %w", path, err)
	}
	out := make([]string, 0, len(names))
	var errs []error
	for _, n := range names {
		s, ok := sums[n]
		if !ok || len(s) != 64 || strings.Trim(strings.ToLower(s), "0123456789abcdef") != "" {
			errs = append(errs, fmt.Errorf("read checksums %s: no sha256 of %s", path, n))
			continue
		}
		out = append(out, "sha256:"+strings.ToLower(s))
	}
	return out, errors.Join(errs...)
}
