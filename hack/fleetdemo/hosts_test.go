package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/manager"
)

func demoHosts() []host {
	img := api.ImageSpec{URL: "http://10.0.2.2:8080/files/debian.img.zst", Checksum: "sha256:" + strings.Repeat("a", 64),
		Checksums: []string{"sha256:" + strings.Repeat("b", 64)}, Format: "raw"}
	return []host{
		{Name: "node-1", MAC: "52:54:00:de:00:01", BMCAddress: "ipmi://127.0.0.1:623", Username: "admin", PasswordFile: "node-1.password", Image: img, RootDevice: "/dev/vda"},
		{Name: "node-2", MAC: "52:54:00:de:00:02", BMCAddress: "redfish://127.0.0.1:8443/redfish/v1/Systems/1", Username: "admin", PasswordFile: "node-2.password", Image: img, RootDevice: "/dev/vda"},
	}
}

// The hosts file is two BareMetalHost documents in the fields bootyctl
// apply reads, each online with its BMC, a password file (never a
// password), the image with both checksums and the root device hint.
func TestHostsYAML(t *testing.T) {
	b, err := hostsYAML(demoHosts())
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(b), "\n---\n")
	if len(docs) != 3 { // the comment, then two documents
		t.Fatalf("%d parts, want a comment and 2 documents:\n%s", len(docs), b)
	}
	for i, d := range docs[1:] {
		var got map[string]any
		if err := yaml.Unmarshal([]byte(d), &got); err != nil {
			t.Fatalf("document %d: %v\n%s", i+1, err, d)
		}
		want := demoHosts()[i]
		spec := got["spec"].(map[string]any)
		bmc := spec["bmc"].(map[string]any)
		creds := bmc["credentials"].(map[string]any)
		img := spec["image"].(map[string]any)
		meta := got["metadata"].(map[string]any)
		checks := []struct {
			field string
			got   any
			want  any
		}{
			{"apiVersion", got["apiVersion"], "booty.dev/v1alpha1"},
			{"kind", got["kind"], "BareMetalHost"},
			{"metadata.name", meta["name"], want.Name},
			{"metadata.labels", meta["labels"].(map[string]any)[demoLabel], "fleet"},
			{"spec.online", spec["online"], true},
			{"spec.bootMACAddress", spec["bootMACAddress"], want.MAC},
			{"spec.bmc.address", bmc["address"], want.BMCAddress},
			{"spec.bmc.credentials.username", creds["username"], "admin"},
			{"spec.bmc.credentials.passwordFile", creds["passwordFile"], want.PasswordFile},
			{"spec.image.url", img["url"], want.Image.URL},
			{"spec.image.checksum", img["checksum"], want.Image.Checksum},
			{"spec.image.checksums", img["checksums"].([]any)[0], want.Image.Checksums[0]},
			{"spec.image.format", img["format"], "raw"},
			{"spec.rootDeviceHints.deviceName", spec["rootDeviceHints"].(map[string]any)["deviceName"], "/dev/vda"},
		}
		for _, c := range checks {
			if c.got != c.want {
				t.Errorf("document %d: %s = %v, want %v", i+1, c.field, c.got, c.want)
			}
		}
		if _, ok := creds["password"]; ok {
			t.Errorf("document %d has a password", i+1)
		}
	}
}

func TestHostsYAMLNamesMissingField(t *testing.T) {
	hs := demoHosts()
	hs[1].Image.Checksum = ""
	_, err := hostsYAML(hs)
	if err == nil || !strings.Contains(err.Error(), `host 2 ("node-2") has no image checksum`) {
		t.Fatalf("err = %v", err)
	}
}

func TestReadChecksums(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, checksumsFile)
	a, b := strings.Repeat("A", 64), strings.Repeat("0", 64)
	if err := os.WriteFile(p, []byte(b+"  debian.img\n"+a+" *debian.img.zst\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readChecksums(p, imageZst, imageRaw)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "sha256:"+strings.ToLower(a) || got[1] != "sha256:"+b {
		t.Fatalf("got %q", got)
	}
	if _, err := readChecksums(p, "other.img"); err == nil || !strings.Contains(err.Error(), "no sha256 of other.img") {
		t.Fatalf("missing name: %v", err)
	}
	if _, err := readChecksums(filepath.Join(dir, "nope"), imageZst); err == nil {
		t.Fatal("missing file: no error")
	}
}

// The pool's machine: pool.yaml is an inventory bootyd's own loader takes
// (its BMC, credentials from the password file, online), and its
// BareMetalHost document only adds the image, the hint and the label.
func TestPoolYAML(t *testing.T) {
	hs := demoHosts()
	hs[1].FromPool = true
	dir := t.TempDir()
	b, err := poolYAML(hs)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pool.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, hs[1].PasswordFile), []byte("redfish-demo-node-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	inv, err := manager.LoadInventory("inventory", filepath.Join(dir, "pool.yaml"))
	if err != nil {
		t.Fatalf("bootyd would refuse pool.yaml: %v\n%s", err, b)
	}
	ms, _ := inv.List(t.Context())
	if len(ms) != 1 || ms[0].Name != "node-2" || ms[0].BootMAC != hs[1].MAC || ms[0].BMCAddress != hs[1].BMCAddress ||
		!ms[0].Online || ms[0].Credentials == nil || ms[0].Credentials.Password != "redfish-demo-node-2" {
		t.Fatalf("pool.yaml holds %+v", ms)
	}
	if strings.Contains(string(b), "redfish-demo-node-2") {
		t.Fatal("pool.yaml holds the password")
	}
	hy, err := hostsYAML(hs)
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(hy), "\n---\n")
	var d2 map[string]any
	if err := yaml.Unmarshal([]byte(docs[2]), &d2); err != nil {
		t.Fatal(err)
	}
	if l := d2["metadata"].(map[string]any)["labels"].(map[string]any); l[manager.LabelProvider] != "inventory" || l[demoLabel] != "fleet" {
		t.Errorf("the pool machine's labels %v lack the Provisioner's (apply replaces labels)", l)
	}
	spec := d2["spec"].(map[string]any)
	if _, ok := spec["bmc"]; ok {
		t.Errorf("the pool machine's document sets a BMC: %v", spec)
	}
	if _, ok := spec["bootMACAddress"]; ok {
		t.Errorf("the pool machine's document sets a boot MAC: %v", spec)
	}
	if spec["image"] == nil || spec["rootDeviceHints"] == nil || spec["online"] != true {
		t.Errorf("the pool machine's document lacks image, hint or online: %v", spec)
	}
	if none, err := poolYAML(demoHosts()); none != nil || err != nil {
		t.Errorf("no pool machine: %q, %v", none, err)
	}
}
