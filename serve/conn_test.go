package serve_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
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

// TestMaxConns: a listener of Listener holds at most MaxConns
// connections; the next is served once one closes.
func TestMaxConns(t *testing.T) {
	a := start(t, serve.MaxConns(2), serve.ReadHeaderTimeout(time.Minute))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := a.srv.HTTPServer(a.srv.Handler())
	go func() { _ = hs.Serve(a.srv.Listener(ln)) }()
	t.Cleanup(func() { hs.Close() })
	var idle []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	c, err := net.Dial("tcp", ln.Addr().String()) // the kernel's backlog takes it
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
		t.Fatalf("a third connection while two are open: %v; want no answer", err)
	}
	idle[0].Close()
	if err := c.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the third connection once one closed: %v %v", resp, err)
	}
	resp.Body.Close()
}
