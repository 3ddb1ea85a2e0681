package embedded

import "github.com/twmb/franz-go/pkg/kmsg"

// FirstBatchSize is the size of the first valid RecordBatch of a segment's
// bytes (0 if none), for tests that cut a log as a crash leaves it.
func FirstBatchSize(raw []byte) int {
	_, n, _ := readBatch(raw)
	return n
}

// IndexEntrySize is the size of one segment index entry.
const IndexEntrySize = indexEntrySize

// EncodeBatch is b's wire form with its length and CRC filled in.
func EncodeBatch(b kmsg.RecordBatch) []byte { return encodeBatch(b) }
