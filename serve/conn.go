package serve

import (
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// What a client may hold of a server: every request's header must arrive
// within ReadHeaderTimeout and its body within BodyReadTimeout, token or
// not, and a listener wrapped by Listener holds at most MaxConns
// connections open at once.

// HTTPServer returns an http.Server of h (Handler or AdminHandler) with
// the server's header read deadline (ReadHeaderTimeout) and idle timeout
// (DefaultIdleTimeout). It sets no ReadTimeout or WriteTimeout: a long
// poll (a consume or a wait) holds its request for minutes; h bounds the
// reading of each body instead (BodyReadTimeout).
func (s *Server) HTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: s.cfg.headerTimeout, IdleTimeout: DefaultIdleTimeout}
}

// Listener bounds ln to MaxConns connections open at once: past it, the
// next connection waits in the operating system's backlog until one
// closes. Wrap the TCP listener, and put TLS (tls.NewListener) above it,
// so that net/http still sees each *tls.Conn.
func (s *Server) Listener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, s.cfg.maxConns), done: make(chan struct{})}
}

// limitListener is a listener with a semaphore of connections.
type limitListener struct {
	net.Listener
	slots chan struct{}
	done  chan struct{}
	once  sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { close(l.done) })
	return err
}

// limitConn gives its slot back when it closes, once.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
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
