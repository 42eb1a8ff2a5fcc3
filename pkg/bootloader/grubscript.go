package bootloader

import (
	"fmt"
	"strings"
)

// This file turns GRUB script (grub.cfg) into a small syntax tree: simple
// commands, if/elif/else, menuentry and submenu blocks, function
// definitions and loops. It follows GRUB's lexer for what generated
// configs use: single and double quotes, backslash escapes and line
// continuations, $name and ${name} expansions, # comments, ";" and
// newlines as separators, "{" and "}" as separate words.

// wordPart is a piece of a word: literal text, or a variable reference
// (text is the name). quoted parts (inside single or double quotes) are not split on
// whitespace after expansion.
type wordPart struct {
	text   string
	isVar  bool
	quoted bool
}

type word struct {
	parts []wordPart
	line  int
}

// bare returns the word's text when it is a single unquoted literal, as
// keywords and braces must be.
func (w word) bare() (string, bool) {
	if len(w.parts) != 1 || w.parts[0].isVar || w.parts[0].quoted {
		return "", false
	}
	return w.parts[0].text, true
}

type token struct {
	sep  bool // ";" or newline
	word word
}

type grubLexer struct {
	src  string
	pos  int
	line int
}

func (l *grubLexer) peek(off int) byte {
	if l.pos+off < len(l.src) {
		return l.src[l.pos+off]
	}
	return 0
}

// lexGrub splits src into words and separators.
func lexGrub(src string) ([]token, error) {
	l := &grubLexer{src: src, line: 1}
	var toks []token
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		switch {
		case c == ' ' || c == '\t' || c == '\r':
			l.pos++
		case c == '\\' && l.peek(1) == '\n':
			l.pos += 2
			l.line++
		case c == '#':
			for l.pos < len(l.src) && l.src[l.pos] != '\n' {
				l.pos++
			}
		case c == '\n' || c == ';':
			if c == '\n' {
				l.line++
			}
			l.pos++
			toks = append(toks, token{sep: true})
		default:
			w, err := l.word()
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{word: w})
		}
	}
	return toks, nil
}

func (l *grubLexer) word() (word, error) {
	w := word{line: l.line}
	var lit strings.Builder
	litQuoted := false
	flush := func() {
		if lit.Len() > 0 {
			w.parts = append(w.parts, wordPart{text: lit.String(), quoted: litQuoted})
			lit.Reset()
		}
	}
	addLit := func(s string, quoted bool) {
		if quoted != litQuoted {
			flush()
			litQuoted = quoted
		}
		lit.WriteString(s)
	}
	emptyQuoted := false
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == ';':
			flush()
			if len(w.parts) == 0 && emptyQuoted {
				w.parts = append(w.parts, wordPart{quoted: true})
			}
			return w, nil
		case c == '\\':
			if l.peek(1) == '\n' {
				l.pos += 2
				l.line++
				continue
			}
			if l.pos+1 < len(l.src) {
				addLit(string(l.src[l.pos+1]), true)
			}
			l.pos += 2
		case c == '\'':
			end := strings.IndexByte(l.src[l.pos+1:], '\'')
			if end < 0 {
				return w, fmt.Errorf("line %d: unterminated single quote", w.line)
			}
			s := l.src[l.pos+1 : l.pos+1+end]
			l.line += strings.Count(s, "\n")
			if s == "" {
				emptyQuoted = true
			}
			addLit(s, true)
			l.pos += end + 2
		case c == '"':
			l.pos++
			start := len(w.parts)
			closed := false
			for l.pos < len(l.src) {
				d := l.src[l.pos]
				if d == '"' {
					l.pos++
					closed = true
					break
				}
				switch {
				case d == '\\' && l.peek(1) == '\n':
					l.pos += 2
					l.line++
				case d == '\\' && strings.IndexByte(`$"\`, l.peek(1)) >= 0 && l.peek(1) != 0:
					addLit(string(l.peek(1)), true)
					l.pos += 2
				case d == '$':
					if name, n := varRef(l.src[l.pos:]); n > 0 {
						flush()
						w.parts = append(w.parts, wordPart{text: name, isVar: true, quoted: true})
						l.pos += n
					} else {
						addLit("$", true)
						l.pos++
					}
				default:
					if d == '\n' {
						l.line++
					}
					addLit(string(d), true)
					l.pos++
				}
			}
			if !closed {
				return w, fmt.Errorf("line %d: unterminated double quote", w.line)
			}
			if lit.Len() == 0 && len(w.parts) == start {
				emptyQuoted = true
			}
		case c == '$':
			if name, n := varRef(l.src[l.pos:]); n > 0 {
				flush()
				w.parts = append(w.parts, wordPart{text: name, isVar: true})
				l.pos += n
			} else {
				addLit("$", false)
				l.pos++
			}
		default:
			addLit(string(c), false)
			l.pos++
		}
	}
	flush()
	if len(w.parts) == 0 && emptyQuoted {
		w.parts = append(w.parts, wordPart{quoted: true})
	}
	return w, nil
}

// varRef parses "$name", "${name}" or "$1"/"$?"/"$#"/"$@"/"$*" at the
// start of s and returns the name and the bytes consumed (0: not a
// reference).
func varRef(s string) (string, int) {
	if len(s) < 2 || s[0] != '$' {
		return "", 0
	}
	if s[1] == '{' {
		end := strings.IndexByte(s, '}')
		if end < 3 {
			return "", 0
		}
		return s[2:end], end + 1
	}
	if strings.IndexByte("?#@*", s[1]) >= 0 {
		return s[1:2], 2
	}
	n := 1
	for n < len(s) && isNameChar(s[n]) {
		n++
	}
	if n == 1 {
		return "", 0
	}
	return s[1:n], n
}

func isNameChar(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// Syntax tree nodes.
type (
	grubNode any
	cmdNode  struct {
		args []word
		line int
	}
	ifNode struct {
		conds    [][]grubNode // if and elif conditions
		bodies   [][]grubNode
		elseBody []grubNode
	}
	menuNode struct {
		submenu bool
		args    []word
		body    []grubNode
		line    int
	}
	funcNode struct {
		name string
		body []grubNode
	}
	loopNode struct{ body []grubNode } // for/while/until: parsed, never run
)

type grubParser struct {
	toks []token
	pos  int
}

// parseGrub parses a whole grub.cfg.
func parseGrub(src string) ([]grubNode, error) {
	toks, err := lexGrub(src)
	if err != nil {
		return nil, err
	}
	p := &grubParser{toks: toks}
	nodes, term, err := p.list()
	if err != nil {
		return nil, err
	}
	if term != "" {
		return nil, fmt.Errorf("line %d: unexpected %q", p.line(), term)
	}
	return nodes, nil
}

func (p *grubParser) line() int {
	for i := min(p.pos, len(p.toks)-1); i >= 0; i-- {
		if !p.toks[i].sep {
			return p.toks[i].word.line
		}
	}
	return 0
}

func (p *grubParser) skipSeps() {
	for p.pos < len(p.toks) && p.toks[p.pos].sep {
		p.pos++
	}
}

// listTerminators end a command list when they start a command.
var listTerminators = map[string]bool{"then": true, "elif": true, "else": true, "fi": true, "do": true, "done": true, "}": true}

// list parses commands until EOF or a terminator keyword, which it
// consumes and returns ("" at EOF).
func (p *grubParser) list() ([]grubNode, string, error) {
	var nodes []grubNode
	for {
		p.skipSeps()
		if p.pos >= len(p.toks) {
			return nodes, "", nil
		}
		first := p.toks[p.pos].word
		kw, _ := first.bare()
		if listTerminators[kw] {
			p.pos++
			return nodes, kw, nil
		}
		var n grubNode
		var err error
		switch kw {
		case "if":
			p.pos++
			n, err = p.ifCmd()
		case "function":
			p.pos++
			n, err = p.function()
		case "menuentry", "submenu":
			n, err = p.menu(kw == "submenu")
		case "for", "while", "until":
			n, err = p.loop()
		default:
			n = p.simple()
		}
		if err != nil {
			return nil, "", err
		}
		nodes = append(nodes, n)
	}
}

// expect parses a list that must end with one of the given terminators.
func (p *grubParser) expect(what string, terms ...string) ([]grubNode, string, error) {
	start := p.line()
	nodes, term, err := p.list()
	if err != nil {
		return nil, "", err
	}
	for _, t := range terms {
		if term == t {
			return nodes, term, nil
		}
	}
	if term == "" {
		return nil, "", fmt.Errorf("line %d: %s not closed (want %s)", start, what, strings.Join(terms, " or "))
	}
	return nil, "", fmt.Errorf("line %d: unexpected %q in %s", p.line(), term, what)
}

func (p *grubParser) simple() cmdNode {
	c := cmdNode{line: p.toks[p.pos].word.line}
	for p.pos < len(p.toks) && !p.toks[p.pos].sep {
		c.args = append(c.args, p.toks[p.pos].word)
		p.pos++
	}
	return c
}

func (p *grubParser) ifCmd() (grubNode, error) {
	n := ifNode{}
	for {
		cond, _, err := p.expect("if condition", "then")
		if err != nil {
			return nil, err
		}
		body, term, err := p.expect("if", "elif", "else", "fi")
		if err != nil {
			return nil, err
		}
		n.conds = append(n.conds, cond)
		n.bodies = append(n.bodies, body)
		switch term {
		case "fi":
			return n, nil
		case "else":
			n.elseBody, _, err = p.expect("else", "fi")
			return n, err
		}
	}
}

// header collects words up to a "{" word (which may follow newlines).
func (p *grubParser) header(what string) ([]word, error) {
	var words []word
	for {
		if p.pos >= len(p.toks) {
			return nil, fmt.Errorf("line %d: %s without {", p.line(), what)
		}
		t := p.toks[p.pos]
		p.pos++
		if t.sep {
			continue
		}
		if s, ok := t.word.bare(); ok && s == "{" {
			return words, nil
		}
		words = append(words, t.word)
	}
}

func (p *grubParser) function() (grubNode, error) {
	hdr, err := p.header("function")
	if err != nil {
		return nil, err
	}
	if len(hdr) != 1 {
		return nil, fmt.Errorf("line %d: function needs one name", p.line())
	}
	name, _ := hdr[0].bare()
	body, _, err := p.expect("function "+name, "}")
	return funcNode{name: name, body: body}, err
}

func (p *grubParser) menu(sub bool) (grubNode, error) {
	line := p.toks[p.pos].word.line
	p.pos++
	hdr, err := p.header("menuentry")
	if err != nil {
		return nil, err
	}
	body, _, err := p.expect("menuentry", "}")
	return menuNode{submenu: sub, args: hdr, body: body, line: line}, err
}

func (p *grubParser) loop() (grubNode, error) {
	for p.pos < len(p.toks) { // skip the loop header up to "do"
		if s, ok := p.toks[p.pos].word.bare(); ok && !p.toks[p.pos].sep && s == "do" {
			break
		}
		p.pos++
	}
	if p.pos >= len(p.toks) {
		return nil, fmt.Errorf("line %d: loop without do", p.line())
	}
	p.pos++
	body, _, err := p.expect("loop", "done")
	return loopNode{body: body}, err
}
