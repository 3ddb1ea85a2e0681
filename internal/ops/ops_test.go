package ops

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

var discard = slog.New(slog.DiscardHandler)

// TestListenErrors pins issue 17's exit codes at their source: a malformed
// address is bad input (ErrAddress), a taken port is not (ErrListen).
func TestListenErrors(t *testing.T) {
	for _, addr := range []string{"nope", "127.0.0.1:99999", "127.0.0.1:http", "127.0.0.1:-1", ":"} {
		if _, err := Listen(addr, NewRegistry(), nil, discard, false); !errors.Is(err, ErrAddress) || errors.Is(err, ErrListen) {
			t.Errorf("Listen(%q): %v, want ErrAddress", addr, err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := Listen(ln.Addr().String(), NewRegistry(), nil, discard, false); !errors.Is(err, ErrListen) || errors.Is(err, ErrAddress) {
		t.Fatalf("a taken port: %v, want ErrListen", err)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestProbes: /healthz and /readyz follow the registered components, and
// name the one that is not healthy or ready.
func TestProbes(t *testing.T) {
	var mu sync.Mutex
	healthy, ready := errors.New("no response from the brokers for 20s"), errors.New("restoring")
	h := &Health{}
	h.Register("delay", CheckerFuncs{})
	h.Register("worker", CheckerFuncs{
		HealthyFunc: func() error { mu.Lock(); defer mu.Unlock(); return healthy },
		ReadyFunc:   func() error { mu.Lock(); defer mu.Unlock(); return ready },
	})
	srv, err := Listen("127.0.0.1:0", NewRegistry(), h, discard, false)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	base := "http://" + srv.Addr()
	if code, body := get(t, base+"/healthz"); code != 503 || body != "worker: no response from the brokers for 20s\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != 503 || !strings.Contains(body, "worker: restoring") {
		t.Fatalf("/readyz: %d %q", code, body)
	}
	mu.Lock()
	healthy, ready = nil, nil
	mu.Unlock()
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, base+p); code != 200 || body != "ok\n" {
			t.Fatalf("%s: %d %q", p, code, body)
		}
	}
	if code, body := get(t, base+"/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("/metrics: %d", code)
	}
	// No components: ok.
	if code, _ := get(t, base+"/debug/pprof/"); code != 404 {
		t.Fatalf("/debug/pprof/ without --pprof: %d, want 404", code)
	}
	srv2, err := Listen("127.0.0.1:0", NewRegistry(), nil, discard, false)
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Close()
	if code, _ := get(t, "http://"+srv2.Addr()+"/readyz"); code != 200 {
		t.Fatalf("/readyz without components: %d", code)
	}
}

// TestPprof: --pprof serves Go's profiles on a loopback address, and is
// refused on any other, before anything listens.
func TestPprof(t *testing.T) {
	for _, addr := range []string{":9464", "0.0.0.0:0", "10.1.2.3:0", "example.com:0"} {
		if _, err := Listen(addr, NewRegistry(), nil, discard, true); !errors.Is(err, ErrAddress) || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("Listen(%q) with pprof: %v, want ErrAddress naming loopback", addr, err)
		}
	}
	srv, err := Listen("127.0.0.1:0", NewRegistry(), nil, discard, true)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if code, body := get(t, "http://"+srv.Addr()+"/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Fatalf("/debug/pprof/: %d %.200q", code, body)
	}
	if code, body := get(t, "http://"+srv.Addr()+"/debug/pprof/heap?debug=1"); code != 200 || !strings.Contains(body, "heap profile") {
		t.Fatalf("/debug/pprof/heap: %d %.200q", code, body)
	}
}

func TestBrokerHealth(t *testing.T) {
	now := time.Unix(1000, 0)
	h := NewBrokerHealth(10 * time.Second)
	h.now = func() time.Time { return now }
	h.Start()
	if err := h.Healthy(); err != nil {
		t.Fatalf("within the window after the start: %v", err)
	}
	h.OnBrokerConnect(kgo.BrokerMetadata{Host: "127.0.0.1", Port: 9092}, 0, nil, errors.New("connection refused"))
	now = now.Add(11 * time.Second)
	if err := h.Healthy(); err == nil || !strings.Contains(err.Error(), "since the start, 11s ago: connecting to 127.0.0.1:9092: connection refused") {
		t.Fatalf("no broker ever answered: %v", err)
	}
	h.OnBrokerRead(kgo.BrokerMetadata{}, 0, 10, 0, 0, nil)
	if err := h.Healthy(); err != nil {
		t.Fatalf("after a response: %v", err)
	}
	now = now.Add(5 * time.Second)
	h.OnBrokerRead(kgo.BrokerMetadata{}, 0, 0, 0, 0, errors.New("EOF"))
	now = now.Add(6 * time.Second)
	if err := h.Healthy(); err == nil || !strings.Contains(err.Error(), "no response from the brokers for 11s: EOF") {
		t.Fatalf("silent brokers: %v", err)
	}
	h.OnBrokerRead(kgo.BrokerMetadata{}, 0, 10, 0, 0, nil)
	h.OnGroupManageError(errors.New("GROUP_AUTHORIZATION_FAILED"))
	if err := h.Healthy(); err == nil || !strings.Contains(err.Error(), "not a member of the group: GROUP_AUTHORIZATION_FAILED") {
		t.Fatalf("group error: %v", err)
	}
	h.Joined()
	if err := h.Healthy(); err != nil || !h.HasJoined() {
		t.Fatalf("joined again: %v", err)
	}
	var revoked map[string][]int32
	lost := h.OnLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { revoked = m })
	lost(context.Background(), nil, map[string][]int32{"q": {1}})
	if err := h.Healthy(); err == nil || !strings.Contains(err.Error(), "session expired") {
		t.Fatalf("lost: %v", err)
	}
	if len(revoked["q"]) != 1 {
		t.Fatalf("lost partitions not passed to revoked: %v", revoked)
	}
}
