package fsm

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
)

// ResumeTokenBytes is the size of a session's resume token: 128 random
// bits from crypto/rand, made by the leader when it opens the session and
// returned once, in SessionOpened.resume_token. Resuming the session needs
// it; the server keeps only its SHA-256 (in the Raft log and snapshots) and
// never logs or lists the token.
const ResumeTokenBytes = 16

// NewResumeToken returns a new resume token and its SHA-256.
func NewResumeToken() (token, hash []byte, err error) {
	token = make([]byte, ResumeTokenBytes)
	if _, err := rand.Read(token); err != nil {
		return nil, nil, fmt.Errorf("dlm server: resume token: %w", err)
	}
	return token, resumeHash(token), nil
}

// resumeHash is the SHA-256 of a resume token, as the FSM keeps it.
func resumeHash(token []byte) []byte {
	h := sha256.Sum256(token)
	return h[:]
}

// resumableWith reports whether token is the session's resume token, in
// constant time. A session recorded without a hash (opened by an older
// server) cannot be resumed.
func (s *sessionRecord) resumableWith(token []byte) bool {
	if len(s.resumeHash) != sha256.Size {
		return false
	}
	return subtle.ConstantTimeCompare(resumeHash(token), s.resumeHash) == 1
}
