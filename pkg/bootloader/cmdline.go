package bootloader

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// splitParams splits a kernel command line on whitespace, keeping double
// quoted parts (param="a b") inside one parameter.
func splitParams(s string) []string {
	var out []string
	var cur strings.Builder
	inQuote := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			inQuote = !inQuote
			cur.WriteByte(c)
		case !inQuote && (c == ' ' || c == '\t' || c == '\n'):
			if cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteByte(c)
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

func paramKey(p string) string {
	k, _, _ := strings.Cut(p, "=")
	return k
}

// mergeParams adds parameters to a command line: a key=value parameter
// replaces every existing parameter with that key (several added values
// of one key, like console=, are all kept, in order, where the first old
// one stood); a parameter already present is not repeated; the rest are
// appended. Applying the same add twice gives the same result.
func mergeParams(existing, add []string) []string {
	replace := map[string][]string{}
	for _, a := range add {
		if strings.Contains(a, "=") && !contains(replace[paramKey(a)], a) {
			replace[paramKey(a)] = append(replace[paramKey(a)], a)
		}
	}
	var out []string
	placed := map[string]bool{}
	for _, p := range existing {
		k := paramKey(p)
		vals, ok := replace[k]
		if !ok {
			out = append(out, p)
			continue
		}
		if !placed[k] {
			out = append(out, vals...)
			placed[k] = true
		}
	}
	for _, a := range add {
		if strings.Contains(a, "=") && placed[paramKey(a)] || contains(out, a) {
			continue
		}
		out = append(out, a)
		if strings.Contains(a, "=") {
			placed[paramKey(a)] = true
		}
	}
	return out
}

// shellSeg is one piece of a shell word: quote is a double quote, a single quote, or 0.
type shellSeg struct {
	quote byte
	raw   string
}

// shellWord reads one shell word from s; it returns its segments and the
// index after it. Quoted segments may span lines.
func shellWord(s string) ([]shellSeg, int, error) {
	var segs []shellSeg
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == ';' || c == '#' && len(segs) == 0:
			return segs, i, nil
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(s) && s[j] != c {
				if c == '"' && s[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(s) {
				return nil, i, fmt.Errorf("unterminated %c quote", c)
			}
			segs = append(segs, shellSeg{quote: c, raw: s[i+1 : j]})
			i = j + 1
		default:
			j := i
			for j < len(s) && strings.IndexByte(" \t\n;\"'", s[j]) < 0 {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j, len(s))
			segs = append(segs, shellSeg{raw: s[i:j]})
			i = j
		}
	}
	return segs, i, nil
}

// shellValue evaluates segments: escapes removed, $VAR and ${VAR}
// expanded from vars (single quotes stay literal).
func shellValue(segs []shellSeg, vars map[string]string) string {
	var b strings.Builder
	for _, sg := range segs {
		if sg.quote == '\'' {
			b.WriteString(sg.raw)
			continue
		}
		s := sg.raw
		for i := 0; i < len(s); i++ {
			switch {
			case s[i] == '\\' && i+1 < len(s) && (sg.quote == 0 || strings.IndexByte("$`\"\\", s[i+1]) >= 0):
				i++
				b.WriteByte(s[i])
			case s[i] == '$':
				if name, n := varRef(s[i:]); n > 0 {
					b.WriteString(vars[name])
					i += n - 1
					continue
				}
				b.WriteByte('$')
			default:
				b.WriteByte(s[i])
			}
		}
	}
	return b.String()
}

// assignRE finds shell assignments at the start of a line.
var assignRE = regexp.MustCompile(`(?m)^[ \t]*(?:export[ \t]+)?([A-Za-z_][A-Za-z0-9_]*)=`)

// readShellVars evaluates the assignments of a /etc/default/grub style
// file and then of each extra file (paths inside the installed OS), as
// grub-mkconfig sources them. A missing main file gives no variables.
func readShellVars(main string, extra []string, r *rootFS) (map[string]string, error) {
	vars := map[string]string{}
	files := []string{main}
	for _, e := range extra {
		files = append(files, r.host(e))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", f, err)
		}
		s := string(b)
		for _, m := range assignRE.FindAllStringSubmatchIndex(s, -1) {
			segs, _, err := shellWord(s[m[1]:])
			if err != nil {
				return nil, fmt.Errorf("read %s: %s: %w", f, s[m[2]:m[3]], err)
			}
			vars[s[m[2]:m[3]]] = shellValue(segs, vars)
		}
	}
	return vars, nil
}

// quoteDouble escapes s for the inside of shell double quotes.
func quoteDouble(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`, "`", "\\`").Replace(s)
}

// SetGrubDefaultCmdline adds kernel parameters to GRUB_CMDLINE_LINUX in
// the /etc/default/grub file at path (merging as described for
// key=value parameters: a key replaces the old values of that key, a
// parameter already there is not repeated). It edits the last assignment
// in place keeping its quoting (double, single, or none; a value that
// needs them gets double quotes), appends GRUB_CMDLINE_LINUX="…" when
// there is none, and replaces the file atomically keeping its mode.
// Parameters inside the existing value are kept verbatim, so a
// "$GRUB_CMDLINE_LINUX" self-reference stays. The error wraps
// fs.ErrNotExist when the file does not exist; grub.cfg is not
// regenerated here.
func SetGrubDefaultCmdline(path string, add []string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("set GRUB_CMDLINE_LINUX in %s: %w", path, err)
	}
	s := string(b)
	var last []int
	for _, m := range assignRE.FindAllStringSubmatchIndex(s, -1) {
		if s[m[2]:m[3]] == "GRUB_CMDLINE_LINUX" {
			last = m
		}
	}
	if last == nil {
		if s != "" && !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		s += `GRUB_CMDLINE_LINUX="` + quoteDouble(strings.Join(mergeParams(nil, add), " ")) + "\"\n"
		return writeFileAtomic(path, []byte(s))
	}
	start := last[1]
	segs, n, err := shellWord(s[start:])
	if err != nil {
		return fmt.Errorf("set GRUB_CMDLINE_LINUX in %s: %w", path, err)
	}
	quote := byte('"')
	raw := ""
	switch {
	case len(segs) == 1:
		quote, raw = segs[0].quote, segs[0].raw
	default: // mixed or empty: rewrite as one double-quoted word
		for _, sg := range segs {
			if sg.quote == '\'' {
				raw += quoteDouble(sg.raw)
			} else {
				raw += sg.raw
			}
		}
	}
	escape := func(p string) string { return p }
	for _, a := range add {
		if quote == '\'' && strings.Contains(a, "'") {
			// Re-quote the old value for double quotes.
			var q []string
			for _, p := range splitParams(raw) {
				q = append(q, quoteDouble(p))
			}
			raw, quote = strings.Join(q, " "), '"'
		}
	}
	if quote == '"' || quote == 0 {
		escape = quoteDouble
	}
	var escaped []string
	for _, a := range add {
		escaped = append(escaped, escape(a))
	}
	merged := strings.Join(mergeParams(splitParams(raw), escaped), " ")
	if quote == 0 && (strings.ContainsAny(merged, " \t") || merged == "") {
		quote = '"'
	}
	val := merged
	if quote != 0 {
		val = string(quote) + merged + string(quote)
	}
	out := s[:start] + val + s[start+n:]
	if out == string(b) {
		return nil
	}
	return writeFileAtomic(path, []byte(out))
}

// SetBLSOptions adds kernel parameters to every Boot Loader Specification
// entry of the installed OS at root (/boot/loader/entries/*.conf and the
// ESP's loader/entries), merging them into the options line as
// SetGrubDefaultCmdline does; several options lines of one entry become
// one, an entry without options gets one. Each file is replaced
// atomically. Options hidden in grubenv's $kernelopts (RHEL 8) are not
// edited; the parameters are added after the variable. It fails, wrapping
// fs.ErrNotExist, when there are no entries, and stops at the first file
// it cannot rewrite.
func SetBLSOptions(root string, add []string) error {
	fsys, err := newRootFS(root)
	if err != nil {
		return fmt.Errorf("set BLS options in %s: %w", root, err)
	}
	var files []string
	for _, d := range blsDirs {
		files = append(files, fsys.globSorted(d+"/*.conf")...)
	}
	if len(files) == 0 {
		return fmt.Errorf("set BLS options in %s: no entries in %s: %w", root, strings.Join(blsDirs, ", "), fs.ErrNotExist)
	}
	for _, f := range files {
		// Every link is resolved inside root: the image's own symlinks
		// never lead a write out of the target.
		p := fsys.host(f)
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("set BLS options: %w", err)
		}
		lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		var params []string
		first := -1
		var kept []string
		for _, l := range lines {
			t := strings.TrimSpace(l)
			if t == "options" || strings.HasPrefix(t, "options ") || strings.HasPrefix(t, "options\t") {
				params = append(params, splitParams(t[len("options"):])...)
				if first < 0 {
					first = len(kept)
					kept = append(kept, "")
				}
				continue
			}
			kept = append(kept, l)
		}
		opt := "options " + strings.Join(mergeParams(params, add), " ")
		if first < 0 {
			kept = append(kept, opt)
		} else {
			kept[first] = opt
		}
		out := strings.Join(kept, "\n") + "\n"
		if out == string(b) {
			continue
		}
		if err := writeFileAtomic(p, []byte(out)); err != nil {
			return fmt.Errorf("set BLS options: %w", err)
		}
	}
	return nil
}

// writeFileAtomic replaces path with data through a temp file in the same
// directory, keeping path's permission bits.
func writeFileAtomic(path string, data []byte) error {
	mode := fs.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
