package broker

import (
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TxLogger is KgoLogger for a client that ends transactions itself
// (kgo.Client.EndTransaction): besides passing on franz-go's warnings and
// errors, it sets aborted each time franz-go, asked to commit, aborts the
// transaction instead and reports success.
//
// franz-go (up to v1.22.3 at least) does that when the transaction's only
// writes went to topics the client had not written to before. A record
// waiting for a new topic's partitions is produced by the metadata update
// that finds them (storePartitionsUpdate), which stores the partitions
// for the rest of the client only when it returns; a produce acknowledged
// in between, and a commit that follows at once, find no partition of the
// transaction marked as written, and EndTransaction sends an abort. The
// client's sequence numbers then no longer match the broker's: its next
// write to that partition fails OUT_OF_ORDER_SEQUENCE_NUMBER. Whoever sees
// aborted set after a commit must treat the transaction as aborted, and
// make a new client before the next one.
func TxLogger(l *slog.Logger, aborted *atomic.Bool) kgo.Logger {
	return txLogger{kgoLogger{l}, aborted}
}

type txLogger struct {
	kgoLogger
	aborted *atomic.Bool
}

// txAbortUnasked starts the message franz-go logs on that path. A franz-go
// upgrade that rewords it makes the producer's
// TestTxAbortedByTheClientIsAnError fail, which reaches the path on purpose.
const txAbortUnasked = "no produce succeeded in this transaction but produces were attempted"

// Level asks for franz-go's info messages, where the abort is told.
func (l txLogger) Level() kgo.LogLevel { return kgo.LogLevelInfo }

func (l txLogger) Log(level kgo.LogLevel, msg string, kv ...any) {
	if level == kgo.LogLevelInfo {
		if strings.HasPrefix(msg, txAbortUnasked) {
			l.aborted.Store(true)
		}
		return
	}
	l.kgoLogger.Log(level, msg, kv...)
}
