package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
)

const (
	applyPassword  = "apply-pw-31c8e0"
	applyPassword2 = "apply-pw-second-77d1"
	envPassword    = "env-pw-0b9f44"
)

const hostsYAML = `# two hosts
apiVersion: booty.dev/v1alpha1
kind: BareMetalHost
metadata: {name: rack1-node3, labels: {rack: r1}}
spec:
  online: true
  bootMACAddress: 52:54:00:12:34:56
  bmc: {address: "ipmi://127.0.0.1:6230", credentials: {username: admin, passwordFile: ./pw}, disableCertificateVerification: false}
  image: {url: "https://10.0.0.1/files/debian.img.zst", checksum: "sha256:ABCD", format: raw}
  rootDeviceHints: {minSizeGigabytes: 10, rotational: false}
  userData: {file: ./user-data}
  configOverrides: {handoff: reboot, efiBootEntry: false}
---
apiVersion: metal3.io/v1alpha1
kind: BareMetalHost
metadata:
  name: rack1-node4
  namespace: metal3
spec:
  bootMACAddress: 52-54-00-12-34-57
  bmc:
    address: redfish://127.0.0.1:8000/redfish/v1/Systems/1
    credentialsName: shared-bmc
    credentials: {username: root, passwordEnv: BOOTYCTL_TEST_BMC_PW}
  userData: "#cloud-config\nhostname: node4\n"
`

// writeHosts writes the hosts YAML (with checksum sum), its password and
// user-data files into a temp dir and returns the YAML's path.
func writeHosts(t *testing.T, dir, yaml string) string {
	t.Helper()
	sum := "sha256:" + strings.Repeat("ab", 32)
	files := map[string]string{"hosts.yaml": strings.ReplaceAll(yaml, "sha256:ABCD", sum),
		"pw": applyPassword + "\n", "user-data": "#cloud-config\nusers: []\n"}
	for n, c := range files {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil && n != "hosts.yaml" {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "hosts.yaml")
}

// ctlIn is ctl with stdin.
func ctlIn(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb, now: time.Now, isTerminal: func(io.Writer) bool { return false }}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := runEnv(ctx, e, args)
	t.Logf("bootyctl %s → %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out.String(), errb.String())
	return code, out.String(), errb.String()
}

// ctlRunner returns a function that runs bootyctl with the connection
// flags c, keeps its stdout and stderr in all, fails the test unless it
// exits with want, and returns its stdout and stderr.
func ctlRunner(t *testing.T, c []string, all *strings.Builder) func(want int, args ...string) string {
	return func(want int, args ...string) string {
		t.Helper()
		code, out, stderr := ctl(t, append(args, c...)...)
		all.WriteString(out + stderr)
		if code != want {
			t.Fatalf("bootyctl %s: exit %d, want %d: %s", strings.Join(args, " "), code, want, stderr)
		}
		return out + stderr
	}
}

// TestApplyAgainstBootyd applies BareMetalHost YAML to the real bootyd:
// created, unchanged, a dry run that changes nothing, configured, new
// credentials only, stdin, and the passwords in no output and no log.
func TestApplyAgainstBootyd(t *testing.T) {
	t.Setenv("BOOTYCTL_TEST_BMC_PW", envPassword)
	srvURL, logs := startBootydWith(t, nil)
	c := conn(srvURL, tokenFile(t, testToken))
	var outputs strings.Builder
	run := ctlRunner(t, c, &outputs)
	show := func(name string) api.MachineDetail {
		t.Helper()
		var d api.MachineDetail
		if err := json.Unmarshal([]byte(run(0, "machines", "show", name, "-o", "json")), &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	dir := t.TempDir()
	f := writeHosts(t, dir, hostsYAML)

	out := run(0, "apply", "-f", f, "--dry-run")
	for _, w := range []string{"rack1-node3 created (dry run)\n", "  bootMACAddress: \"52:54:00:12:34:56\"\n", "  labels.rack: \"r1\"\n",
		"  bmc.credentialsRef: \"bmc-rack1-node3\"\n", "  spec.userData: \"(24 bytes, sha256 ", "rack1-node4 created (dry run)\n"} {
		if !strings.Contains(out, w) {
			t.Errorf("dry run of the creation lacks %q:\n%s", w, out)
		}
	}
	if code, _, _ := ctl(t, append([]string{"machines", "show", "rack1-node3"}, c...)...); code != 1 {
		t.Fatal("--dry-run created rack1-node3")
	}
	if out := run(0, "apply", "-f", f); out != "rack1-node3 created\nrack1-node4 created\n" {
		t.Fatalf("first apply printed %q", out)
	}
	d := show("rack1-node3")
	if d.BootMAC != "52:54:00:12:34:56" || !d.Online || d.Labels["rack"] != "r1" || d.BMC.Address != "ipmi://127.0.0.1:6230" ||
		d.BMC.CredentialsRef != "bmc-rack1-node3" || d.Spec.Image.Format != "raw" || d.Spec.RootDeviceHints == nil ||
		d.Spec.RootDeviceHints.MinSizeGigabytes != 10 || d.Spec.RootDeviceHints.Rotational == nil || *d.Spec.RootDeviceHints.Rotational ||
		d.Spec.UserData != "#cloud-config\nusers: []\n" {
		t.Fatalf("rack1-node3 as created: %+v", d)
	}
	var over map[string]any
	if err := json.Unmarshal(d.Spec.ConfigOverrides, &over); err != nil || over["handoff"] != "reboot" || over["efiBootEntry"] != false {
		t.Fatalf("rack1-node3's configOverrides as created: %s (%v)", d.Spec.ConfigOverrides, err)
	}
	d4 := show("rack1-node4")
	if d4.BootMAC != "52:54:00:12:34:57" || d4.Online || d4.BMC.CredentialsRef != "shared-bmc" || d4.Spec.UserData != "#cloud-config\nhostname: node4\n" {
		t.Fatalf("rack1-node4 as created: %+v", d4)
	}

	if out := run(0, "apply", "-f", f); out != "rack1-node3 unchanged\nrack1-node4 unchanged\n" {
		t.Fatalf("second apply printed %q", out)
	}
	if d2 := show("rack1-node3"); d2.Generation != d.Generation || !d2.UpdatedAt.Equal(d.UpdatedAt) {
		t.Fatalf("an unchanged apply changed rack1-node3: generation %d → %d", d.Generation, d2.Generation)
	}

	changed := strings.Replace(strings.Replace(hostsYAML, "online: true", "online: false", 1), "debian.img.zst", "debian-13.img.zst", 1)
	writeHosts(t, dir, changed)
	out = run(0, "apply", "-f", f, "--dry-run")
	for _, w := range []string{"rack1-node3 configured (dry run)", "online: true → false", "spec.image.url: \"https://10.0.0.1/files/debian.img.zst\" → \"https://10.0.0.1/files/debian-13.img.zst\"",
		"bmc.credentials: username admin, password (not shown)", "rack1-node4 unchanged (dry run)"} {
		if !strings.Contains(out, w) {
			t.Errorf("dry run lacks %q:\n%s", w, out)
		}
	}
	if d2 := show("rack1-node3"); !d2.UpdatedAt.Equal(d.UpdatedAt) || !d2.Online {
		t.Fatal("--dry-run changed rack1-node3")
	}
	if out := run(0, "apply", "-f", f); out != "rack1-node3 configured\nrack1-node4 unchanged\n" {
		t.Fatalf("apply of the change printed %q", out)
	}
	d2 := show("rack1-node3")
	if d2.Online || !strings.HasSuffix(d2.Spec.Image.URL, "debian-13.img.zst") || d2.Generation != d.Generation+1 || d2.Labels["rack"] != "r1" {
		t.Fatalf("rack1-node3 after the change: online %v, image %s, generation %d (was %d)", d2.Online, d2.Spec.Image.URL, d2.Generation, d.Generation)
	}

	// New credentials alone: bootyd compares them.
	if err := os.WriteFile(filepath.Join(dir, "pw"), []byte(applyPassword2+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := run(0, "apply", "-f", f); out != "rack1-node3 configured\nrack1-node4 unchanged\n" {
		t.Fatalf("apply of a new password printed %q", out)
	}
	if d3 := show("rack1-node3"); d3.Generation != d2.Generation {
		t.Errorf("new credentials bumped the generation %d → %d", d2.Generation, d3.Generation)
	}
	if out := run(0, "apply", "-f", f); out != "rack1-node3 unchanged\nrack1-node4 unchanged\n" {
		t.Fatalf("apply after the new password printed %q", out)
	}

	// stdin, relative files against the working directory.
	t.Chdir(dir)
	yb, _ := os.ReadFile(f)
	code, sout, serr := ctlIn(t, string(yb), append([]string{"apply", "-f", "-"}, c...)...)
	outputs.WriteString(sout + serr)
	if code != 0 || sout != "rack1-node3 unchanged\nrack1-node4 unchanged\n" {
		t.Fatalf("apply -f -: exit %d, %q %q", code, sout, serr)
	}

	var evs api.EventList
	json.Unmarshal([]byte(run(0, "machines", "events", "rack1-node3", "-o", "json")), &evs)
	for _, pw := range []string{applyPassword, applyPassword2, envPassword} {
		if strings.Contains(outputs.String(), pw) || strings.Contains(logs.String(), pw) || strings.Contains(run(0, "machines", "events", "rack1-node3"), pw) {
			t.Errorf("password %q reached bootyctl's output, bootyd's logs or events", pw)
		}
	}
	if !strings.Contains(logs.String(), "PATCH") {
		t.Error("bootyd's debug log does not show the requests; the secret check above saw nothing")
	}
}

// TestApplyBadDocumentChangesNothing: a document bootyctl refuses stops
// the whole apply before anything is sent, naming the document and the
// field; one bootyd refuses changes nothing of its machine.
func TestApplyBadDocumentChangesNothing(t *testing.T) {
	srvURL, logs := startBootydWith(t, nil)
	c := conn(srvURL, tokenFile(t, testToken))
	dir := t.TempDir()
	f := writeHosts(t, dir, hostsYAML)
	t.Setenv("BOOTYCTL_TEST_BMC_PW", envPassword)
	good := strings.SplitN(hostsYAML, "---\n", 2)[0]
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"unknown field", strings.Replace(hostsYAML, "  online: false\n", "", 1) + "  onlin: true\n",
			[]string{"document 2 (line 14) of " + f + " (rack1-node4): unknown field spec.onlin"}},
		{"unknown nested field", strings.Replace(hostsYAML, "username: root,", "username: root, passwrd: x,", 1),
			[]string{"document 2 (line 14)", "unknown field spec.bmc.credentials.passwrd"}},
		{"inline password", strings.Replace(hostsYAML, "passwordFile: ./pw", "password: inline-secret-pw", 1),
			[]string{"document 1 (line 1)", "spec.bmc.credentials.password", "passwordFile or passwordEnv"}},
		{"bad apiVersion", strings.Replace(hostsYAML, "metal3.io/v1alpha1", "metal3.io/v1", 1), []string{"document 2", `apiVersion "metal3.io/v1"`}},
		{"bad MAC", strings.Replace(hostsYAML, "52-54-00-12-34-57", "52-54-00", 1), []string{"document 2", "spec.bootMACAddress"}},
		{"missing password file", strings.Replace(hostsYAML, "./pw", "./no-such-pw", 1), []string{"document 1", "spec.bmc.credentials.passwordFile", "no-such-pw"}},
		{"unset env", strings.Replace(hostsYAML, "BOOTYCTL_TEST_BMC_PW", "BOOTYCTL_TEST_UNSET_PW", 1), []string{"passwordEnv: $BOOTYCTL_TEST_UNSET_PW is empty"}},
		{"same name twice", good + "---\n" + good, []string{"document 2", `"rack1-node3" is also the name of document 1`}},
		{"not YAML", good + "---\nspec: [\n", []string{"document 2", "not valid YAML"}},
	} {
		writeHosts(t, dir, tc.doc)
		code, out, stderr := ctl(t, append([]string{"apply", "-f", f}, c...)...)
		if code == 0 || out != "" {
			t.Errorf("%s: exit %d, stdout %q; want a failure before anything is applied", tc.name, code, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr %q lacks %q", tc.name, stderr, w)
			}
		}
		if strings.Contains(stderr, "inline-secret-pw") {
			t.Errorf("%s: the inline password was echoed", tc.name)
		}
	}
	if strings.Contains(logs.String(), "method=POST") || strings.Contains(logs.String(), "method=PATCH") {
		t.Fatalf("refused documents reached bootyd:\n%s", logs.String())
	}
	code, _, stderr := ctl(t, append([]string{"machines", "show", "rack1-node3"}, c...)...)
	if code != 1 || !strings.Contains(stderr, "404") {
		t.Fatalf("rack1-node3 exists after refused applies: %d %s", code, stderr)
	}

	// bootyd refuses: the boot MAC of another machine. The first document
	// is created, the second is not, and the exit code says so.
	writeHosts(t, dir, strings.Replace(hostsYAML, "52-54-00-12-34-57", "52:54:00:12:34:56", 1))
	code, out, stderr := ctl(t, append([]string{"apply", "-f", f}, c...)...)
	if code != 1 || out != "rack1-node3 created\n" || !strings.Contains(stderr, "(rack1-node4)") || !strings.Contains(stderr, "409") {
		t.Fatalf("a MAC taken: exit %d, %q, %q", code, out, stderr)
	}
	if code, _, _ := ctl(t, append([]string{"machines", "show", "rack1-node4"}, c...)...); code != 1 {
		t.Fatal("rack1-node4 was created with a taken MAC")
	}
	// A boot MAC cannot change.
	writeHosts(t, dir, strings.Replace(good, "52:54:00:12:34:56", "52:54:00:12:34:99", 1))
	code, _, stderr = ctl(t, append([]string{"apply", "-f", f}, c...)...)
	if code != 1 || !strings.Contains(stderr, "a boot MAC cannot change") {
		t.Fatalf("a changed boot MAC: exit %d, %q", code, stderr)
	}
}

// TestApplyConcurrentChange: when the machine changes between apply's
// read and its PATCH, bootyd answers 409 and nothing of the document is
// applied.
func TestApplyConcurrentChange(t *testing.T) {
	srvURL, _ := startBootydWith(t, nil)
	tf := tokenFile(t, testToken)
	dir := t.TempDir()
	good := strings.SplitN(hostsYAML, "---\n", 2)[0]
	f := writeHosts(t, dir, good)
	if code, _, stderr := ctl(t, append([]string{"apply", "-f", f}, conn(srvURL, tf)...)...); code != 0 {
		t.Fatal(stderr)
	}
	// A proxy that lets another operator change the machine's hostname
	// just before apply's PATCH arrives.
	target, _ := url.Parse(srvURL)
	rp := httputil.NewSingleHostReverseProxy(target)
	var interfered atomic.Bool
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPatch && !interfered.Swap(true) {
			body, _ := json.Marshal(api.UpdateRequest{Spec: &api.MachineSpec{Hostname: "other-operator"}})
			req, _ := http.NewRequest(http.MethodPatch, srvURL+"/v1/machines/rack1-node3", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+testToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil || resp.StatusCode != 200 {
				t.Errorf("the other operator's PATCH: %v %v", err, resp)
			} else {
				resp.Body.Close()
			}
		}
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	writeHosts(t, dir, strings.Replace(good, "online: true", "online: false", 1))
	code, out, stderr := ctl(t, append([]string{"apply", "-f", f}, conn(proxy.URL, tf)...)...)
	if code != 1 || out != "" || !strings.Contains(stderr, "409") || !strings.Contains(stderr, "generation") {
		t.Fatalf("apply racing another change: exit %d, %q, %q; want bootyd's 409", code, out, stderr)
	}
	var d api.MachineDetail
	_, sout, _ := ctl(t, append([]string{"machines", "show", "rack1-node3", "-o", "json"}, conn(srvURL, tf)...)...)
	if err := json.Unmarshal([]byte(sout), &d); err != nil || !d.Online || d.Spec.Hostname != "other-operator" {
		t.Fatalf("after the refused apply: %v online %v hostname %q; want online kept and only the other operator's change", err, d.Online, d.Spec.Hostname)
	}
}

// TestREADMEApplyExampleParses: the README's BareMetalHost example is
// what apply accepts (its checksum placeholder filled in).
func TestREADMEApplyExampleParses(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "### Declaring machines: `bootyctl apply`")
	_, rest, ok2 := strings.Cut(rest, "```yaml\n")
	doc, _, ok3 := strings.Cut(rest, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("README has no apply example under \"### Declaring machines\"")
	}
	doc = strings.ReplaceAll(doc, "9f86d0…", strings.Repeat("9f", 32))
	dir := t.TempDir()
	for _, f := range []string{"bmc.pass", "user-data"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	hs, err := parseHosts([]byte(doc), "README.md", dir)
	if err != nil || len(hs) != 1 || hs[0].name != "rack1-node3" || hs[0].reg.BMC == nil || hs[0].reg.BMC.Password != "x" {
		t.Fatalf("the README's example: %v %+v", err, hs)
	}
}
