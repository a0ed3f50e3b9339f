//go:build !race

package locktable

const raceEnabled = false
