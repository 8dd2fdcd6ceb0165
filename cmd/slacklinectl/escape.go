package main

import (
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Everything slacklinectl prints that came from elsewhere (the
// coordinator's and agents' answers, error messages, a task's output) goes
// through escape, so that a hostname, a name or a log line cannot steer
// the terminal: control characters (C0, DEL and C1, with which every
// escape sequence begins), bidirectional-text controls, and bytes that are
// not UTF-8 are shown as Go escapes ("\x1b", "\u202e", "\xff"). JSON
// output needs nothing more: its encoder escapes control characters.

// escape returns s with every control character escaped: for a table cell
// or a one-line message.
func escape(s string) string { return escapeExcept(s, "") }

// escapeText returns s with every control character but newline and tab
// escaped: for multi-line text such as error messages.
func escapeText(s string) string { return escapeExcept(s, "\n\t") }

// escapeExcept escapes what steers a terminal in s, except the runes in
// keep.
func escapeExcept(s, keep string) string {
	if safe(s, keep) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])|0x100, 16)[1:])
		case steers(r) && !strings.ContainsRune(keep, r):
			q := strconv.QuoteRune(r) // '\x1b', '\n', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// steers reports whether r can change what a terminal shows or does
// rather than be shown.
func steers(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)
}

func safe(s, keep string) bool {
	for _, r := range s {
		if r == utf8.RuneError || steers(r) && !strings.ContainsRune(keep, r) {
			return false
		}
	}
	return true
}

// escapingWriter escapes, like escapeText, a stream written in pieces (a
// task's output): a UTF-8 sequence split between two writes is held back
// until its end arrives. Close flushes what is held.
type escapingWriter struct {
	w       io.Writer
	pending []byte // the start of an incomplete UTF-8 sequence
}

// Write escapes p and writes it; it reports len(p) on success.
func (e *escapingWriter) Write(p []byte) (int, error) {
	data := append(e.pending, p...)
	// Hold back an incomplete sequence at the end (at most 3 bytes).
	cut := len(data)
	for back := 1; back <= utf8.UTFMax-1 && back <= len(data); back++ {
		c := data[len(data)-back]
		if utf8.RuneStart(c) {
			if !utf8.FullRune(data[len(data)-back:]) {
				cut = len(data) - back
			}
			break
		}
	}
	e.pending = append([]byte(nil), data[cut:]...)
	if _, err := io.WriteString(e.w, escapeText(string(data[:cut]))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close writes what is held back, escaped as the invalid bytes it is.
func (e *escapingWriter) Close() error {
	if len(e.pending) == 0 {
		return nil
	}
	_, err := io.WriteString(e.w, escapeText(string(e.pending)))
	e.pending = nil
	return err
}

// escapeJSON escapes, as JSON \u escapes, what JSON encoders leave as it
// is but a terminal may act on (DEL, C1 controls, bidirectional-text
// controls). C0 controls can only be the encoder's own newlines: inside
// strings the encoder has escaped them already. The result is the same
// JSON value.
func escapeJSON(data []byte) []byte {
	s := string(data)
	if safe(s, "\n") {
		return data
	}
	var b strings.Builder
	for _, r := range s {
		if r != '\n' && steers(r) {
			b.WriteString(`\u`)
			b.WriteString(strconv.FormatUint(uint64(r)|0x10000, 16)[1:])
			continue
		}
		b.WriteRune(r)
	}
	return []byte(b.String())
}
