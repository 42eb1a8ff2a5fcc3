package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// MaxConfigSize bounds a config, whatever provider read it.
const MaxConfigSize = 4 << 20

// Parse decodes a MachineConfig from YAML or JSON (JSON is YAML), applies the
// defaults and validates it.
//
// Decoding is strict: a key the schema does not know, a value of the wrong
// type, or a duplicate key is a problem naming the field ("image.ur: unknown
// field"). Syntax errors return a plain error. All other problems, from
// decoding and from Validate, are returned together in one *ValidationError,
// so a config author sees every mistake at once.
func Parse(data []byte) (*MachineConfig, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &ValidationError{Problems: []string{"config is empty"}}
	}
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("parse config: %w", err)
	}
	var raw any
	if err := json.Unmarshal(j, &raw); err != nil {
		return nil, fmt.Errorf("parse config: %w", err)
	}
	top, ok := raw.(map[string]any)
	if !ok {
		return nil, &ValidationError{Problems: []string{fmt.Sprintf("config must be a mapping of fields, got %s", jsonKind(raw))}}
	}

	var shape []problem
	checkShape("", top, reflect.TypeFor[MachineConfig](), &shape)

	// The shape check removed every offending value from top, so this decode
	// succeeds and Validate can still report the remaining problems.
	pruned, err := json.Marshal(top)
	if err != nil {
		return nil, fmt.Errorf("parse config: re-encode: %w", err)
	}
	cfg := &MachineConfig{}
	if err := json.Unmarshal(pruned, cfg); err != nil {
		return nil, fmt.Errorf("parse config: decode: %w", err)
	}
	// An explicit onFailure.delay wins, "0s" included, which ApplyDefaults
	// cannot tell from unset.
	delaySet := false
	if of, ok := top["onFailure"].(map[string]any); ok {
		_, delaySet = of["delay"]
	}
	delay := cfg.OnFailure.Delay
	cfg.ApplyDefaults()
	if delaySet {
		cfg.OnFailure.Delay = delay
	}

	all := shape
	if verr := cfg.validate(); verr != nil {
		for _, p := range verr {
			if !coveredBy(p.field, shape) {
				all = append(all, p)
			}
		}
	}
	if len(all) > 0 {
		sortProblems(all)
		return nil, newValidationError(all)
	}
	return cfg, nil
}

// sortProblems orders problems by the position of their top-level field in
// MachineConfig (unknown top-level keys first), keeping the order within a field.
func sortProblems(ps []problem) {
	order := map[string]int{}
	t := reflect.TypeFor[MachineConfig]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		order[name] = i
	}
	rank := func(field string) int {
		top := field
		if i := strings.IndexAny(top, ".["); i >= 0 {
			top = top[:i]
		}
		if r, ok := order[top]; ok {
			return r
		}
		return -1
	}
	sort.SliceStable(ps, func(i, j int) bool { return rank(ps[i].field) < rank(ps[j].field) })
}

// coveredBy reports whether a shape problem already names field or one of its parents.
func coveredBy(field string, shape []problem) bool {
	for _, s := range shape {
		if field == s.field || strings.HasPrefix(field, s.field+".") || strings.HasPrefix(field, s.field+"[") {
			return true
		}
	}
	return false
}

// checkShape compares the generic JSON value v against the Go type t, records
// every unknown key and type mismatch under its dotted path, and deletes the
// offending entries from their parent maps.
func checkShape(path string, v any, t reflect.Type, out *[]problem) (keep bool) {
	if v == nil {
		return true // null means unset, as in encoding/json
	}
	if t == reflect.TypeFor[Duration]() {
		s, ok := v.(string)
		if !ok {
			*out = append(*out, problem{path, fmt.Sprintf("want a duration string like \"30s\", got %s", jsonKind(v))})
			return false
		}
		var d Duration
		if err := d.UnmarshalJSON([]byte(fmt.Sprintf("%q", s))); err != nil {
			*out = append(*out, problem{path, err.Error()})
			return false
		}
		return true
	}
	switch t.Kind() {
	case reflect.Pointer:
		// An optional value (*bool): its shape is the element's.
		return checkShape(path, v, t.Elem(), out)
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			*out = append(*out, problem{path, fmt.Sprintf("want a mapping, got %s", jsonKind(v))})
			return false
		}
		fields := jsonFields(t)
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			f, ok := fields[k]
			if !ok {
				msg := "unknown field"
				if near := nearestKey(k, fields); near != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", near)
				}
				*out = append(*out, problem{join(path, k), msg})
				delete(m, k)
				continue
			}
			if !checkShape(join(path, k), m[k], f.Type, out) {
				delete(m, k)
			}
		}
		return true
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			*out = append(*out, problem{path, fmt.Sprintf("want a mapping, got %s", jsonKind(v))})
			return false
		}
		if t.Elem().Kind() == reflect.Interface {
			return true
		}
		for k, e := range m {
			if !checkShape(path+"."+k, e, t.Elem(), out) {
				delete(m, k)
			}
		}
		return true
	case reflect.Slice:
		a, ok := v.([]any)
		if !ok {
			*out = append(*out, problem{path, fmt.Sprintf("want a list, got %s", jsonKind(v))})
			return false
		}
		good := true
		for i, e := range a {
			if !checkShape(fmt.Sprintf("%s[%d]", path, i), e, t.Elem(), out) {
				good = false
			}
		}
		return good
	case reflect.String:
		if _, ok := v.(string); !ok {
			hint := ""
			if _, scalar := v.(float64); scalar {
				hint = " (quote it)"
			} else if _, scalar := v.(bool); scalar {
				hint = " (quote it)"
			}
			*out = append(*out, problem{path, fmt.Sprintf("want a string, got %s%s", jsonKind(v), hint)})
			return false
		}
		return true
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			*out = append(*out, problem{path, fmt.Sprintf("want true or false, got %s", jsonKind(v))})
			return false
		}
		return true
	case reflect.Int, reflect.Int32, reflect.Int64:
		f, ok := v.(float64)
		if !ok || f != math.Trunc(f) || math.Abs(f) > 1<<31 {
			*out = append(*out, problem{path, fmt.Sprintf("want an integer, got %s", jsonKind(v))})
			return false
		}
		return true
	case reflect.Interface:
		return true
	}
	*out = append(*out, problem{path, fmt.Sprintf("unsupported field type %s", t)})
	return false
}

type fieldInfo struct{ Type reflect.Type }

// jsonFields maps the JSON keys of struct type t to their fields.
func jsonFields(t reflect.Type) map[string]fieldInfo {
	out := map[string]fieldInfo{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = fieldInfo{Type: f.Type}
	}
	return out
}

// nearestKey returns the known key closest to k when it is a likely typo
// (case difference or edit distance of at most 2), or "".
func nearestKey(k string, fields map[string]fieldInfo) string {
	best, bestD := "", 3
	for name := range fields {
		if strings.EqualFold(name, k) {
			return name
		}
		if d := editDistance(strings.ToLower(k), strings.ToLower(name)); d < bestD || (d == bestD && name < best) {
			best, bestD = name, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func jsonKind(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("string %q", x)
	case float64:
		return fmt.Sprintf("number %v", x)
	case bool:
		return fmt.Sprintf("boolean %v", x)
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("%T", v)
}
