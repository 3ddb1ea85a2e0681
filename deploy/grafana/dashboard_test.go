package grafana_test

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/periodic"
	"github.com/onceq/onceq/producer"
	"github.com/onceq/onceq/serve"
)

// recorder is a Registerer that keeps the name and variable labels of
// every metric registered, children or not.
// recorder notes the labels of every metric registered with it. A
// component may register from a goroutine of its own (onceq serve's
// scheduler does, once it runs): mu guards labels.
type recorder struct {
	mu     sync.Mutex
	labels map[string][]string
}

// snapshot returns the labels noted so far.
func (r *recorder) snapshot() map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.labels)
}

var descRe = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	for d := range ch {
		m := descRe.FindStringSubmatch(d.String())
		if m == nil {
			continue
		}
		var labels []string
		for _, l := range strings.Split(m[2], ",") {
			if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
				labels = append(labels, l)
			}
		}
		r.mu.Lock()
		r.labels[m[1]] = labels
		r.mu.Unlock()
	}
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

func (r *recorder) Unregister(prometheus.Collector) bool { return true }

var (
	metricRe = regexp.MustCompile(`\bonceq_[a-z_]+`)
	byRe     = regexp.MustCompile(`by \(([^)]*)\)`)
)

// TestDashboardQueriesExist: every metric the dashboard queries is one a
// worker, the delay service, a scheduler, a producer or onceq serve
// registers, and every label it groups by is one of that metric's.
func TestDashboardQueriesExist(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	rec := &recorder{labels: map[string][]string{}}
	if _, err := consumer.New(consumer.Conn(conn), consumer.Queues("q"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(consumer.HandlerFunc(func(context.Context, *consumer.Task) error { return nil })), consumer.Registerer(rec)); err != nil {
		t.Fatal(err)
	}
	if _, err := delay.NewService(delay.Conn(conn), delay.Registerer(rec)); err != nil {
		t.Fatal(err)
	}
	if _, err := periodic.NewScheduler(periodic.Conn(conn), periodic.Registerer(rec)); err != nil {
		t.Fatal(err)
	}
	p, err := producer.New(producer.Conn(conn), producer.Registerer(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := serve.New(ctx, serve.Conn(conn), serve.Registerer(rec), serve.DelayService(false))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	b, err := os.ReadFile("onceq.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	registered := rec.snapshot()
	queried := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range metricRe.FindAllString(tg.Expr, -1) {
				queried++
				name := m
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if base := strings.TrimSuffix(m, suffix); base != m {
						if _, ok := registered[base]; ok {
							name = base
						}
					}
				}
				labels, ok := registered[name]
				if !ok {
					t.Errorf("panel %q queries %s, which nothing registers", p.Title, m)
					continue
				}
				for _, by := range byRe.FindAllStringSubmatch(tg.Expr, -1) {
					for _, l := range strings.Split(by[1], ",") {
						if l = strings.TrimSpace(l); l != "le" && !slices.Contains(labels, l) {
							t.Errorf("panel %q groups %s by %q; its labels are %v", p.Title, m, l, labels)
						}
					}
				}
			}
		}
	}
	if queried < 15 {
		t.Fatalf("the dashboard queries %d metrics: want its panels' queries", queried)
	}
}

// TestDashboardLayout: every panel fits the grid's 24 columns and no two
// overlap, which Grafana would resolve by moving one where it was not
// meant to go.
func TestDashboardLayout(t *testing.T) {
	b, err := os.ReadFile("onceq.json")
	if err != nil {
		t.Fatal(err)
	}
	type rect struct{ H, W, X, Y int }
	var dash struct {
		Panels []struct {
			Title   string
			GridPos rect
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	if len(dash.Panels) == 0 {
		t.Fatal("no panels")
	}
	for i, a := range dash.Panels {
		g := a.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q at %+v: want a positive size within 24 columns", a.Title, g)
		}
		for _, b := range dash.Panels[i+1:] {
			h := b.GridPos
			if g.X < h.X+h.W && h.X < g.X+g.W && g.Y < h.Y+h.H && h.Y < g.Y+g.H {
				t.Errorf("panels %q at %+v and %q at %+v overlap", a.Title, g, b.Title, h)
			}
		}
	}
}
