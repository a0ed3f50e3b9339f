package redlock

// WithSequential makes the store ask the nodes one after another, each with
// its own timeout, as naive Redlock clients do: the baseline of
// BenchmarkAcquireRelease.
func WithSequential() Option { return func(s *Store) { s.sequential = true } }
