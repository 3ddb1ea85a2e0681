package serve_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
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
