// Package errline puts error messages on one line.
package errline

import "strings"

// OneLine joins the lines of an error message (such as a driver's that
// lists each address it tried, one per line) into one line: "a:\n\tb\n\tc"
// becomes "a: b; c".
func OneLine(msg string) string {
	var b strings.Builder
	prev := ""
	for line := range strings.Lines(msg) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		switch {
		case prev == "":
		case strings.HasSuffix(prev, ":"):
			b.WriteString(" ")
		default:
			b.WriteString("; ")
		}
		b.WriteString(line)
		prev = line
	}
	return b.String()
}
