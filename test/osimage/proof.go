package osimage

import (
	"regexp"
	"strings"
)

// Proof lines. booty-proof.service prints, in this order: hostname=,
// resolv= (nameservers joined by commas), cmdline=, kernel=, rootdev=,
// kubelet= (the non-blank lines of /etc/systemd/system/kubelet.service.d/*.conf
// joined by "; "), one "file PATH sha256=HEX" or "file PATH missing" line per
// path in /etc/booty-proof.d/files, marker= (only when
// /var/lib/booty-proof/marker exists; its lines joined by "; "),
// efi-current=BootXXXX and efi-order=XXXX,YYYY (only under UEFI), and last
// "done", after which it powers the machine off.
const (
	ProofPrefix = "BOOTY-PROOF "
	ProofDone   = ProofPrefix + "done"
)

// ProofDoneRE matches the last proof line, for vm.VM.Expect.
var ProofDoneRE = regexp.MustCompile(`BOOTY-PROOF done\b`)

// ProofFile is one "file" proof line.
type ProofFile struct {
	Path    string
	SHA256  string // lowercase hex; empty when Missing
	Missing bool
}

// proofLines returns the text after ProofPrefix of every console line that
// holds it, in order. Text before the prefix (a kernel message that was
// printed into the same line) and carriage returns are dropped.
func proofLines(console string) []string {
	var out []string
	for _, line := range strings.Split(console, "\n") {
		i := strings.LastIndex(line, ProofPrefix)
		if i < 0 {
			continue
		}
		out = append(out, strings.TrimRight(line[i+len(ProofPrefix):], "\r \t"))
	}
	return out
}

// ParseProof returns the key=value proof lines of a console transcript as
// a map (the value is everything after the first "="; a later line with
// the same key wins). "done" is a key with an empty value when the proof
// finished. "file" lines are left out: see ProofFiles.
func ParseProof(console string) map[string]string {
	m := map[string]string{}
	for _, l := range proofLines(console) {
		if strings.HasPrefix(l, "file ") {
			continue
		}
		k, v, _ := strings.Cut(l, "=")
		if k == "" || strings.ContainsAny(k, " \t") {
			continue
		}
		m[k] = v
	}
	return m
}

// ProofFiles returns the "file" proof lines of a console transcript in
// order. Malformed lines are skipped.
func ProofFiles(console string) []ProofFile {
	var files []ProofFile
	for _, l := range proofLines(console) {
		rest, ok := strings.CutPrefix(l, "file ")
		if !ok {
			continue
		}
		if p, ok := strings.CutSuffix(rest, " missing"); ok && p != "" {
			files = append(files, ProofFile{Path: p, Missing: true})
			continue
		}
		i := strings.LastIndex(rest, " sha256=")
		if i <= 0 {
			continue
		}
		sum := strings.ToLower(rest[i+len(" sha256="):])
		if len(sum) != 64 || strings.Trim(sum, "0123456789abcdef") != "" {
			continue
		}
		files = append(files, ProofFile{Path: rest[:i], SHA256: sum})
	}
	return files
}
