package checkpoint

import (
	"context"

	"github.com/cockroachdb/pebble/v2"
)

// Stats describes a store, for inspection.
type Stats struct {
	FormatVersion int              `json:"format_version"`
	ClusterID     string           `json:"cluster_id"`
	Group         string           `json:"group"`
	DiskBytes     uint64           `json:"disk_bytes"` // the size of the store's files
	Partitions    []PartitionStats `json:"partitions"`
}

// PartitionStats describes one partition of a store.
type PartitionStats struct {
	Topic      string   `json:"topic"`
	Partition  int32    `json:"partition"`
	Offsets    *Offsets `json:"offsets"` // nil: none recorded
	IDs        int64    `json:"processed_ids"`
	StateKeys  int64    `json:"state_keys"`
	DiskBytes  uint64   `json:"disk_bytes"` // estimated from the sstables: not what is still in the WAL
	ExpiryRecs int64    `json:"expiry_records"`
}

// Stats counts the store's processed IDs and state keys per partition. It
// reads every key: a second or so per ten million IDs.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	if err := s.acquire(); err != nil {
		return Stats{}, err
	}
	defer s.release()
	st := Stats{
		FormatVersion: int(s.meta.Format),
		ClusterID:     s.meta.Cluster,
		Group:         s.meta.Group,
	}
	names, err := s.fs.List(s.dir)
	if err != nil {
		return Stats{}, ioError(err, "list dir %s", s.dir)
	}
	for _, n := range names {
		if fi, err := s.fs.Stat(s.fs.PathJoin(s.dir, n)); err == nil && !fi.IsDir() {
			st.DiskBytes += uint64(fi.Size())
		}
	}
	tps, err := s.partitionsLocked()
	if err != nil {
		return Stats{}, err
	}
	for _, tp := range tps {
		p := s.lookup(tp)
		ps := PartitionStats{Topic: tp.Topic, Partition: tp.Partition}
		lower, upper := handleBounds(p.h)
		if ps.DiskBytes, err = s.db.EstimateDiskUsage(lower, upper); err != nil {
			return Stats{}, ioError(err, "estimate the size of %s", tp)
		}
		for _, c := range []struct {
			family byte
			n      *int64
		}{{familyID, &ps.IDs}, {familyState, &ps.StateKeys}, {familyExpiry, &ps.ExpiryRecs}} {
			if *c.n, err = s.count(ctx, p.h, c.family); err != nil {
				return Stats{}, err
			}
		}
		v, closer, err := s.db.Get(checkpointKey(p.h))
		switch {
		case err == nil:
			o, derr := decodeOffsets(v)
			_ = closer.Close()
			if derr != nil {
				return Stats{}, errorf(ErrCorrupt, derr, "dir %s: partition %s: %v", s.dir, tp, derr)
			}
			ps.Offsets = &o
		case err != pebble.ErrNotFound:
			return Stats{}, ioError(err, "read %s", tp)
		}
		st.Partitions = append(st.Partitions, ps)
	}
	return st, nil
}

// count counts the keys of one family of partition h.
func (s *Store) count(ctx context.Context, h handle, family byte) (int64, error) {
	lower, upper := familyBounds(h, family)
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return 0, ioError(err, "count keys")
	}
	defer it.Close()
	var n int64
	for ok := it.First(); ok; ok = it.Next() {
		if n++; n%65536 == 0 && ctx.Err() != nil {
			return 0, ctx.Err()
		}
	}
	if err := it.Error(); err != nil {
		return 0, ioError(err, "count keys")
	}
	return n, nil
}
