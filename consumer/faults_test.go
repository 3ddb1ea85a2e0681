package consumer_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
)

// fault is a broker misbehaviour injected through kfake's control hooks:
// fn handles (or not) one request of key; it is applied to at most times
// requests that match.
type fault struct {
	name  string
	key   kmsg.Key
	times int
	fn    func(c *kfake.Cluster, req kmsg.Request) (kmsg.Response, error, bool)
}

// errorCode answers with code, setting the response's error fields.
func errorCode(code int16) func(*kfake.Cluster, kmsg.Request) (kmsg.Response, error, bool) {
	return func(_ *kfake.Cluster, req kmsg.Request) (kmsg.Response, error, bool) {
		resp := req.ResponseKind()
		switch r := resp.(type) {
		case *kmsg.EndTxnResponse:
			r.ErrorCode = code
		case *kmsg.InitProducerIDResponse:
			r.ErrorCode = code
		case *kmsg.ProduceResponse:
			return testutil.ProduceError(req.(*kmsg.ProduceRequest), code), nil, true
		}
		return resp, nil, true
	}
}

// transactional limits a fault to requests of transactional producers (the
// worker's, not the test's own producer).
func transactional(fn func(*kfake.Cluster, kmsg.Request) (kmsg.Response, error, bool)) func(*kfake.Cluster, kmsg.Request) (kmsg.Response, error, bool) {
	return func(c *kfake.Cluster, req kmsg.Request) (kmsg.Response, error, bool) {
		if p, ok := req.(*kmsg.ProduceRequest); ok && p.TransactionID == nil {
			return nil, nil, false
		}
		return fn(c, req)
	}
}

var errDrop = errors.New("connection dropped by the test")

// TestProtocolFaults runs tasks through a worker while the broker drops,
// delays or fails its transactional requests; every task must still be
// copied exactly once.
func TestProtocolFaults(t *testing.T) {
	testutil.NeedsEmbedded(t, "injects protocol faults through the cluster's control hooks")
	for _, f := range []fault{
		{name: "EndTxn dropped", key: kmsg.EndTxn, times: 3, fn: func(*kfake.Cluster, kmsg.Request) (kmsg.Response, error, bool) {
			return nil, errDrop, true
		}},
		{name: "EndTxn delayed", key: kmsg.EndTxn, times: 3, fn: func(c *kfake.Cluster, _ kmsg.Request) (kmsg.Response, error, bool) {
			c.SleepControl(func() { time.Sleep(time.Second) })
			return nil, nil, false
		}},
		{name: "EndTxn unknown server error", key: kmsg.EndTxn, times: 2, fn: errorCode(kerr.UnknownServerError.Code)},
		{name: "TxnOffsetCommit unknown server error", key: kmsg.TxnOffsetCommit, times: 3, fn: func(_ *kfake.Cluster, kreq kmsg.Request) (kmsg.Response, error, bool) {
			req := kreq.(*kmsg.TxnOffsetCommitRequest)
			resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
			for _, tp := range req.Topics {
				rt := kmsg.NewTxnOffsetCommitResponseTopic()
				rt.Topic = tp.Topic
				for _, p := range tp.Partitions {
					rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
					rp.Partition, rp.ErrorCode = p.Partition, kerr.UnknownServerError.Code
					rt.Partitions = append(rt.Partitions, rp)
				}
				resp.Topics = append(resp.Topics, rt)
			}
			return resp, nil, true
		}},
		{name: "InitProducerID concurrent transactions", key: kmsg.InitProducerID, times: 3, fn: errorCode(kerr.ConcurrentTransactions.Code)},
		{name: "InitProducerID not enough replicas", key: kmsg.InitProducerID, times: 3, fn: errorCode(kerr.NotEnoughReplicas.Code)},
		{name: "Produce not enough replicas", key: kmsg.Produce, times: 3, fn: transactional(errorCode(kerr.NotEnoughReplicas.Code))},
		{name: "Produce dropped", key: kmsg.Produce, times: 2, fn: transactional(func(*kfake.Cluster, kmsg.Request) (kmsg.Response, error, bool) {
			return nil, errDrop, true
		})},
	} {
		t.Run(f.name, func(t *testing.T) {
			emb, conn := testutil.StartBroker(t, "")
			testutil.CreateTopic(t, conn, "in", 4)
			testutil.CreateTopic(t, conn, "out", 4)
			var fired atomic.Int64
			c := emb.Cluster()
			c.ControlKey(f.key.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
				if fired.Load() >= int64(f.times) {
					c.DropControl()
					return nil, nil, false
				}
				c.KeepControl()
				resp, err, handled := f.fn(c, req)
				if handled || err != nil || f.key == kmsg.EndTxn {
					fired.Add(1)
				}
				return resp, err, handled
			})
			all := ids(2000)
			stop := runWorker(t, consumer.Conn(conn), consumer.Group("faults"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
				consumer.WithHandler(copyCounting("out")), consumer.CommitInterval(50*time.Millisecond),
				consumer.SessionTimeout(6*time.Second), consumer.TransactionTimeout(5*time.Second))
			for i := 0; i < len(all); i += 200 {
				produceTasks(t, conn, "in", all[i:i+200])
				time.Sleep(50 * time.Millisecond)
			}
			waitOutputs(t, conn, "out", len(all), 90*time.Second)
			time.Sleep(500 * time.Millisecond)
			if err := stop(); err != nil {
				t.Logf("worker stopped with %v", err)
			}
			if fired.Load() == 0 {
				t.Fatalf("the fault never fired")
			}
			t.Logf("fault fired %d times", fired.Load())
			checkExactlyOnce(t, testutil.ReadCommitted(t, conn, 30*time.Second, "out"), all)
			checkRunCounters(t, conn, broker.ChangelogTopic("faults", "in"), all)
		})
	}
}
