//go:build !race

package testenv

// raceEnabled reports whether this binary was built with -race; BuildDLM
// builds the server alike.
const raceEnabled = false
