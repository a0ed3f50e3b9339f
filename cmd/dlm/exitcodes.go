package main

import (
	"errors"

	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/server/auth"
)

// Exit codes of the dlm commands (besides, for dlm run, the command's own).
const (
	exitUsage       = 2   // bad flags, arguments or store URL, or a request the store refuses as invalid or does not support
	exitNoLeader    = 3   // dlm elect --leader: nobody leads
	exitUnavailable = 69  // the store could not be reached, or could not decide (no quorum)
	exitBusy        = 75  // the lock was held by others until --wait ran out
	exitLost        = 76  // the lock was lost while the command ran; it was stopped
	exitDenied      = 77  // a dlm server refused the credentials, or the identity's rights
	exitCannotExec  = 126 // the command was found but could not be started
	exitNotFound    = 127 // the command was not found
	exitSignalBase  = 128 // + N: the command died of signal N, or dlm itself was stopped by signal N while waiting
)

// denied reports whether err is a dlm server's refusal of credentials or
// rights.
func denied(err error) bool {
	return errors.Is(err, dlmserver.ErrUnauthenticated) || errors.Is(err, dlmserver.ErrPermissionDenied) ||
		errors.Is(err, auth.ErrUnauthenticated) || errors.Is(err, auth.ErrPermissionDenied)
}

// storeExit is the exit code of a store that failed with err: exitDenied
// for a refusal of credentials or rights, else exitUnavailable.
func storeExit(err error) int {
	if denied(err) {
		return exitDenied
	}
	return exitUnavailable
}
