// Package compactsched is the compaction scheduler of onceq's Pebble
// stores. It grants a store the compactions its DB allows at once, as
// Pebble's default scheduler does, but it rests while no compaction waits
// for a grant. Pebble's default samples its DB every 100 ms for as long as
// the DB is open, so that a compaction refused for want of a place starts
// soon after the DB allows more. An onceq process keeps several stores
// open, most of them idle most of the time, and those samples were a third
// of an idle server's wake-ups. Here the sampling runs only from a refusal
// until the DB has no compaction waiting.
package compactsched

import (
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// sampleEvery is how often a scheduler with a compaction waiting asks its
// DB how many it allows now: Pebble's own period.
const sampleEvery = 100 * time.Millisecond

// Scheduler is a pebble.CompactionScheduler for one DB: set a new one in
// each DB's Options.Experimental.CompactionScheduler.
type Scheduler struct {
	db pebble.DBForCompaction // set by Register, before any other call

	mu           sync.Mutex
	running      int    // compactions granted and not done
	waiting      bool   // one was refused, and the DB has not said none waits since
	refused      uint64 // TrySchedule's refusals
	unregistered bool
	granting     bool // a grant loop runs: one at a time
	grantDone    *sync.Cond

	wake chan struct{} // tells the sampler to look again; buffered 1
	stop chan struct{} // closed by Unregister
	done chan struct{} // closed when the sampler ends
}

var _ pebble.CompactionScheduler = (*Scheduler)(nil)

// New returns a scheduler for one DB.
func New() *Scheduler {
	s := &Scheduler{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	s.grantDone = sync.NewCond(&s.mu)
	return s
}

// Register implements pebble.CompactionScheduler.
func (s *Scheduler) Register(_ int, db pebble.DBForCompaction) {
	s.db = db
	go s.sample()
}

// Unregister implements pebble.CompactionScheduler: it returns once no
// call into the DB is under way, and none follows.
func (s *Scheduler) Unregister() {
	s.mu.Lock()
	s.unregistered = true
	for s.granting {
		s.grantDone.Wait()
	}
	s.mu.Unlock()
	close(s.stop)
	<-s.done
}

// TrySchedule implements pebble.CompactionScheduler. The DB calls it with
// its own mutex held: it calls nothing of the DB's but
// GetAllowedWithoutPermission, which takes no lock.
func (s *Scheduler) TrySchedule() (bool, pebble.CompactionGrantHandle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unregistered {
		return false, nil
	}
	if s.db.GetAllowedWithoutPermission() > s.running {
		s.running++
		return true, s
	}
	// The DB keeps the compaction and asks no more until a grant: the
	// sampler looks from now on.
	s.refused++
	if !s.waiting {
		s.waiting = true
		s.poke()
	}
	return false, nil
}

// UpdateGetAllowedWithoutPermission implements pebble.CompactionScheduler:
// the DB flushed, and may allow more compactions.
func (s *Scheduler) UpdateGetAllowedWithoutPermission() {
	s.mu.Lock()
	if s.waiting {
		s.poke()
	}
	s.mu.Unlock()
}

// Started, MeasureCPU and CumulativeStats implement
// pebble.CompactionGrantHandle: the scheduler counts compactions only.
func (s *Scheduler) Started()                                          {}
func (s *Scheduler) MeasureCPU(pebble.CompactionGoroutineKind)         {}
func (s *Scheduler) CumulativeStats(pebble.CompactionGrantHandleStats) {}

// Done implements pebble.CompactionGrantHandle: a granted compaction
// ended, and its place may go to one waiting.
func (s *Scheduler) Done() {
	s.mu.Lock()
	s.running--
	s.mu.Unlock()
	s.grant()
}

// poke tells the sampler to look now. s.mu is held.
func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// sample grants the waiting compactions when poked, and every sampleEvery
// while one waits, until Unregister.
func (s *Scheduler) sample() {
	defer close(s.done)
	t := time.NewTimer(sampleEvery)
	t.Stop()
	for {
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-s.wake:
		case <-t.C:
		}
		if s.grant() {
			t.Reset(sampleEvery)
		}
	}
}

// grant gives the DB's waiting compactions the places its DB allows, one
// grant loop at a time, and reports whether one still waits: then the
// sampler looks again in sampleEvery.
func (s *Scheduler) grant() (waiting bool) {
	s.mu.Lock()
	for s.granting {
		s.grantDone.Wait()
	}
	if s.unregistered {
		s.mu.Unlock()
		return false
	}
	places := s.db.GetAllowedWithoutPermission() - s.running
	if places <= 0 {
		waiting = s.waiting
		s.mu.Unlock()
		return waiting
	}
	refused := s.refused
	s.granting = true
	s.mu.Unlock()

	// The DB's own calls take its mutex: s.mu is not held across them.
	more := true // the DB has a compaction waiting, as far as this loop knows
	for ; places > 0; places-- {
		if w, _ := s.db.GetWaitingCompaction(); !w {
			more = false
			break
		}
		// The grant counts before the compaction runs: Done may come at
		// once.
		s.mu.Lock()
		s.running++
		s.mu.Unlock()
		if !s.db.Schedule(s) {
			s.mu.Lock()
			s.running--
			s.mu.Unlock()
			more = false
			break
		}
	}

	s.mu.Lock()
	switch {
	case more:
		s.waiting = true
	case s.refused == refused:
		// None waits, and none was refused since the loop began: a
		// refusal meanwhile stays waiting, which the DB will not ask
		// again for.
		s.waiting = false
	}
	waiting = s.waiting
	s.granting = false
	s.grantDone.Broadcast()
	s.mu.Unlock()
	return waiting
}
