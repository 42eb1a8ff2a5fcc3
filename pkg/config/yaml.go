package config

import (
	"bytes"
	"encoding/json"
	"fmt"

	yamlv2 "go.yaml.in/yaml/v2"
)

// MarshalYAML writes c as YAML with the keys in schema order (the order of
// the struct fields), which reads better than the alphabetical order of a
// map. It does not redact: pass c.Redacted() for anything a person or a log
// will see.
func MarshalYAML(c *MachineConfig) ([]byte, error) {
	j, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	v, err := orderedValue(dec)
	if err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	out, err := yamlv2.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode config as YAML: %w", err)
	}
	return out, nil
}

// orderedValue reads one JSON value from dec, keeping object key order in a MapSlice.
func orderedValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			var m yamlv2.MapSlice
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := orderedValue(dec)
				if err != nil {
					return nil, err
				}
				m = append(m, yamlv2.MapItem{Key: kt, Value: v})
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return m, nil
		case '[':
			a := []any{}
			for dec.More() {
				v, err := orderedValue(dec)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return a, nil
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i, nil
		}
		return t.Float64()
	case nil:
		return nil, nil
	default:
		return t, nil // string or bool
	}
}
