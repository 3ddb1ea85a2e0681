package dlq

import "time"

// Stats counts the dead letters of a queue. Add them one by one; the zero
// value is empty.
type Stats struct {
	// DeadLetters is how many were added.
	DeadLetters int
	// ByReason counts them by Letter.Reason.
	ByReason map[string]int
	// Oldest and Newest are the earliest and latest failure times; zero
	// when no dead letter had one.
	Oldest, Newest time.Time
}

// Add counts a dead letter.
func (s *Stats) Add(l Letter) {
	s.DeadLetters++
	if s.ByReason == nil {
		s.ByReason = map[string]int{}
	}
	s.ByReason[l.Reason]++
	if l.Failed.IsZero() {
		return
	}
	if s.Oldest.IsZero() || l.Failed.Before(s.Oldest) {
		s.Oldest = l.Failed
	}
	if l.Failed.After(s.Newest) {
		s.Newest = l.Failed
	}
}
