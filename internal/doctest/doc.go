// Package doctest holds the tests of what dlm's documentation tells a
// newcomer to do: use dlm from a checkout in a module of their own, and
// build every complete Go program in README.md and docs/*.md.
package doctest
