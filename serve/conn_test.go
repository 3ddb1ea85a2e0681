package serve_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/serve"
)

// TestSlowBody: a body that does not arrive within BodyReadTimeout does
// not hold its connection: with a token the request is answered 408 and
// the connection closed; without one it is answered 401 and the
// connection closed once the body's time is up.
func TestSlowBody(t *testing.T) {
	a := start(t, serve.BodyReadTimeout(300*time.Millisecond))
	tok := a.token("shop", false)
	for _, tc := range []struct {
		token string
		code  int
	}{{tok, 408}, {"", 401}} {
		c, err := net.Dial("tcp", strings.TrimPrefix(a.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		head := "PUT /api/shop/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
		if tc.token != "" {
			head += "X-Token: " + tc.token + "\r\n"
		}
		if _, err := io.WriteString(c, head+"\r\n0123456789"); err != nil {
			t.Fatal(err)
		}
		// The server answers and closes long before this.
		if err := c.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("token %t: reading the answer: %v", tc.token != "", err)
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || err != nil {
			t.Fatalf("token %t: %d (%v); want %d", tc.token != "", resp.StatusCode, err, tc.code)
		}
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("token %t: the connection after a slow body: %v; want it closed", tc.token != "", err)
		}
	}
	// A long poll without a body is not cut by the body's deadline.
	start := time.Now()
	if code, body := a.do("GET", "/api/shop/slow?timeout=1", tok, ""); code != 404 || body["msg"] != "no job available" || time.Since(start) < time.Second {
		t.Fatalf("a consume of 1s past the body deadline: %d %v after %v", code, body, time.Since(start))
	}
}

// serveCapped serves a's handler on a listener of its own, through
// Listener and HTTPServer as onceq serve does: its address.
func serveCapped(t *testing.T, a *api) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := a.srv.HTTPServer(a.srv.Handler())
	go func() { _ = hs.Serve(a.srv.Listener(ln)) }()
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

// TestMaxConns: a listener of Listener holds at most MaxConns
// connections that carry requests; the next is served once one ends.
func TestMaxConns(t *testing.T) {
	a := start(t, serve.MaxConns(2), serve.ReadHeaderTimeout(time.Minute), serve.BodyReadTimeout(time.Minute))
	tok := a.token("shop", false)
	addr := serveCapped(t, a)
	// Two publishes hold both places with requests in flight: each
	// handler waits for a body that does not come, once it asked for it
	// (100 Continue).
	var busy []net.Conn
	for i := range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := fmt.Fprintf(c, "PUT /api/shop/q?id=held-%d HTTP/1.1\r\nHost: x\r\nX-Token: %s\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", i, tok); err != nil {
			t.Fatal(err)
		}
		if err := c.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || !strings.Contains(line, "100 Continue") {
			t.Fatalf("publish %d: %q %v; want 100 Continue", i, line, err)
		}
		busy = append(busy, c)
	}
	c, err := net.Dial("tcp", addr) // the kernel's backlog takes it
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	if err := c.SetReadDeadline(time.Now().Add(500 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := br.ReadByte(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a third connection while two carry requests: %v; want no answer", err)
	}
	busy[0].Close()
	if err := c.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the third connection once one closed: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestHealthzUnderIdleConnections: connections that carry no request
// do not keep a request from being served. With MaxConns 16, four times
// as many real connections stay open (silent ones, ones that sent half a
// header, kept-alive ones between requests), under a header timeout of a
// minute; then /healthz answers within a second, each time, as do the
// kept-alive connections' next requests, which find their connection
// closed and open another.
func TestHealthzUnderIdleConnections(t *testing.T) {
	const maxConns = 16
	a := start(t, serve.MaxConns(maxConns), serve.ReadHeaderTimeout(time.Minute))
	addr := serveCapped(t, a)
	var open []net.Conn
	t.Cleanup(func() {
		for _, c := range open {
			c.Close()
		}
	})
	for i := range 3 * maxConns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
		if i%2 == 0 {
			if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil { // never ends
				t.Fatal(err)
			}
		}
	}
	keep := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: maxConns}}
	t.Cleanup(keep.CloseIdleConnections)
	var wg sync.WaitGroup
	for range maxConns {
		wg.Go(func() {
			resp, err := keep.Get("http://" + addr + "/healthz")
			if err != nil {
				t.Errorf("a request of a kept-alive connection: %v", err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	wg.Wait()
	probe := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 5 {
		start := time.Now()
		resp, err := probe.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatalf("/healthz %d with %d idle connections open against %d places: %v", i, len(open)+maxConns, maxConns, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/healthz %d: %d", i, resp.StatusCode)
		}
		t.Logf("/healthz %d answered in %v", i, time.Since(start).Round(time.Microsecond))
	}
}
