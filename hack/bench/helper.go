package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/booty-dev/booty/pkg/image"
)

// helperEnv, set to "decode" in the environment, turns this binary into
// the decoder helper (see helperMain).
const helperEnv = "BOOTY_BENCH_HELPER"

// helperMain decodes one file with the Go decoders booty uses, with the
// options pkg/image gives them for a verified image (zstd on one
// goroutine, its frame checksum not checked, image.ZstdOptions; gzip's
// defaults), and discards the output:
//
//	FORMAT FILE [sha256]
//
// FORMAT is zstd or gzip. With "sha256" it also hashes the decoded bytes and
// prints the hex digest, so the caller can check the decode. It returns the
// exit status.
func helperMain(args []string, stdout, stderr io.Writer) int {
	if len(args) < 2 || len(args) > 3 || (len(args) == 3 && args[2] != "sha256") {
		fmt.Fprintln(stderr, "bench helper: usage: FORMAT FILE [sha256]")
		return 2
	}
	f, err := os.Open(args[1])
	if err != nil {
		fmt.Fprintf(stderr, "bench helper: %v\n", err)
		return 1
	}
	defer f.Close()
	var r io.Reader
	br := bufio.NewReaderSize(f, 1<<20)
	switch args[0] {
	case "zstd":
		zr, err := zstd.NewReader(br, image.ZstdOptions()...)
		if err != nil {
			fmt.Fprintf(stderr, "bench helper: open zstd stream %s: %v\n", args[1], err)
			return 1
		}
		defer zr.Close()
		r = zr
	case "gzip":
		zr, err := gzip.NewReader(br)
		if err != nil {
			fmt.Fprintf(stderr, "bench helper: open gzip stream %s: %v\n", args[1], err)
			return 1
		}
		defer zr.Close()
		r = zr
	default:
		fmt.Fprintf(stderr, "bench helper: unknown format %q\n", args[0])
		return 2
	}
	var w io.Writer = io.Discard
	h := sha256.New()
	if len(args) == 3 {
		w = h
	}
	buf := make([]byte, 1<<20)
	if _, err := io.CopyBuffer(w, r, buf); err != nil {
		fmt.Fprintf(stderr, "bench helper: decode %s: %v\n", args[1], err)
		return 1
	}
	if len(args) == 3 {
		fmt.Fprintln(stdout, hex.EncodeToString(h.Sum(nil)))
	}
	return 0
}
