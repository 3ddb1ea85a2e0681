package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
)

// TestBrokerRefusesTopicsPastFileLimit: a broker process with a data dir
// and a file limit of 600 (ulimit -n) makes topics of 4 partitions until
// the files their partitions keep open would leave it too few for
// connections; then it refuses new ones with POLICY_VIOLATION naming the
// limit, and goes on: every topic it made takes writes and reads, and new
// clients connect.
func TestBrokerRefusesTopicsPastFileLimit(t *testing.T) {
	testutil.NeedsEmbedded(t, "an onceq broker process with a file limit")
	listen := testutil.FreeAddr(t)
	p := testutil.StartBinary(t, "/bin/sh", "-c", fmt.Sprintf("ulimit -n 600 && exec %s broker --listen %s --data-dir %s --partitions 4",
		testutil.Binary(t), listen, t.TempDir()))
	addr := p.WaitOutput(t, `broker listening"? addr=(\S+)`, 30*time.Second)
	conn := broker.Conn{Brokers: []string{addr}}
	cl, err := conn.NewClient(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var made []string
	var refused error
	for i := 0; refused == nil; i++ {
		if i == 200 {
			t.Fatalf("200 topics of 4 partitions made under a limit of 600 files, none refused")
		}
		topic := fmt.Sprint("t-", i)
		res, err := adm.CreateTopic(ctx, -1, -1, nil, topic)
		if err != nil && res.Err == nil {
			t.Fatalf("creating %s: %v", topic, err)
		}
		if res.Err != nil {
			refused = res.Err
			if !errors.Is(refused, kerr.PolicyViolation) || !strings.Contains(res.ErrMessage, "ulimit -n") {
				t.Fatalf("topic %s refused with %v (%s); want POLICY_VIOLATION naming ulimit -n", topic, refused, res.ErrMessage)
			}
			t.Logf("after %d topics: %s", len(made), res.ErrMessage)
			break
		}
		made = append(made, topic)
		// Written, so that its files are open.
		var recs []*kgo.Record
		for part := range int32(4) {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: part, Value: []byte("v")})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("writing to %s: %v", topic, err)
		}
	}
	if len(made) < 20 {
		t.Fatalf("only %d topics of 4 partitions made under a limit of 600 files", len(made))
	}
	// It goes on: a new client writes to every topic made, and reads all
	// back.
	cl2, err := conn.NewClient(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	var recs []*kgo.Record
	for _, topic := range made {
		for part := range int32(4) {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: part, Value: []byte("w")})
		}
	}
	if err := cl2.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("writing to the topics made, after the refusal: %v\n%s", err, p.Output())
	}
	if got := testutil.ReadCommitted(t, conn, time.Minute, made...); len(got) != 2*4*len(made) {
		t.Fatalf("read %d records back, want %d", len(got), 2*4*len(made))
	}
}
