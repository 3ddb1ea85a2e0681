package producer

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestIDSource: IDs parse as version 7, RFC 9562 variant UUIDs carrying
// their millisecond, are unique across goroutines, and increase strictly
// within a source, across a millisecond's counter running out and a clock
// stepping back.
func TestIDSource(t *testing.T) {
	s := newIDSource()
	clock := time.UnixMilli(1_700_000_000_000)
	var prev string
	for i := 0; i < 10_000; i++ {
		if i == 7000 {
			clock = clock.Add(-time.Second)
		}
		id, err := s.next(clock)
		if err != nil {
			t.Fatal(err)
		}
		u, err := uuid.Parse(id)
		if err != nil || u.Version() != 7 || u.Variant() != uuid.RFC4122 || strings.ToLower(id) != id {
			t.Fatalf("ID %d %q: version %d variant %v, %v", i, id, u.Version(), u.Variant(), err)
		}
		if id <= prev {
			t.Fatalf("ID %d %q not after %q", i, id, prev)
		}
		prev = id
		if i == 0 {
			if sec, nsec := u.Time().UnixTime(); time.Unix(sec, nsec).UnixMilli() != clock.UnixMilli() {
				t.Fatalf("ID %q carries %v, want %v", id, time.Unix(sec, nsec), clock)
			}
		}
	}

	s = newIDSource()
	seen := sync.Map{}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Go(func() {
			for i := 0; i < 20_000; i++ {
				id, err := s.next(time.Now())
				if err != nil {
					t.Error(err)
					return
				}
				if _, dup := seen.LoadOrStore(id, true); dup {
					t.Errorf("duplicate ID %q", id)
					return
				}
			}
		})
	}
	wg.Wait()
}
