package storeurl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/driver"
)

// UnreachableError is a store whose servers could not be reached, in one
// line that names them: "dlm server 127.0.0.1:7420 did not answer within
// 5s". It matches driver.ErrUnavailable, and the error it describes.
type UnreachableError struct {
	// Servers names the store's servers, such as "dlm server
	// 127.0.0.1:7420" or "Redis nodes a:6379, b:6379".
	Servers string
	// Refused is true when a server refused the connection (nothing
	// listens at its address).
	Refused bool
	// Waited is how long the caller waited for an answer, when no server
	// refused.
	Waited time.Duration
	// Err is the error the store returned.
	Err error
}

// Error says which servers did not answer, and how.
func (e *UnreachableError) Error() string {
	switch {
	case e.Refused:
		return e.Servers + " refused the connection"
	case e.Waited > 0:
		return e.Servers + " did not answer within " + roundWait(e.Waited).String()
	}
	return e.Servers + " did not answer: " + oneLine(strings.TrimPrefix(e.Err.Error(), driver.ErrUnavailable.Error()+": "))
}

// Unwrap returns the store's error and driver.ErrUnavailable.
func (e *UnreachableError) Unwrap() []error { return []error{driver.ErrUnavailable, e.Err} }

// Unreachable returns err, an error of opening or using the store s names
// after waiting for it for waited, as an *UnreachableError when the store
// could not be reached: one line that names the servers and says whether
// they refused the connection or did not answer in time. Any other error
// (refused credentials or rights, an invalid request, a busy lock) is
// returned as it is.
func (s *Spec) Unreachable(err error, waited time.Duration) error {
	var ue *UnreachableError
	switch {
	case err == nil || errors.As(err, &ue):
		return err
	case errors.Is(err, dlmserver.ErrUnauthenticated) || errors.Is(err, dlmserver.ErrPermissionDenied) ||
		errors.Is(err, driver.ErrInvalid) || errors.Is(err, driver.ErrUnsupported) || errors.Is(err, driver.ErrTaken) ||
		errors.Is(err, driver.ErrDeadlock) || errors.Is(err, driver.ErrNotHeld):
		return err
	case !errors.Is(err, driver.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded):
		return err
	}
	ue = &UnreachableError{Servers: s.servers(), Err: err}
	text := err.Error()
	switch {
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(text, "deadline exceeded") ||
		strings.Contains(text, "i/o timeout") || strings.Contains(text, "no answer within"):
		ue.Waited = waited
	case errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(text, "connection refused"):
		ue.Refused = true
	}
	return ue
}

// servers names the store's servers for a message.
func (s *Spec) servers() string {
	hosts := s.Hosts
	if len(hosts) == 0 && s.URL != nil {
		hosts = strings.Split(s.URL.Host, ",")
	}
	what := map[Kind]string{
		KindDLM: "dlm server", KindRedis: "Redis server", KindRedlock: "Redis node",
		KindPostgres: "PostgreSQL server", KindEtcd: "etcd server",
	}[s.Kind]
	switch {
	case len(hosts) == 0:
		return what
	case len(hosts) > 1 && s.Kind == KindRedlock:
		return "a quorum of the Redis nodes " + strings.Join(hosts, ", ")
	case len(hosts) > 1:
		return fmt.Sprintf("%ss %s", what, strings.Join(hosts, ", "))
	}
	return what + " " + hosts[0]
}

// roundWait rounds a wait for a message: 5.003s is 5s, 138.2ms is 138ms.
func roundWait(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

// oneLine joins the lines of s with "; ", without their indentation.
func oneLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return strings.Join(lines, "; ")
}
