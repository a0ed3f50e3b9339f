package memory

import "github.com/dlmhq/dlm/locktable"

// TableStats returns the lock table's counts, for tests that check that
// nothing is left behind.
func (s *Store) TableStats() locktable.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tab.Stats()
}

// Groups returns the number of groups with a session open.
func (s *Store) Groups() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.groups)
}

// Watches returns the number of watches alive.
func (s *Store) Watches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nWatches
}
