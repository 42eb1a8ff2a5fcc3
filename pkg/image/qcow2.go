package image

import (
	"fmt"
	"io"
	"log/slog"
)

const qcow2HeaderPeek = 104

type qcow2Header struct{ size uint64 }

func parseQcow2Header(b []byte) (qcow2Header, error) {
	return qcow2Header{}, fmt.Errorf("qcow2: %w", ErrUnsupportedFormat)
}

func newQcow2Reader(r io.Reader, log *slog.Logger) (io.Reader, error) {
	return nil, fmt.Errorf("image format qcow2: %w", ErrUnsupportedFormat)
}
