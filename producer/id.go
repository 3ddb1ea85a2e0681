package producer

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"

	"github.com/google/uuid"
)

// idSource generates task IDs: UUIDv7 (RFC 9562) text, time-ordered by
// millisecond and, within one source, strictly increasing: rand_a is a
// counter started at a random value each millisecond, and a millisecond
// whose counter runs out borrows the next one. rand_b is 62 random bits
// from crypto/rand, read 4 KiB at a time, which is what makes a source
// cheap enough to name every task.
type idSource struct {
	mu     sync.Mutex
	lastMS int64
	seq    uint16 // rand_a, 12 bits
	pool   [4096]byte
	off    int
}

func newIDSource() *idSource {
	return &idSource{off: 4096}
}

// next returns a new ID for a task submitted at now (the submission's own
// clock read), or an error if the system's random source fails.
func (s *idSource) next(now time.Time) (string, error) {
	var u [16]byte
	s.mu.Lock()
	if s.off+10 > len(s.pool) {
		if _, err := rand.Read(s.pool[:]); err != nil {
			s.mu.Unlock()
			return "", err
		}
		s.off = 0
	}
	copy(u[6:], s.pool[s.off:s.off+10])
	s.off += 10
	ms := now.UnixMilli()
	switch {
	case ms > s.lastMS:
		s.lastMS = ms
		s.seq = binary.BigEndian.Uint16(u[6:8]) & 0x7ff // the top bit left for counting
	case s.seq < 0xfff:
		s.seq++
	default: // 4,096 IDs in one millisecond, or the clock went back
		s.lastMS++
		s.seq = 0
	}
	ms, seq := s.lastMS, s.seq
	s.mu.Unlock()

	u[0], u[1], u[2], u[3], u[4], u[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	u[6] = 0x70 | byte(seq>>8)
	u[7] = byte(seq)
	u[8] = u[8]&0x3f | 0x80 // variant 10
	return uuid.UUID(u).String(), nil
}
