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

// termSize returns the columns and rows of the terminal w, or 0, 0.
func termSize(w io.Writer) (int, int) {
	f, ok := w.(*os.File)
	if !ok {
		return 0, 0
	}
	c, r, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 0, 0
	}
	return c, r
}
