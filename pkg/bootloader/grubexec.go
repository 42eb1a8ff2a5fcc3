package bootloader

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path"
	"strconv"
	"strings"
)

// The GRUB interpreter runs a grub.cfg far enough to know its menu and its
// variables: assignments, if/elif/else with [ ]/test, functions, load_env,
// search --set, source and configfile (bounded), menuentry and submenu.
// Commands that draw, load modules or touch hardware do nothing and
// succeed. Menu entry bodies are not run while the menu is built; the
// chosen one is run afterwards to capture its linux and initrd commands.

const (
	maxGrubDepth    = 8      // nested source/configfile/function calls
	maxGrubCommands = 100000 // commands per interpretation
)

// grubMenuItem is a menuentry or a submenu.
type grubMenuItem struct {
	title, id string
	submenu   bool
	items     []*grubMenuItem // of a submenu
	body      []grubNode      // of a menuentry
	file      string
	line      int
}

// grubBoot is what a menu entry's body asked GRUB to load.
type grubBoot struct {
	kernel  string // path inside the installed OS
	args    []string
	initrds []string // paths inside the installed OS
}

type grubInterp struct {
	fs       *rootFS
	log      *slog.Logger
	vars     map[string]string
	funcs    map[string]funcNode
	items    []*grubMenuItem
	file     string // path inside the installed OS of the file being run
	depth    int
	commands int
	boot     *grubBoot // non-nil while running a chosen entry
	submenus int       // nesting of submenu bodies being run
}

// errMenuReplaced unwinds a file after configfile loaded another menu.
var errMenuReplaced = errors.New("menu replaced by configfile")

// presetGrubVars are the variables GRUB itself defines that generated
// configs test.
func presetGrubVars() map[string]string {
	return map[string]string{
		"feature_menuentry_id":         "y",
		"feature_default_font_path":    "y",
		"feature_all_video_module":     "y",
		"feature_platform_search_hint": "y",
		"feature_timeout_style":        "y",
		"feature_200_final":            "y",
		"feature_chainloader_bpb":      "y",
		"feature_ntldr":                "y",
		"grub_platform":                "efi",
		"grub_cpu":                     "x86_64",
	}
}

// runGrubConfig interprets the grub.cfg at rel (inside the installed OS)
// as GRUB would after loading it from that directory.
func runGrubConfig(fsys *rootFS, log *slog.Logger, rel string) (*grubInterp, error) {
	in := &grubInterp{fs: fsys, log: log, vars: presetGrubVars(), funcs: map[string]funcNode{}}
	in.vars["prefix"] = fsys.grubPath(path.Dir(rel))
	in.vars["root"] = fsys.grubDevice(rel)
	if err := in.runFile(rel); err != nil && !errors.Is(err, errMenuReplaced) {
		return nil, err
	}
	return in, nil
}

func (in *grubInterp) runFile(rel string) error {
	if in.depth >= maxGrubDepth {
		return fmt.Errorf("%s: source/configfile nested deeper than %d", rel, maxGrubDepth)
	}
	b, err := os.ReadFile(in.fs.host(rel))
	if err != nil {
		return fmt.Errorf("read grub config %s: %w", rel, err)
	}
	nodes, err := parseGrub(string(b))
	if err != nil {
		return fmt.Errorf("parse grub config %s: %w", rel, err)
	}
	prevFile := in.file
	in.file = rel
	in.vars["config_file"] = in.fs.grubPath(rel)
	in.vars["config_directory"] = in.fs.grubPath(path.Dir(rel))
	in.depth++
	defer func() { in.file = prevFile; in.depth-- }()
	_, err = in.exec(nodes)
	return err
}

func (in *grubInterp) exec(nodes []grubNode) (int, error) {
	status := 0
	for _, n := range nodes {
		var err error
		switch n := n.(type) {
		case cmdNode:
			status, err = in.command(n)
		case ifNode:
			status, err = in.ifCmd(n)
		case funcNode:
			in.funcs[n.name] = n
			status = 0
		case menuNode:
			err = in.menu(n)
			status = 0
		case loopNode:
			status = 0
		}
		in.vars["?"] = strconv.Itoa(status)
		if err != nil {
			return status, err
		}
	}
	return status, nil
}

func (in *grubInterp) ifCmd(n ifNode) (int, error) {
	for i, cond := range n.conds {
		st, err := in.exec(cond)
		if err != nil {
			return st, err
		}
		if st == 0 {
			return in.exec(n.bodies[i])
		}
	}
	return in.exec(n.elseBody)
}

// expand turns words into arguments: variables are substituted, unquoted
// variable values are split on whitespace, and a word that expands to
// nothing unquoted is dropped.
func (in *grubInterp) expand(words []word) []string {
	var argv []string
	for _, w := range words {
		var cur strings.Builder
		has := false
		for _, p := range w.parts {
			if !p.isVar {
				cur.WriteString(p.text)
				has = has || p.quoted || p.text != ""
				continue
			}
			v := in.vars[p.text]
			if p.quoted {
				cur.WriteString(v)
				has = true
				continue
			}
			fields := strings.Fields(v)
			if len(fields) == 0 {
				continue
			}
			if v[0] == ' ' || v[0] == '\t' || v[0] == '\n' {
				if has {
					argv = append(argv, cur.String())
				}
				cur.Reset()
				has = false
			}
			for i, f := range fields {
				if i > 0 {
					argv = append(argv, cur.String())
					cur.Reset()
				}
				cur.WriteString(f)
				has = true
			}
			if last := v[len(v)-1]; last == ' ' || last == '\t' || last == '\n' {
				argv = append(argv, cur.String())
				cur.Reset()
				has = false
			}
		}
		if has {
			argv = append(argv, cur.String())
		}
	}
	return argv
}

// assignment reports whether the command word is "name=value"; the value
// is not split on whitespace.
func assignment(w word) bool {
	if len(w.parts) == 0 || w.parts[0].isVar || w.parts[0].quoted {
		return false
	}
	name, _, ok := strings.Cut(w.parts[0].text, "=")
	return ok && validName(name)
}

func validName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isNameChar(s[i]) {
			return false
		}
	}
	return true
}

func (in *grubInterp) command(c cmdNode) (int, error) {
	in.commands++
	if in.commands > maxGrubCommands {
		return 1, fmt.Errorf("%s: more than %d commands run, giving up", in.file, maxGrubCommands)
	}
	if len(c.args) > 0 && assignment(c.args[0]) {
		var b strings.Builder
		for _, p := range c.args[0].parts {
			if p.isVar {
				b.WriteString(in.vars[p.text])
			} else {
				b.WriteString(p.text)
			}
		}
		k, v, _ := strings.Cut(b.String(), "=")
		in.vars[k] = v
		return 0, nil
	}
	argv := in.expand(c.args)
	if len(argv) == 0 {
		return 0, nil
	}
	switch argv[0] {
	case "set":
		for _, a := range argv[1:] {
			if k, v, ok := strings.Cut(a, "="); ok && validName(k) {
				in.vars[k] = v
			}
		}
		return 0, nil
	case "unset":
		for _, a := range argv[1:] {
			delete(in.vars, a)
		}
		return 0, nil
	case "[":
		if argv[len(argv)-1] != "]" {
			return 1, nil
		}
		return boolStatus(in.test(argv[1 : len(argv)-1])), nil
	case "test":
		return boolStatus(in.test(argv[1:])), nil
	case "true":
		return 0, nil
	case "false", "keystatus":
		return 1, nil
	case "load_env":
		in.loadEnv(argv[1:])
		return 0, nil
	case "search", "search.fs_uuid", "search.fs_label", "search.file", "search.part_uuid", "search.part_label":
		return in.search(argv), nil
	case "source", ".":
		if len(argv) < 2 {
			return 1, nil
		}
		return 0, in.runFile(in.fs.resolveGrub(in.vars["root"], argv[1]))
	case "configfile", "normal":
		if len(argv) < 2 {
			return 0, nil
		}
		if in.boot != nil {
			return 1, fmt.Errorf("%s:%d: menu entry loads another config (%s)", in.file, c.line, argv[1])
		}
		if in.submenus > 0 {
			// GRUB runs a submenu's body only when it is opened; a config
			// it loads does not replace the main menu.
			in.log.Warn("not following configfile inside a submenu", "file", in.file, "line", c.line)
			return 1, nil
		}
		return 0, in.configfile(in.fs.resolveGrub(in.vars["root"], argv[1]))
	case "linux", "linuxefi", "linux16":
		if in.boot != nil && len(argv) >= 2 {
			in.boot.kernel = in.fs.resolveGrub(in.vars["root"], argv[1])
			in.boot.args = argv[2:]
		}
		return 0, nil
	case "initrd", "initrdefi", "initrd16":
		if in.boot != nil {
			in.boot.initrds = nil
			for _, a := range argv[1:] {
				if !strings.HasPrefix(a, "--") {
					in.boot.initrds = append(in.boot.initrds, in.fs.resolveGrub(in.vars["root"], a))
				}
			}
		}
		return 0, nil
	}
	if f, ok := in.funcs[argv[0]]; ok {
		return in.call(f, argv[1:])
	}
	return 0, nil // insmod, echo, terminal_output, savedefault, ...
}

func boolStatus(b bool) int {
	if b {
		return 0
	}
	return 1
}

// call runs a function with $1.. set to args, restoring them afterwards.
func (in *grubInterp) call(f funcNode, args []string) (int, error) {
	if in.depth >= maxGrubDepth*4 {
		return 1, fmt.Errorf("%s: function %s nested too deep", in.file, f.name)
	}
	saved := map[string]*string{}
	set := func(k, v string) {
		if _, done := saved[k]; !done {
			if old, ok := in.vars[k]; ok {
				saved[k] = &old
			} else {
				saved[k] = nil
			}
		}
		in.vars[k] = v
	}
	for i, a := range args {
		set(strconv.Itoa(i+1), a)
	}
	set("#", strconv.Itoa(len(args)))
	set("@", strings.Join(args, " "))
	set("*", strings.Join(args, " "))
	in.depth++
	st, err := in.exec(f.body)
	in.depth--
	for k, v := range saved {
		if v == nil {
			delete(in.vars, k)
		} else {
			in.vars[k] = *v
		}
	}
	return st, err
}

// configfile runs another config with a fresh menu; its menu and
// variables replace the current ones, as GRUB shows the new menu and
// never returns to the old file.
func (in *grubInterp) configfile(rel string) error {
	saved := in.items
	in.items = nil
	if err := in.runFile(rel); err != nil && !errors.Is(err, errMenuReplaced) {
		in.items = saved
		return err
	}
	return errMenuReplaced
}

func (in *grubInterp) loadEnv(args []string) {
	file := in.vars["prefix"] + "/grubenv"
	var only []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-f" || a == "--file":
			if i+1 < len(args) {
				file = args[i+1]
				i++
			}
		case strings.HasPrefix(a, "--file="):
			file = strings.TrimPrefix(a, "--file=")
		case strings.HasPrefix(a, "-"):
		default:
			only = append(only, a)
		}
	}
	rel := in.fs.resolveGrub(in.vars["root"], file)
	env, err := readGrubenv(in.fs.host(rel))
	if err != nil {
		in.log.Warn("ignoring unreadable grubenv", "file", rel, "err", err)
		return
	}
	for k, v := range env {
		if len(only) == 0 || contains(only, k) {
			in.vars[k] = v
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// search emulates search and its search.* shortcuts: the device holding
// the file system is placed through the installed OS's fstab. A file
// system fstab does not know gets a name resolveGrub guesses for.
func (in *grubInterp) search(argv []string) int {
	kind, setVar := "file", ""
	var pos []string
	switch argv[0] {
	case "search.fs_uuid":
		kind = "uuid"
	case "search.fs_label":
		kind = "label"
	case "search.part_uuid":
		kind = "partuuid"
	case "search.part_label":
		kind = "partlabel"
	}
	if argv[0] != "search" {
		if len(argv) >= 3 {
			setVar = argv[2]
		}
		pos = argv[1:2]
	} else {
		for i := 1; i < len(argv); i++ {
			switch a := argv[i]; {
			case a == "-u" || a == "--fs-uuid":
				kind = "uuid"
			case a == "-l" || a == "--label":
				kind = "label"
			case a == "-f" || a == "--file":
				kind = "file"
			case a == "--part-uuid":
				kind = "partuuid"
			case a == "--part-label":
				kind = "partlabel"
			case a == "-s" || a == "--set":
				setVar = "root"
			case strings.HasPrefix(a, "--set="):
				setVar = strings.TrimPrefix(a, "--set=")
			case strings.HasPrefix(a, "-s") && len(a) > 2:
				setVar = a[2:]
			case a == "--hint" && i+1 < len(argv):
				i++
			case strings.HasPrefix(a, "-"):
			default:
				pos = append(pos, a)
			}
		}
	}
	if len(pos) == 0 || pos[0] == "" {
		return 1
	}
	dev, ok := in.fs.deviceFor(kind, pos[0])
	if !ok {
		dev = kind + "/" + pos[0]
	}
	if setVar != "" {
		in.vars[setVar] = dev
	}
	return 0
}

// test evaluates GRUB's [ ] / test expressions: !, -a, -o, ( ), string
// tests and comparisons, integer comparisons and file tests.
func (in *grubInterp) test(args []string) bool {
	v, _ := in.testOr(args)
	return v
}

func (in *grubInterp) testOr(args []string) (bool, []string) {
	v, rest := in.testAnd(args)
	for len(rest) > 0 && rest[0] == "-o" {
		var w bool
		w, rest = in.testAnd(rest[1:])
		v = v || w
	}
	return v, rest
}

func (in *grubInterp) testAnd(args []string) (bool, []string) {
	v, rest := in.testPrimary(args)
	for len(rest) > 0 && rest[0] == "-a" {
		var w bool
		w, rest = in.testPrimary(rest[1:])
		v = v && w
	}
	return v, rest
}

func (in *grubInterp) testPrimary(args []string) (bool, []string) {
	if len(args) == 0 {
		return false, nil
	}
	if args[0] == "!" {
		v, rest := in.testPrimary(args[1:])
		return !v, rest
	}
	if args[0] == "(" {
		v, rest := in.testOr(args[1:])
		if len(rest) > 0 && rest[0] == ")" {
			rest = rest[1:]
		}
		return v, rest
	}
	if len(args) >= 3 {
		a, op, b := args[0], args[1], args[2]
		switch op {
		case "=", "==":
			return a == b, args[3:]
		case "!=":
			return a != b, args[3:]
		case "-eq", "-ne", "-lt", "-le", "-gt", "-ge":
			x, _ := strconv.ParseInt(a, 10, 64)
			y, _ := strconv.ParseInt(b, 10, 64)
			r := map[string]bool{"-eq": x == y, "-ne": x != y, "-lt": x < y, "-le": x <= y, "-gt": x > y, "-ge": x >= y}
			return r[op], args[3:]
		}
	}
	if len(args) >= 2 {
		switch args[0] {
		case "-n":
			return args[1] != "", args[2:]
		case "-z":
			return args[1] == "", args[2:]
		case "-e", "-f", "-d", "-s":
			st, err := os.Stat(in.fs.host(in.fs.resolveGrub(in.vars["root"], args[1])))
			ok := err == nil
			switch args[0] {
			case "-f":
				ok = ok && st.Mode().IsRegular()
			case "-d":
				ok = ok && st.IsDir()
			case "-s":
				ok = ok && st.Size() > 0
			}
			return ok, args[2:]
		}
	}
	return args[0] != "", args[1:]
}

// menu records a menuentry, or runs a submenu's body to collect its
// entries.
func (in *grubInterp) menu(n menuNode) error {
	argv := in.expand(n.args)
	it := &grubMenuItem{submenu: n.submenu, body: n.body, file: in.file, line: n.line}
	titled := false
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "--id" || a == "--class" || a == "--users" || a == "--hotkey":
			if i+1 < len(argv) {
				if a == "--id" {
					it.id = argv[i+1]
				}
				i++
			}
		case strings.HasPrefix(a, "--id="):
			it.id = strings.TrimPrefix(a, "--id=")
		case strings.HasPrefix(a, "--"):
		case !titled:
			it.title, titled = a, true
		}
	}
	if !titled {
		return fmt.Errorf("%s:%d: menuentry without a title", in.file, n.line)
	}
	if n.submenu {
		outer, vars := in.items, maps.Clone(in.vars)
		in.items = nil
		in.submenus++
		_, err := in.exec(n.body)
		in.submenus--
		it.items, in.items, in.vars = in.items, outer, vars
		if err != nil {
			return err
		}
	}
	in.items = append(in.items, it)
	return nil
}

// selectDefault walks GRUB's default ("2", "1>0", a title, an id, or
// such a path) down the menu. Like GRUB, an index out of range or a name
// that matches nothing falls back to the first entry; a submenu without
// a further step is entered at its first entry. The returned path is the
// titles followed, for messages.
func selectDefault(items []*grubMenuItem, def string, log *slog.Logger) (*grubMenuItem, []string, error) {
	steps := strings.Split(def, ">")
	var trail []string
	for depth := 0; ; depth++ {
		if len(items) == 0 {
			return nil, trail, fmt.Errorf("menu %q has no entries", strings.Join(trail, ">"))
		}
		step := ""
		if depth < len(steps) {
			step = strings.TrimSpace(steps[depth])
		}
		idx := findMenuItem(items, step)
		if idx < 0 {
			log.Warn("grub default matches no menu entry, using the first like GRUB does", "default", def, "step", step)
			idx = 0
		}
		it := items[idx]
		trail = append(trail, it.title)
		if !it.submenu {
			if depth+1 < len(steps) {
				log.Warn("grub default goes below a menu entry; ignoring the rest", "default", def)
			}
			return it, trail, nil
		}
		items = it.items
	}
}

func findMenuItem(items []*grubMenuItem, step string) int {
	if step == "" {
		return 0
	}
	if n, err := strconv.Atoi(step); err == nil {
		if n < 0 || n >= len(items) {
			return -1
		}
		return n
	}
	for i, it := range items {
		if it.id == step || it.title == step {
			return i
		}
	}
	return -1
}

// bootEntry runs a chosen menu entry's body with the variables the whole
// config left behind and returns what it loads.
func (in *grubInterp) bootEntry(it *grubMenuItem) (*grubBoot, error) {
	run := &grubInterp{fs: in.fs, log: in.log, vars: maps.Clone(in.vars), funcs: in.funcs,
		file: it.file, boot: &grubBoot{}}
	if _, err := run.exec(it.body); err != nil {
		return nil, err
	}
	if run.boot.kernel == "" {
		return nil, fmt.Errorf("menu entry %q (%s:%d) has no linux command", it.title, it.file, it.line)
	}
	return run.boot, nil
}

// joinCmdline joins kernel arguments as GRUB does, quoting those with
// spaces.
func joinCmdline(args []string) string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		if strings.ContainsAny(a, " \t") {
			a = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(a) + `"`
		}
		out = append(out, a)
	}
	return strings.Join(out, " ")
}
