package consumer

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// item is one fetched record on its way through a lane.
type item struct {
	ps    *partState
	epoch uint64
	rec   *kgo.Record
}

// lanes run handlers with key-ordered concurrency: a record goes to the
// lane its partition and key hash to, and each lane runs its records one
// at a time, in order. Records of one key therefore run in offset order;
// records of different keys run concurrently on up to n lanes.
type lanes struct {
	w    *Worker
	seed maphash.Seed
	chs  []chan *item
	wg   sync.WaitGroup
	quit chan struct{}
}

func newLanes(w *Worker, n, buffered int) *lanes {
	l := &lanes{w: w, seed: maphash.MakeSeed(), chs: make([]chan *item, n), quit: make(chan struct{})}
	for i := range l.chs {
		l.chs[i] = make(chan *item, buffered/n+1)
		l.wg.Add(1)
		go l.run(l.chs[i])
	}
	return l
}

func (l *lanes) submit(it *item) {
	var h maphash.Hash
	h.SetSeed(l.seed)
	h.WriteString(it.rec.Topic)
	h.WriteByte(byte(it.rec.Partition))
	h.WriteByte(byte(it.rec.Partition >> 8))
	h.Write(it.rec.Key)
	select {
	case l.chs[h.Sum64()%uint64(len(l.chs))] <- it:
	case <-l.quit:
	}
}

// stop abandons what is queued and waits for running handlers no longer
// than they take to notice their canceled context.
func (l *lanes) stop() {
	close(l.quit)
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
}

func (l *lanes) run(ch chan *item) {
	defer l.wg.Done()
	for {
		select {
		case it := <-ch:
			l.w.finish(it, l.w.execute(it, l.quit))
		case <-l.quit:
			return
		}
	}
}

// stale reports whether the item's partition moved on: revoked, or reset
// by an aborted commit.
func (it *item) stale() bool {
	it.ps.mu.Lock()
	defer it.ps.mu.Unlock()
	return it.ps.revoked || it.ps.epoch != it.epoch
}
