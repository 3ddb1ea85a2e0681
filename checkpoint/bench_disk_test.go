//go:build linux

package checkpoint

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkDiskBaseline is the floor under BenchmarkCommit: it writes what
// one commit of 1,000 IDs writes to the WAL (about 90 KB) into a
// preallocated file and fdatasyncs it, without Pebble, at the same paces.
// A commit cannot be faster than this disk.
func BenchmarkDiskBaseline(b *testing.B) {
	for _, every := range []time.Duration{0, 10 * time.Millisecond} {
		b.Run(fmt.Sprintf("every=%v", every), func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "wal"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			const size, chunk = 256 << 20, 90 << 10
			if _, err := f.Write(make([]byte, size)); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, chunk)
			var lat latencies
			next := time.Now()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				next = next.Add(every)
				time.Sleep(time.Until(next))
				b.StartTimer()
				start := time.Now()
				if _, err := f.WriteAt(buf, int64(i*chunk%(size-chunk))); err != nil {
					b.Fatal(err)
				}
				if err := unix.Fdatasync(int(f.Fd())); err != nil {
					b.Fatal(err)
				}
				lat.add(time.Since(start))
			}
			lat.report(b)
		})
	}
}
