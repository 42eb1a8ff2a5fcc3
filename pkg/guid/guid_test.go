package guid

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func TestParseFormat(t *testing.T) {
	tests := []struct {
		in      string
		want    string // hex of the mixed-endian byte order
		wantErr bool
	}{
		{in: "0FC63DAF-8483-4772-8E79-3D69D8477DE4", want: "af3dc60f83847247" + "8e793d69d8477de4"},
		{in: "{c12a7328-f81f-11d2-ba4b-00a0c93ec93b}", want: "28732ac11ff8d211ba4b00a0c93ec93b"},
		{in: "c12a7328f81f11d2ba4b00a0c93ec93b", wantErr: true},
		{in: "c12a7328-f81f-11d2-ba4b-00a0c93ec93z", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		g, err := Parse(tt.in)
		if tt.wantErr {
			if !errors.Is(err, ErrSyntax) {
				t.Errorf("Parse(%q) = %x, %v; want ErrSyntax", tt.in, g, err)
			}
			continue
		}
		if err != nil || hex.EncodeToString(g[:]) != tt.want {
			t.Errorf("Parse(%q) = %x, %v; want %s", tt.in, g, err, tt.want)
		}
		norm := strings.ToLower(strings.Trim(tt.in, "{}"))
		if s := Format(g[:]); s != norm {
			t.Errorf("Format = %s, want %s", s, norm)
		}
	}
}
