package checkpoint_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/onceq/onceq/checkpoint"
)

func Example() {
	dir, err := os.MkdirTemp("", "checkpoint-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	s, err := checkpoint.Open(dir, checkpoint.ClusterID("cluster-1"), checkpoint.Group("billing"))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	// A commit: two tasks of orders/0 done, a state write, the new offsets.
	tp := checkpoint.TP{Topic: "orders", Partition: 0}
	processed := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	b := s.NewBatch()
	defer b.Close()
	for _, id := range []string{"task-1", "task-2"} {
		if err := b.MarkProcessed(tp, id, processed); err != nil {
			log.Fatal(err)
		}
	}
	if err := b.Set(tp, []byte("total"), []byte("2")); err != nil {
		log.Fatal(err)
	}
	if err := b.SetOffsets(tp, checkpoint.Offsets{Source: 2, Changelog: 3}); err != nil {
		log.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		log.Fatal(err)
	}

	// Which of a fetch's tasks ran already?
	done, _ := s.HasMany(tp, []string{"task-2", "task-3"})
	fmt.Println("processed:", done)
	o, _, _ := s.Checkpoint(tp)
	fmt.Printf("offsets: %+v\n", o)

	// The same commit as changelog records, replayed into a new partition.
	var entries []checkpoint.Entry
	for i, id := range []string{"task-1", "task-2"} {
		key, value := checkpoint.EncodeMark(id, processed)
		e, err := checkpoint.DecodeChangelog(key, value)
		if err != nil {
			log.Fatal(err)
		}
		e.Offset = int64(i)
		entries = append(entries, e)
	}
	copyTP := checkpoint.TP{Topic: "orders", Partition: 1}
	if err := s.Apply(copyTP, entries, 2); err != nil {
		log.Fatal(err)
	}
	ok, _ := s.Has(copyTP, "task-1")
	fmt.Println("restored task-1:", ok)

	// Eight days later, the dedup window (7 days) has passed.
	removed, _ := s.ExpireProcessed(context.Background(), processed.Add(8*24*time.Hour), 0)
	fmt.Println("expired:", len(removed))
	// Output:
	// processed: [true false]
	// offsets: {Source:2 Changelog:3}
	// restored task-1: true
	// expired: 4
}
