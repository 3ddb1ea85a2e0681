package serve

import (
	"container/list"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// What a client may hold of a server: every request's header must arrive
// within ReadHeaderTimeout and its body within BodyReadTimeout, token or
// not, and a listener wrapped by Listener holds at most MaxConns
// connections open at once, of which those that carry no request give
// their place to the next connection.

// HTTPServer returns an http.Server of h (Handler or AdminHandler) with
// the server's header read deadline (ReadHeaderTimeout) and idle timeout
// (DefaultIdleTimeout), which tells a Listener which of its connections
// carry no request. It sets no ReadTimeout or WriteTimeout: a long poll
// (a consume or a wait) holds its request for minutes; h bounds the
// reading of each body instead (BodyReadTimeout).
//
// It serves HTTP/1.1, what lmstfy's clients speak: net/http reports no
// states of an HTTP/2 connection, whose place a Listener could then give
// away with requests in flight.
func (s *Server) HTTPServer(h http.Handler) *http.Server {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	return &http.Server{Handler: h, ReadHeaderTimeout: s.cfg.headerTimeout, IdleTimeout: DefaultIdleTimeout, ConnState: trackConn,
		Protocols: &protocols}
}

// Listener bounds ln to MaxConns connections open at once. A connection
// that carries no request, as the http.Server of HTTPServer reports it
// (a new one whose request's header has not all arrived, or a kept-alive
// one between requests), does not hold its place: at the bound, the next
// connection takes the place of the one that carried none the longest,
// which is closed. Only while every connection carries a request does
// the next wait, in the operating system's backlog, for one to end. So
// no number of idle or slow-header connections keeps a request (a
// /healthz probe, say) from being served. Wrap the TCP listener, and put
// TLS (tls.NewListener) above it, so that net/http still sees each
// *tls.Conn. Served by another http.Server, every connection holds its
// place until it closes.
func (s *Server) Listener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, max: s.cfg.maxConns, freed: make(chan struct{}, 1), done: make(chan struct{})}
}

// limitListener is a listener that counts its open connections and keeps
// those that carry no request in the order they became so.
type limitListener struct {
	net.Listener
	max  int
	done chan struct{}
	once sync.Once
	// freed is signaled when a place frees or a connection goes idle.
	freed chan struct{}

	mu   sync.Mutex
	open int
	idle list.List // of *limitConn carrying no request, the longest first
}

func (l *limitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	for {
		l.mu.Lock()
		if l.open < l.max {
			l.open++
			l.mu.Unlock()
			return &limitConn{Conn: c, l: l}, nil
		}
		var victim *limitConn
		if e := l.idle.Front(); e != nil {
			victim = e.Value.(*limitConn)
			l.idle.Remove(e)
			victim.elem = nil
		}
		l.mu.Unlock()
		if victim != nil {
			victim.Close() // gives its place back
			continue
		}
		select {
		case <-l.freed:
		case <-l.done:
			c.Close()
			return nil, net.ErrClosed
		}
	}
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { close(l.done) })
	return err
}

// signal wakes an Accept waiting for a place.
func (l *limitListener) signal() {
	select {
	case l.freed <- struct{}{}:
	default:
	}
}

// setIdle records whether c carries no request.
func (l *limitListener) setIdle(c *limitConn, idle bool) {
	l.mu.Lock()
	switch {
	case c.released:
	case idle && c.elem == nil:
		c.elem = l.idle.PushBack(c)
	case !idle && c.elem != nil:
		l.idle.Remove(c.elem)
		c.elem = nil
	}
	l.mu.Unlock()
	if idle {
		l.signal()
	}
}

// release gives c's place back, once it closed.
func (l *limitListener) release(c *limitConn) {
	l.mu.Lock()
	if c.elem != nil {
		l.idle.Remove(c.elem)
		c.elem = nil
	}
	c.released = true
	l.open--
	l.mu.Unlock()
	l.signal()
}

// limitConn gives its place back when it closes, once.
type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
	// Guarded by l.mu: its element in l.idle while it carries no request,
	// and whether its place was given back.
	elem     *list.Element
	released bool
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c) })
	return err
}

// trackConn is HTTPServer's ConnState hook: it tells the Listener a
// connection came from (under TLS too) whether the connection carries a
// request.
func trackConn(c net.Conn, state http.ConnState) {
	for {
		switch v := c.(type) {
		case *limitConn:
			switch state {
			case http.StateNew, http.StateIdle:
				v.l.setIdle(v, true)
			case http.StateActive, http.StateHijacked:
				v.l.setIdle(v, false)
			}
			return
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return
		}
	}
}

// bodyDeadline bounds the reading of a request's body: it must arrive
// within BodyReadTimeout of the request's start, whatever the handler
// does with it (a request refused before its body is read, for a missing
// token say, has its body discarded by net/http under the same deadline,
// and its connection closed past it). The deadline is lifted once the
// body is read, so that a handler that then waits (an acknowledgment
// waiting for its commit) is not cut, and a request without a body never
// gets one: net/http watches its connection while the handler runs, and
// a deadline there would end a long poll.
func (s *Server) bodyDeadline(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(s.cfg.bodyTimeout)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// deadlineBody lifts its connection's read deadline at the body's end.
type deadlineBody struct {
	io.ReadCloser
	once sync.Once
	lift func()
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.once.Do(b.lift)
	}
	return n, err
}
