package main

// Exit codes of the dlm commands (besides, for dlm run, the command's own).
const (
	exitUsage       = 2   // bad flags or arguments
	exitUnavailable = 69  // the store could not be reached or refused the request
	exitBusy        = 75  // the lock was held by others until --wait ran out
	exitLost        = 76  // the lock was lost while the command ran; it was stopped
	exitCannotExec  = 126 // the command was found but could not be started
	exitNotFound    = 127 // the command was not found
	exitSignalBase  = 128 // + N: the command died of signal N, or dlm itself was stopped by signal N while waiting
)
