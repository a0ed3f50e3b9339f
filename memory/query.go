package memory

// Waiting returns the number of requests queued on resource, conversions
// included.
func (s *Store) Waiting(resource string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	info, ok := s.tab.Resource(resource)
	if !ok {
		return 0
	}
	return len(info.Converting) + len(info.Waiting)
}
