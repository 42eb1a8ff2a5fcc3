// Package redact hides the secrets a URL can carry before it reaches a log,
// an error, a debug dump or a report: user info (basic-auth credentials),
// the query (pre-signed URLs, access tokens) and the fragment. URL is the one
// function that does it; Text, Error and Handler apply it to every URL found
// in free text, in an error's message and in log records.
package redact

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
)

// Marker stands for what was removed.
const Marker = "<redacted>"

// Unparseable replaces everything after the scheme of a URL that does not
// parse: where its secrets are cannot be told, so nothing of it is shown.
const Unparseable = "<unparseable URL>"

// URL returns s without the parts of a URL that may hold secrets: user info
// becomes Marker ("https://<redacted>@host/…"), a query "?<redacted>" and a
// fragment "#<redacted>"; scheme, host, port and path are kept (the path
// escaped as in a URL). A string without any of those parts comes back
// unchanged, so paths and plain URLs read as written. When s does not
// parse as a URL, only its scheme is kept: "https://<unparseable URL>".
func URL(s string) string {
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil {
		return unparseable(s)
	}
	if u.User == nil && u.RawQuery == "" && !u.ForceQuery && u.Fragment == "" && !strings.Contains(u.Opaque, "@") {
		return s
	}
	var b strings.Builder
	if u.Scheme != "" {
		b.WriteString(u.Scheme)
		b.WriteByte(':')
	}
	if u.Opaque != "" {
		// "scheme:user:pass@host": keep what follows the last '@'.
		if i := strings.LastIndexByte(u.Opaque, '@'); i >= 0 {
			b.WriteString(Marker)
			b.WriteString(u.Opaque[i:])
		} else {
			b.WriteString(u.Opaque)
		}
	} else {
		if u.Host != "" || u.User != nil || strings.HasPrefix(s[len(u.Scheme):], "://") || strings.HasPrefix(s, "//") {
			b.WriteString("//")
		}
		if u.User != nil {
			b.WriteString(Marker)
			b.WriteByte('@')
		}
		b.WriteString(u.Host)
		b.WriteString(u.EscapedPath())
	}
	if u.RawQuery != "" || u.ForceQuery {
		b.WriteString("?" + Marker)
	}
	if u.Fragment != "" {
		b.WriteString("#" + Marker)
	}
	return b.String()
}

// unparseable keeps the scheme of s when it has a valid one.
func unparseable(s string) string {
	if i := strings.Index(s, "://"); i > 0 && validScheme(s[:i]) {
		return s[:i] + "://" + Unparseable
	}
	return Unparseable
}

func validScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return s != ""
}

func isSchemeChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'
}

// endsURL are the bytes that end a URL inside free text: white space,
// quotes (errors quote URLs with %q), angle brackets, backquotes and
// control characters.
func endsURL(c byte) bool {
	return c <= ' ' || c == '"' || c == '\'' || c == '`' || c == '<' || c == '>' || c == 0x7f
}

// Text returns s with every URL in it ("scheme://…" up to white space, a
// quote or an angle bracket) passed through URL. Punctuation that ends a
// sentence after a URL (".,;:)") stays outside it. Text without "://"
// comes back unchanged.
func Text(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	var b strings.Builder
	last := 0 // s[:last] is written
	for i := 0; i+3 <= len(s); {
		j := strings.Index(s[i:], "://")
		if j < 0 {
			break
		}
		sep := i + j
		start := sep
		for start > last && isSchemeChar(s[start-1]) {
			start--
		}
		for start < sep && !validScheme(s[start:sep]) { // a scheme starts with a letter
			start++
		}
		if start == sep {
			i = sep + 3
			continue
		}
		end := sep + 3
		for end < len(s) && !endsURL(s[end]) {
			end++
		}
		tok := s[start:end]
		trail := len(tok)
		for trail > 0 && strings.IndexByte(".,;:)", tok[trail-1]) >= 0 {
			trail--
		}
		b.WriteString(s[last:start])
		b.WriteString(URL(tok[:trail]))
		b.WriteString(tok[trail:])
		last, i = end, end
	}
	b.WriteString(s[last:])
	return b.String()
}

// redactedError has the message of err with its URLs redacted; errors.Is
// and errors.As still see err.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// Error returns err unchanged when its message holds no URL secret, else an
// error whose message is Text(err.Error()) and which wraps err, so errors.Is
// and errors.As go on working. Use it where an error leaves for a log or a
// report: an *url.Error from net/http carries the request's whole URL,
// query included. nil stays nil.
func Error(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if r := Text(msg); r != msg {
		return &redactedError{msg: r, err: err}
	}
	return err
}

// Handler wraps a slog.Handler and passes the message and every attribute
// value of each record through Text (errors through Error, other values
// through Text of their fmt form, and only when that changes anything), so
// no URL secret reaches the handler, whoever logged it.
type Handler struct {
	next slog.Handler
}

// NewHandler returns a Handler that hands redacted records to next.
func NewHandler(next slog.Handler) *Handler { return &Handler{next: next} }

// Enabled reports whether next handles records of level l.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// Handle redacts rec and passes it on.
func (h *Handler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, Text(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

// WithAttrs redacts as and hands them to next.
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	r := make([]slog.Attr, len(as))
	for i, a := range as {
		r[i] = attr(a)
	}
	return &Handler{next: h.next.WithAttrs(r)}
}

// WithGroup opens a group in next.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name)}
}

func attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, Text(v.String()))
	case slog.KindGroup:
		g := v.Group()
		r := make([]slog.Attr, len(g))
		for i, e := range g {
			r[i] = attr(e)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(r...)}
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.Any(a.Key, Error(err))
		}
		s := fmt.Sprint(v.Any())
		if r := Text(s); r != s {
			return slog.String(a.Key, r)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
