package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// packageNames matches the prefixes that name dlm's Go packages in an
// error's text (such as "locktable: " in a refusal the dlm server
// relays), which users of the command do not know.
var packageNames = regexp.MustCompile(`(^|: )(locktable|driver|storeurl|remote|dlmpb): `)

// userMessage is err's message as the command shows it: on one line (the
// lines of joined errors separated by "; "), without the "dlm: " and "dlm:
// invalid argument: " that the command's own prefix makes redundant, and
// without the names of dlm's Go packages.
func userMessage(err error) string {
	lines := strings.Split(strings.TrimSpace(err.Error()), "\n")
	out := lines[:0]
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	s := strings.Join(out, "; ")
	for _, p := range []string{"dlm: invalid argument: ", "dlm: "} {
		if rest, ok := strings.CutPrefix(s, p); ok {
			s = rest
			break
		}
	}
	return packageNames.ReplaceAllString(s, "$1")
}

// parseFlags parses args with fs. With -h it prints usage and the flags
// to stderr and returns 0 and false; a bad flag is one line with a hint
// (not the whole usage text), and returns exitUsage and false.
func parseFlags(fs *flag.FlagSet, args []string, usage string, stderr io.Writer) (int, bool) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
		return 0, false
	}
	fmt.Fprintf(stderr, "%s: %v (see %s -h)\n", fs.Name(), err, fs.Name())
	return exitUsage, false
}
