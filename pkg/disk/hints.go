package disk

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// ErrInvalidHints is wrapped by every error ParseHints returns.
var ErrInvalidHints = errors.New("invalid root device hints")

// hintKind is the value type of one hint key, as in Ironic's VALID_ROOT_DEVICE_HINTS.
type hintKind int

const (
	kindString hintKind = iota
	kindSize
	kindBool
)

// HintKeys are the root device hint keys and their value kinds (Ironic's set).
var hintKeys = map[string]hintKind{
	"name": kindString, "wwn": kindString, "wwn_with_extension": kindString,
	"wwn_vendor_extension": kindString, "serial": kindString, "vendor": kindString,
	"model": kindString, "hctl": kindString, "by_path": kindString, "tran": kindString,
	"size": kindSize, "rotational": kindBool,
}

// Operators of oslo.utils specs_matcher, longest first so "s==" wins over "==".
var operators = []string{"<all-in>", "<in>", "<or>", "s==", "s!=", "s<=", "s>=", "s<", "s>", "==", "!=", ">=", "<=", "=", ">", "<"}

var stringOps = map[string]bool{"s==": true, "s!=": true, "s<=": true, "s>=": true, "s<": true, "s>": true, "<in>": true, "<or>": true}
var numberOps = map[string]bool{"==": true, "!=": true, ">=": true, "<=": true, "=": true, ">": true, "<": true, "<or>": true}

// Hint is one parsed root device hint: a key, an operator and its values.
// String values are lowercased and trimmed, as Ironic compares them.
type Hint struct {
	Key    string
	Op     string
	Values []string
	// Numbers holds the parsed values of the size hint (GiB).
	Numbers []float64
	// Bool is the value of the rotational hint.
	Bool bool
}

// Hints is a parsed set of hints, sorted by key; a disk matches when it
// matches every hint.
type Hints []Hint

// ParseHints validates Ironic root device hints (ironic_lib / IPA
// parse_root_device_hints): keys must be known; string hints must be strings,
// "[op] value" with op one of s== s!= s< s<= s> s>= <in> <or> (no op means
// s==); size is a positive integer number of GiB, a JSON number or
// "[op] N" with op one of == != < <= > >= = (legacy >=) <or> (no op means ==);
// rotational is a boolean or one of true/false/yes/no/on/off/1/0/t/f/y/n.
// Errors wrap ErrInvalidHints and name the key and value. Empty hints parse
// to an empty Hints.
// config.Validate calls it too, so what validates is what select-disk runs.
func ParseHints(h map[string]any) (Hints, error) {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out Hints
	for _, key := range keys {
		hint, err := ParseHint(key, h[key])
		if err != nil {
			return nil, fmt.Errorf("%w: hint %q: %w", ErrInvalidHints, key, err)
		}
		out = append(out, hint)
	}
	return out, nil
}

// ParseHint parses the value of one hint as ParseHints does; the error
// names the problem but not the key (the caller has it).
func ParseHint(key string, raw any) (Hint, error) {
	kind, ok := hintKeys[key]
	if !ok {
		valid := make([]string, 0, len(hintKeys))
		for k := range hintKeys {
			valid = append(valid, k)
		}
		sort.Strings(valid)
		return Hint{}, fmt.Errorf("unknown root device hint, want one of %s", strings.Join(valid, ", "))
	}
	return parseHint(key, kind, raw)
}

func parseHint(key string, kind hintKind, raw any) (Hint, error) {
	hint := Hint{Key: key}
	switch kind {
	case kindBool:
		switch v := raw.(type) {
		case bool:
			hint.Bool = v
		case string:
			b, err := parseBool(v)
			if err != nil {
				return hint, err
			}
			hint.Bool = b
		default:
			return hint, fmt.Errorf("value %v is not a boolean", raw)
		}
		hint.Op = "=="
		return hint, nil
	case kindSize:
		var expr string
		switch v := raw.(type) {
		case string:
			expr = v
		case float64:
			expr = strconv.FormatFloat(v, 'f', -1, 64)
		case int:
			expr = strconv.Itoa(v)
		case int64:
			expr = strconv.FormatInt(v, 10)
		case json.Number: // decoders using UseNumber
			expr = v.String()
		default:
			return hint, fmt.Errorf("value %v is not an integer", raw)
		}
		op, values, err := splitExpression(expr)
		if err != nil {
			return hint, err
		}
		if op == "" {
			op = "=="
		}
		if !numberOps[op] {
			return hint, fmt.Errorf("operator %q does not apply to a number in %q", op, expr)
		}
		for _, v := range values {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return hint, fmt.Errorf("value %q in %q is not an integer number of GiB", v, expr)
			}
			if n <= 0 {
				return hint, fmt.Errorf("value %d in %q must be a positive number of GiB", n, expr)
			}
			hint.Numbers = append(hint.Numbers, float64(n))
		}
		hint.Op, hint.Values = op, values
		return hint, nil
	default:
		s, ok := raw.(string)
		if !ok {
			return hint, fmt.Errorf("value %v is not a string (quote it)", raw)
		}
		op, values, err := splitExpression(s)
		if err != nil {
			return hint, err
		}
		if op == "" {
			op = "s=="
		}
		if !stringOps[op] {
			return hint, fmt.Errorf("operator %q does not apply to a string in %q (use s==, s!=, <in>, <or>, ...)", op, s)
		}
		// name and by_path accept full paths or bare names: compare bare names.
		for i, v := range values {
			switch key {
			case "name":
				values[i] = strings.TrimPrefix(v, "/dev/")
			case "by_path":
				values[i] = strings.TrimPrefix(v, "/dev/disk/by-path/")
			}
		}
		hint.Op, hint.Values = op, values
		return hint, nil
	}
}

// splitExpression splits "[op] v1 [op v2 ...]" into the operator ("" when
// none) and its values, lowercased and trimmed. Only <or> takes several values.
func splitExpression(expr string) (op string, values []string, err error) {
	e := strings.ToLower(strings.TrimSpace(expr))
	if e == "" {
		return "", nil, errors.New("expression is empty")
	}
	if tok, _, _ := strings.Cut(e, " "); looksLikeOp(tok) && !slices.Contains(operators, tok) {
		return "", nil, fmt.Errorf("unknown operator %q in %q", tok, expr)
	}
	for _, o := range operators {
		if strings.HasPrefix(e, o) {
			op = o
			break
		}
	}
	if op == "" {
		return "", []string{e}, nil
	}
	if op == "<all-in>" {
		return "", nil, fmt.Errorf("operator <all-in> in %q is not supported for root device hints", expr)
	}
	if op == "<or>" {
		for _, v := range strings.Split(e, "<or>") {
			if v = strings.TrimSpace(v); v != "" {
				values = append(values, v)
			}
		}
	} else if v := strings.TrimSpace(e[len(op):]); v != "" {
		values = []string{v}
	}
	if len(values) == 0 {
		return "", nil, fmt.Errorf("operator %s in %q has no value", op, expr)
	}
	if op != "<or>" && len(values) != 1 {
		return "", nil, fmt.Errorf("operator %s in %q takes one value", op, expr)
	}
	return op, values, nil
}

// looksLikeOp says whether tok is spelled like an operator ("<like>",
// "=~"), so a typo is refused rather than compared as a literal value.
func looksLikeOp(tok string) bool {
	return len(tok) > 2 && strings.HasPrefix(tok, "<") && strings.HasSuffix(tok, ">") ||
		tok != "" && strings.Trim(tok, "s=!<>~") == "" && len(tok) <= 3
}

// parseBool accepts oslo strutils.bool_from_string's strict spellings.
func parseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "t", "true", "on", "y", "yes":
		return true, nil
	case "0", "f", "false", "off", "n", "no":
		return false, nil
	}
	return false, fmt.Errorf("value %q is not a boolean", s)
}

const gib = 1 << 30

// Match reports whether d satisfies every hint; when it does not, reason
// names the first hint that failed and the disk's value.
func (hs Hints) Match(d Disk) (ok bool, reason string) {
	for _, h := range hs {
		if ok, why := h.match(d); !ok {
			return false, why
		}
	}
	return true, ""
}

// String renders the hints back in Ironic's syntax, sorted by key.
func (hs Hints) String() string {
	parts := make([]string, 0, len(hs))
	for _, h := range hs {
		parts = append(parts, h.String())
	}
	return strings.Join(parts, ", ")
}

func (h Hint) String() string {
	switch {
	case h.Key == "rotational":
		return fmt.Sprintf("%s=%t", h.Key, h.Bool)
	case h.Op == "<or>":
		return fmt.Sprintf("%s=\"<or> %s\"", h.Key, strings.Join(h.Values, " <or> "))
	}
	return fmt.Sprintf("%s=\"%s %s\"", h.Key, h.Op, strings.Join(h.Values, ""))
}

func (h Hint) match(d Disk) (bool, string) {
	switch hintKeys[h.Key] {
	case kindBool:
		if d.Rotational == h.Bool {
			return true, ""
		}
		return false, fmt.Sprintf("rotational is %t, hint wants %t", d.Rotational, h.Bool)
	case kindSize:
		size := float64(d.Size) / gib
		if compareNumber(h.Op, size, h.Numbers) {
			return true, ""
		}
		return false, fmt.Sprintf("size %s GiB does not match %s", strconv.FormatFloat(size, 'f', -1, 64), h)
	}
	value := h.deviceValue(d)
	if value == "" {
		// Ironic skips a device whose attribute is empty, whatever the operator.
		return false, fmt.Sprintf("has no %s, hint %s", h.Key, h)
	}
	if compareString(h.Op, strings.ToLower(value), h.Values) {
		return true, ""
	}
	return false, fmt.Sprintf("%s %q does not match %s", h.Key, value, h)
}

// deviceValue is the disk attribute the hint compares. name and by_path
// compare bare names ("sda", "pci-0000:00:07.0-scsi-0:0:0:0"); ParseHints
// strips the /dev/ and /dev/disk/by-path/ prefixes from their values.
func (h Hint) deviceValue(d Disk) string {
	switch h.Key {
	case "name":
		return d.Name
	case "by_path":
		return strings.TrimPrefix(d.ByPath, "/dev/disk/by-path/")
	case "wwn":
		return d.WWN
	case "wwn_with_extension":
		return d.WWNWithExtension
	case "wwn_vendor_extension":
		return d.WWNVendorExtension
	case "serial":
		return d.Serial
	case "vendor":
		return d.Vendor
	case "model":
		return d.Model
	case "hctl":
		return d.HCTL
	case "tran":
		return d.Tran
	}
	return ""
}

func compareString(op, v string, values []string) bool {
	switch op {
	case "s==":
		return v == values[0]
	case "s!=":
		return v != values[0]
	case "s<":
		return v < values[0]
	case "s<=":
		return v <= values[0]
	case "s>":
		return v > values[0]
	case "s>=":
		return v >= values[0]
	case "<in>":
		return strings.Contains(v, values[0])
	case "<or>":
		for _, w := range values {
			if v == w {
				return true
			}
		}
	}
	return false
}

func compareNumber(op string, v float64, values []float64) bool {
	switch op {
	case "==":
		return v == values[0]
	case "!=":
		return v != values[0]
	case "<":
		return v < values[0]
	case "<=":
		return v <= values[0]
	case ">":
		return v > values[0]
	case ">=", "=": // "=" is specs_matcher's legacy spelling of >=
		return v >= values[0]
	case "<or>":
		for _, w := range values {
			if math.Abs(v-w) == 0 {
				return true
			}
		}
	}
	return false
}
