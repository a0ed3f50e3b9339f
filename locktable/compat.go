package locktable

import "github.com/dlmhq/dlm/driver"

// The names below are package driver's, which now holds the lock modes.
// They stay here only until package server, which is being split into
// packages, uses driver's; the lock table itself does not use them. Delete
// this file once server/ no longer does.

// Mode is driver.Mode.
//
// Deprecated: use driver.Mode; kept until server/ moves to it.
type Mode = driver.Mode

// The six lock modes, as driver's.
const (
	// NL is driver.NL.
	//
	// Deprecated: use driver.NL; kept until server/ moves to it.
	NL = driver.NL
	// CR is driver.CR.
	//
	// Deprecated: use driver.CR; kept until server/ moves to it.
	CR = driver.CR
	// CW is driver.CW.
	//
	// Deprecated: use driver.CW; kept until server/ moves to it.
	CW = driver.CW
	// PR is driver.PR.
	//
	// Deprecated: use driver.PR; kept until server/ moves to it.
	PR = driver.PR
	// PW is driver.PW.
	//
	// Deprecated: use driver.PW; kept until server/ moves to it.
	PW = driver.PW
	// EX is driver.EX.
	//
	// Deprecated: use driver.EX; kept until server/ moves to it.
	EX = driver.EX
)
