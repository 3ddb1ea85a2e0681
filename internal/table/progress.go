package table

import (
	"context"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Progress is how far a table's records were applied, for writers that
// wait to read their own writes. The zero value is ready: nothing applied.
type Progress struct {
	mu    sync.Mutex
	next  int64         // the next offset to apply
	moved chan struct{} // closed when next moves, made by a waiter
}

// Applied records that rec was applied: call it after applying it.
func (p *Progress) Applied(rec *kgo.Record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rec.Offset < p.next {
		return
	}
	p.next = rec.Offset + 1
	if p.moved != nil {
		close(p.moved)
		p.moved = nil
	}
}

// Wait returns once the record at offset was applied, or ctx's error.
func (p *Progress) Wait(ctx context.Context, offset int64) error {
	for {
		p.mu.Lock()
		if p.next > offset {
			p.mu.Unlock()
			return nil
		}
		if p.moved == nil {
			p.moved = make(chan struct{})
		}
		moved := p.moved
		p.mu.Unlock()
		select {
		case <-moved:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Write produces recs with cl and returns once the last was applied.
func (p *Progress) Write(ctx context.Context, cl *kgo.Client, recs ...*kgo.Record) error {
	if len(recs) == 0 {
		return nil
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("writing to %s: %w", recs[0].Topic, err)
	}
	if err := p.Wait(ctx, recs[len(recs)-1].Offset); err != nil {
		return fmt.Errorf("waiting to read a write to %s: %w", recs[0].Topic, err)
	}
	return nil
}
