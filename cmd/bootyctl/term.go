package main

import (
	"io"
	"os"

	"golang.org/x/term"
)

// isTerminal says whether w is a terminal (the live table then redraws in
// place; otherwise watch prints lines).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
