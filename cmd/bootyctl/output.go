package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"
)

// Output formats of -o.
const (
	formatTable = "table"
	formatJSON  = "json"
	formatYAML  = "yaml"
)

// checkFormat validates -o.
func checkFormat(f string) error {
	switch f {
	case formatTable, formatJSON, formatYAML:
		return nil
	}
	return usageError{"-o/--output", fmt.Sprintf("%q: want json, yaml or table", f)}
}

// writeRaw prints bootyd's JSON answer as indented JSON or as YAML: the
// same data bootyd serves, field for field.
func writeRaw(w io.Writer, format string, raw []byte) error {
	switch format {
	case formatJSON:
		var buf bytes.Buffer
		if err := json.Indent(&buf, raw, "", "  "); err != nil {
			return fmt.Errorf("format JSON: %w", err)
		}
		buf.WriteByte('\n')
		_, err := w.Write(buf.Bytes())
		return err
	case formatYAML:
		y, err := yaml.JSONToYAML(raw)
		if err != nil {
			return fmt.Errorf("format YAML: %w", err)
		}
		_, err = w.Write(y)
		return err
	}
	return fmt.Errorf("writeRaw: format %q is not json or yaml", format)
}

// table writes rows under a header, columns aligned with two spaces.
func table(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		for i := range r {
			r[i] = cell(r[i])
		}
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// cell makes a value fit a table cell: one line, "-" when empty, and no
// terminal control characters (a machine's error message is agent input).
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return ' '
		}
		return r
	}, s)
}

// keyValues writes "key: value" lines, keys aligned.
func keyValues(w io.Writer, kv [][2]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	for _, p := range kv {
		fmt.Fprintf(tw, "%s:\t%s\n", p[0], cell(p[1]))
	}
	return tw.Flush()
}
