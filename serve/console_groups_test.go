package serve_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/dlq"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
	"github.com/onceq/onceq/serve"
)

// TestConsoleGroupLagInTasks: the groups page counts a group's lag in
// tasks, leaving out the transaction markers that take offsets: two tasks
// written in one transaction past a group's offset are a lag of 2 tasks
// and 3 offsets.
func TestConsoleGroupLagInTasks(t *testing.T) {
	a := start(t, serve.CreateQueues(1))
	testutil.CreateTopic(t, a.conn, "shop.lagq", 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adm, err := broker.NewAdmin(a.conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	var offsets kadm.Offsets
	offsets.Add(kadm.Offset{Topic: "shop.lagq", Partition: 0, At: 0, LeaderEpoch: -1})
	if _, err := adm.Kadm().CommitOffsets(ctx, "lagging", offsets); err != nil {
		t.Fatal(err)
	}
	p, err := producer.New(producer.Conn(a.conn), producer.Records(false))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.SubmitAll(ctx, []onceq.Task{{Queue: "shop.lagq", ID: "t-1"}, {Queue: "shop.lagq", ID: "t-2"}}); err != nil {
		t.Fatal(err)
	}
	code, _, body := a.page("GET", "/console/groups", a.token("shop", true), nil)
	if code != 200 || !strings.Contains(body, `lag <span class="lagtasks">2</span> tasks`) ||
		!strings.Contains(body, `<td>lagq</td><td class="num">0</td><td class="num">0</td><td class="num">3</td><td class="num">2</td><td class="num">3</td>`) {
		t.Fatalf("the groups page: %d\n%s", code, body)
	}
}

// TestConsoleDeadLettersNewestFirst: the dead letters page lists a
// queue's newest dead letters, newest first, at most 100 of them
// whatever the order they were written in; the count is of them all.
func TestConsoleDeadLettersNewestFirst(t *testing.T) {
	a := start(t, serve.CreateQueues(1))
	testutil.CreateTopic(t, a.conn, "shop.jobs", 1)
	testutil.CreateTopic(t, a.conn, broker.DLQTopic("shop.jobs"), 2)
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var recs []*kgo.Record
	for _, i := range rand.Perm(105) {
		task := onceq.Task{Queue: "shop.jobs", ID: fmt.Sprintf("d-%03d", i), Attempt: 1}
		recs = append(recs, dlq.EncodeTask(&task, dlq.ReasonMaxAttempts, "boom", base.Add(time.Duration(i)*time.Second)))
	}
	cl, err := a.conn.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	code, _, body := a.page("GET", "/console/q/shop.jobs/deadletters", a.token("shop", true), nil)
	ids := regexp.MustCompile(`<tr data-id="(d-\d+)">`).FindAllStringSubmatch(body, -1)
	if code != 200 || len(ids) != 100 || ids[0][1] != "d-104" || ids[99][1] != "d-005" || !strings.Contains(body, `<span class="muted">(105)</span>`) {
		t.Fatalf("the dead letters page: %d, %d listed, first %v, last %v\n%.2000s", code, len(ids), ids[0], ids[len(ids)-1], body)
	}
}
