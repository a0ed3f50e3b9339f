package server

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/dlmhq/dlm/server/auth"

	"github.com/dlmhq/dlm/server/fsm"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// authorize decides whether p may run cmd on session sid: a lock request
// needs the lock permission on its name; a conversion, release, cancel or
// relabel, on the name of the lock it names, when that lock is the
// session's (when it is not, the table refuses it as not the owner's, and
// no name is disclosed). Closing the session is always allowed. It
// returns the refusal's message.
func (s *Server) authorize(p auth.Principal, sid locktable.SessionID, cmd *dlmpb.Command) (string, bool) {
	if p.IsUnrestricted() {
		return "", true
	}
	var name string
	var lockID uint64
	byID := true // a request on an existing lock, named by its id
	switch op := cmd.GetOp().(type) {
	case *dlmpb.Command_Lock:
		name, byID = op.Lock.GetResource(), false
	case *dlmpb.Command_Convert:
		lockID = op.Convert.GetLockId()
	case *dlmpb.Command_Release:
		lockID = op.Release.GetLockId()
	case *dlmpb.Command_Cancel:
		lockID = op.Cancel.GetLockId()
	case *dlmpb.Command_Relabel:
		lockID = op.Relabel.GetLockId()
	default:
		return "", true
	}
	if byID { // lock id 0 included: no lock has it, the table refuses it
		var li locktable.LockInfo
		ok := false
		s.node.FSM().Read(func(v fsm.View) { li, ok = v.Table().Describe(locktable.LockID(lockID)) })
		if !ok || li.Session != sid {
			return "", true // the table answers: unknown lock, or not the owner
		}
		name = li.Resource
	}
	if p.May(auth.PermissionLock, name) {
		return "", true
	}
	s.auth.Deny(p, auth.PermissionLock, name)
	return fmt.Sprintf("identity %s may not lock %q", p.Identity(), name), false
}

// redactedToken replaces a bearer token found where the server would keep
// it (a session label, lock metadata): credentials are never stored,
// listed or shown.
const redactedToken = "[redacted]"

// redactToken returns s without token.
func redactToken(s, token string) string {
	if token == "" {
		return s
	}
	return strings.ReplaceAll(s, token, redactedToken)
}

// redactTokenBytes returns b without token.
func redactTokenBytes(b []byte, token string) []byte {
	if token == "" || !bytes.Contains(b, []byte(token)) {
		return b
	}
	return bytes.ReplaceAll(b, []byte(token), []byte(redactedToken))
}
