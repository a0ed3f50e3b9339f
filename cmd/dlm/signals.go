package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// notifyContext is signal.NotifyContext whose context, when one of sigs
// arrives, is cancelled with a signalError naming it (see context.Cause),
// so that a command stopped while it waits can say by which signal and
// exit with 128+N. Until stop is called, further signals are caught too.
func notifyContext(parent context.Context, sigs ...os.Signal) (ctx context.Context, stop context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case s := <-ch:
			sig, _ := s.(syscall.Signal)
			cancel(signalError{sig})
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		cancel(nil)
		<-done
	}
}

// stoppedBy returns the signal that ended ctx, if one did.
func stoppedBy(ctx context.Context) (signalError, bool) {
	se, ok := context.Cause(ctx).(signalError)
	return se, ok
}
