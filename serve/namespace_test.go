package serve_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/producer"
	"github.com/onceq/onceq/serve"
)

// Namespaces cannot touch each other: each test here pins a hole one
// namespace had into another's objects.

// TestNamespaceWorkflowIDs: a namespace's workflow IDs (given, and the
// default <queue>/<task ID> of a task with dependencies) are its own:
// another namespace that registered the same IDs first takes nothing
// from it, and cannot read or cancel its workflows, started or not,
// nor learn their queues from a message.
func TestNamespaceWorkflowIDs(t *testing.T) {
	// No workflow service: the workflows stay pending, never started.
	a := start(t, serve.CreateQueues(1), serve.WorkflowService(false))
	shop, other := a.token("shop", false), a.token("other", false)
	code, body := a.do("POST", "/api/other/orders/bulk", other,
		`[{"id":"daily","chain":[{"payload":"b"}]},{"id":"shop.orders/ship-9","chain":[{"payload":"b"}]}]`)
	if code != 201 {
		t.Fatalf("other's bulk: %d %v", code, body)
	}
	code, body = a.do("POST", "/api/shop/orders/bulk", shop,
		`[{"id":"daily","chain":[{"queue":"private","payload":"a"}]},{"id":"ship-9","depends_on":["pay-9"]}]`)
	jobs, _ := body["jobs"].([]any)
	if code != 201 || len(jobs) != 2 {
		t.Fatalf("shop's bulk: %d %v", code, body)
	}
	for i, want := range []string{"daily", "shop.orders/ship-9"} {
		if j := jobs[i].(map[string]any); j["job_id"] != want || j["new"] != true {
			t.Errorf("shop's workflow %d: %v; want %s, new: another namespace's workflow of that ID is not shop's", i, j, want)
		}
	}
	for _, id := range []string{"daily", "shop.orders%2Fship-9"} {
		if code, body := a.do("GET", "/api/shop/orders/workflow/"+id, shop, ""); code != 200 || body["state"] != "pending" {
			t.Errorf("shop's workflow %s: %d %v; want 200, pending", id, code, body)
		}
	}
	if code, body := a.do("GET", "/api/shop/orders/workflow/daily", shop, ""); code != 200 || body["id"] != "daily" {
		t.Errorf("shop's workflow daily: %d %v; want its ID as shop gave it", code, body)
	}
	// Another namespace reads its own daily, and nothing of shop's.
	code, body = a.do("GET", "/api/other/orders/workflow/daily", other, "")
	if start, _ := body["start"].(map[string]any); code != 200 || start == nil || strings.Contains(fmt.Sprint(body), "private") {
		t.Errorf("other's daily: %d %v; want its own", code, body)
	}
	a.do("POST", "/api/shop/orders/bulk", shop, `[{"id":"secret-1","chain":[{"queue":"private","payload":"x"}]}]`)
	if code, body := a.do("GET", "/api/shop/orders/workflow/secret-1", shop, ""); code != 200 {
		t.Fatalf("shop's secret-1: %d %v", code, body)
	}
	for _, r := range [][2]string{
		{"GET", "/api/other/orders/workflow/secret-1"},
		{"GET", "/api/other/orders/workflow/secret-1/wait?timeout=1"},
		{"DELETE", "/api/other/orders/workflow/secret-1"},
		{"GET", "/api/other/orders/workflow/shop%2Fsecret-1"},
	} {
		code, body := a.do(r[0], r[1], other, "")
		// The ID asked for is echoed; nothing else of shop's is named.
		msg := strings.ReplaceAll(fmt.Sprint(body), "shop/secret-1 not found", "")
		if code != 404 || strings.Contains(msg, "shop") || strings.Contains(msg, "private") {
			t.Errorf("%s %s with another namespace's token: %d %v; want 404 naming nothing of shop's", r[0], r[1], code, body)
		}
	}
	if code, body := a.do("GET", "/api/shop/orders/workflow/secret-1", shop, ""); code != 200 || body["state"] != "pending" {
		t.Errorf("shop's secret-1 after another namespace's cancel: %d %v; want pending", code, body)
	}
	long := strings.Repeat("w", 200-len("shop/")+1)
	if code, body := a.do("POST", "/api/shop/orders/bulk", shop, `[{"id":"`+long+`","chain":[{"payload":"a"}]}]`); code != 400 ||
		!strings.Contains(fmt.Sprint(body["error"]), "at most 195 in namespace shop") {
		t.Errorf("a workflow ID too long once kept as shop/<id>: %d %v; want 400", code, body)
	}
}

// TestNamespaceTopics: a queue's topic is <ns>.<queue>, and Kafka takes
// '.' and '_' in topic names for one character: a queue name with either
// is refused (400 naming the rule) wherever a queue is named, and nothing
// is made, so that shop's queue x_y can never be shop_x's queue y.
func TestNamespaceTopics(t *testing.T) {
	a := start(t, serve.CreateQueues(1))
	shop, shopX := a.token("shop", false), a.token("shop_x", false)
	for _, r := range [][3]string{
		{"PUT", "/api/shop/x_y", "hi"},
		{"PUT", "/api/shop/x.y", "hi"},
		{"GET", "/api/shop/ok,x_y?timeout=0", ""},
		{"POST", "/api/shop/ok/bulk", `[{"queue":"x_y","payload":"a"}]`},
		{"POST", "/api/shop/ok/bulk", `[{"id":"w","chain":[{"queue":"x_y"}]}]`},
		{"PUT", "/api/shop/x_y/bulk", `["a"]`},
		{"PUT", "/periodic/shop/tick?every=1m&queue=x_y", ""},
	} {
		code, body := a.do(r[0], r[1], shop, r[2])
		if msg := fmt.Sprint(body); code != 400 || !strings.Contains(msg, "queue") || !strings.Contains(msg, "'.' and '_'") {
			t.Errorf("%s %s: %d %v; want 400 naming the queue and Kafka's rule", r[0], r[1], code, body)
		}
	}
	if code, body := a.do("PUT", "/api/shop_x/y", shopX, "mine"); code != 201 {
		t.Fatalf("shop_x's queue y: %d %v; want 201", code, body)
	}
	adm, err := broker.NewAdmin(a.conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	for _, topic := range []string{"shop.x_y", "shop.x.y"} {
		if _, err := adm.DescribeTopic(context.Background(), topic); !errors.Is(err, broker.ErrTopicNotFound) {
			t.Errorf("topic %s: %v; want it not made", topic, err)
		}
	}
	// Queues of letters, digits and '-' keep their topic <ns>.<queue>.
	if code, body := a.do("PUT", "/api/shop/Ab-9", shop, "hi"); code != 201 {
		t.Fatalf("queue Ab-9: %d %v", code, body)
	}
	if _, err := adm.DescribeTopic(context.Background(), "shop.Ab-9"); err != nil {
		t.Fatalf("topic shop.Ab-9: %v", err)
	}
}

// TestConsumeMakesNoQueue: a consume of a queue that does not exist
// finds no job, as lmstfy's, and makes neither the queue nor its
// worker's topics; one consume names at most MaxConsumeQueues queues.
func TestConsumeMakesNoQueue(t *testing.T) {
	a := start(t, serve.CreateQueues(1))
	tok := a.token("shop", false)
	if code, body := a.do("GET", "/api/shop/missing?timeout=1", tok, ""); code != 404 || body["msg"] != "no job available" {
		t.Fatalf("consume of a missing queue: %d %v; want 404, no job available", code, body)
	}
	many := make([]string, serve.MaxConsumeQueues+1)
	for i := range many {
		many[i] = fmt.Sprintf("m%d", i)
	}
	code, body := a.do("GET", "/api/shop/"+strings.Join(many, ",")+"?timeout=0", tok, "")
	if code != 400 || body["field"] != "queue" || !strings.Contains(fmt.Sprint(body["error"]), fmt.Sprintf("at most %d", serve.MaxConsumeQueues)) {
		t.Fatalf("consume of %d queues: %d %v; want 400", len(many), code, body)
	}
	adm, err := broker.NewAdmin(a.conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	for _, topic := range []string{"shop.missing", broker.RecordsTopic("shop.missing"), broker.DLQTopic("shop.missing"),
		broker.ChangelogTopic(serve.DefaultPullGroup, "shop.missing"), "shop.m0"} {
		if _, err := adm.DescribeTopic(context.Background(), topic); !errors.Is(err, broker.ErrTopicNotFound) {
			t.Errorf("topic %s: %v; want it not made by a consume", topic, err)
		}
	}
	// Published to since, the queue is consumed.
	if code, body := a.do("PUT", "/api/shop/missing", tok, "now"); code != 201 {
		t.Fatalf("publish: %d %v", code, body)
	}
	if code, body := a.do("GET", "/api/shop/missing?timeout=30", tok, ""); code != 200 || body["msg"] != "new job" {
		t.Fatalf("consume of the queue published to: %d %v", code, body)
	}
}

// TestQueueNameLimit: one limit on a queue name's length governs publish
// and consume: the longest name a publish takes is consumed, one byte
// more is refused at publish, naming the limit; on topics and on a lane.
func TestQueueNameLimit(t *testing.T) {
	// Room for onceq-checkpoint-11-onceq-serve-shop.<queue> in 249 bytes.
	t.Run("topics", func(t *testing.T) { queueNameLimit(t, 249-len(broker.ChangelogTopic(serve.DefaultPullGroup, "shop."))) })
	// A lane queue's label shop.<queue> holds at most onceq.MaxLabelLen.
	t.Run("lane", func(t *testing.T) { queueNameLimit(t, onceq.MaxLabelLen-len("shop."), serve.Lane("lmstfy")) })
}

func queueNameLimit(t *testing.T, longest int, opts ...serve.Opt) {
	a := start(t, append(opts, serve.CreateQueues(1))...)
	tok := a.token("shop", false)
	if code, body := a.do("PUT", "/api/shop/"+strings.Repeat("q", longest+1), tok, "x"); code != 400 || body["field"] != "queue" ||
		!strings.Contains(fmt.Sprint(body["error"]), fmt.Sprintf("at most %d in namespace shop", longest)) {
		t.Fatalf("publish to a queue of %d bytes: %d %v; want 400 naming the limit", longest+1, code, body)
	}
	q := strings.Repeat("q", longest)
	if code, body := a.do("PUT", "/api/shop/"+q, tok, "x"); code != 201 {
		t.Fatalf("publish to a queue of %d bytes: %d %v", longest, code, body)
	}
	if code, body := a.do("GET", "/api/shop/"+q+"?timeout=30", tok, ""); code != 200 || body["msg"] != "new job" {
		t.Fatalf("consume of a queue of %d bytes: %d %v; want its job", longest, code, body)
	}
}

// TestLaneQueueSize: on a lane, a queue's size counts its tasks among the
// lane's; past 10,000 records of backlog, it is estimated from its share
// of the first ones read, within a tenth of its 6,000 tasks here.
func TestLaneQueueSize(t *testing.T) {
	a := start(t, serve.Lane("lmstfy"), serve.CreateQueues(4))
	tok := a.token("shop", false)
	p, err := producer.New(producer.Conn(a.conn))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	size := func(q string) float64 {
		t.Helper()
		code, body := a.do("GET", "/api/shop/"+q+"/size", tok, "")
		if code != 200 {
			t.Fatalf("size of %s: %d %v", q, code, body)
		}
		return body["size"].(float64)
	}
	submit := func(n int) {
		t.Helper()
		tasks := make([]onceq.Task, 0, 2*n)
		for range n {
			tasks = append(tasks, onceq.Task{Queue: "lmstfy/shop.a"}, onceq.Task{Queue: "lmstfy/shop.b"}, onceq.Task{Queue: "lmstfy/shop.b"})
		}
		submitMany(t, p, tasks)
	}
	submit(100)
	if a, b := size("a"), size("b"); a != 100 || b != 200 {
		t.Fatalf("sizes of a and b: %v and %v, want 100 and 200 exactly", a, b)
	}
	submit(5_900)
	if a := size("a"); a < 5_400 || a > 6_600 {
		t.Fatalf("size of a among 18,000 records of the lane: %v, want 6,000 within a tenth", a)
	}
}

// TestLaneOverflow: on a lane fetched for one queue, another queue nobody
// consumes holds its first 1,000 tasks in the pull worker's line
// (consumer.DefaultOnDemandLine) and sends the rest back to the lane for
// a while; consumed, every one of its 1,100 comes out once.
func TestLaneOverflow(t *testing.T) {
	a := start(t, serve.Lane("lmstfy"), serve.CreateQueues(2))
	tok := a.token("shop", false)
	p, err := producer.New(producer.Conn(a.conn))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// A consumer of a keeps the lane fetched.
	go a.do("GET", "/api/shop/a?timeout=20", tok, "")
	const n = consumer.DefaultOnDemandLine + 100
	tasks := make([]onceq.Task, n)
	for i := range tasks {
		tasks[i] = onceq.Task{Queue: "lmstfy/shop.b", ID: fmt.Sprint("b-", i)}
	}
	submitMany(t, p, tasks)
	seen := map[string]int{}
	for deadline := time.Now().Add(2 * time.Minute); len(seen) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs of b consumed after 2 minutes", len(seen), n)
		}
		code, jobs := consume(t, a, tok, "/api/shop/b?count=100&timeout=5&ttr=60")
		if code == 404 {
			continue
		}
		for _, j := range jobs {
			seen[j.JobID]++
			if code, out := a.del("/api/shop/b/job/"+j.JobID, tok, ""); code != 204 || out != "acknowledged" {
				t.Fatalf("ACK of %s: %d %s; want 204 acknowledged", j.JobID, code, out)
			}
		}
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("%s handed out %d times", id, k)
		}
	}
}

// submitMany submits tasks through p and waits for every acknowledgment.
func submitMany(t *testing.T, p *producer.Producer, tasks []onceq.Task) {
	t.Helper()
	var mu sync.Mutex
	var failed error
	p.SubmitMany(t.Context(), tasks, func(_ int, _ producer.Receipt, err error) {
		mu.Lock()
		failed = cmp.Or(failed, err)
		mu.Unlock()
	})
	err := p.Flush(t.Context()) // every callback has run once it returns
	mu.Lock()
	defer mu.Unlock()
	if err := cmp.Or(err, failed); err != nil {
		t.Fatal(err)
	}
}
