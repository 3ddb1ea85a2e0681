package serve_test

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/serve"
)

// probe answers a GET of path on a's server without a token.
func (a *api) probe(path string) (int, string) {
	a.t.Helper()
	resp, err := http.Get(a.url + path)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestSideServiceFailure: a server whose delay service cannot keep its
// state (a file where --data-dir's delay directory goes) closes Done with
// an error naming the delay service, and its probes answer 503 naming it,
// where it used to log the failure and serve on without moving delayed
// tasks. A server whose side services run answers its probes 200 once
// they are ready, keeps Done open, and closes it without an error on
// Close.
func TestSideServiceFailure(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "delay"), []byte("not a directory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := start(t, serve.DataDir(dir), serve.InsecureNoAuth(true))
	select {
	case <-a.srv.Done():
	case <-time.After(3 * time.Minute):
		t.Fatalf("Done still open 3 minutes after the delay service could not start; Err %v", a.srv.Err())
	}
	if err := a.srv.Err(); err == nil || !strings.HasPrefix(err.Error(), "the delay service stopped: delay: state dir:") {
		t.Fatalf("Err: %v; want the delay service's failure, named", err)
	}
	if code, body := a.probe("/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "delay: delay: stopped: delay: state dir:") {
		t.Errorf("/healthz: %d %q; want 503 naming the delay service", code, body)
	}
	if code, body := a.probe("/readyz"); code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "delay: ") {
		t.Errorf("/readyz: %d %q; want 503 naming the delay service", code, body)
	}

	ok := startOn(t, a.conn, serve.DataDir(t.TempDir()), serve.InsecureNoAuth(true))
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		code, body := ok.probe("/readyz")
		if code == http.StatusOK && body == "ok\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d %q after 3 minutes", code, body)
		}
	}
	if code, body := ok.probe("/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz of a server whose side services run: %d %q", code, body)
	}
	select {
	case <-ok.srv.Done():
		t.Fatalf("Done closed while the side services run: %v", ok.srv.Err())
	default:
	}
	ok.close()
	<-ok.srv.Done()
	if err := ok.srv.Err(); err != nil {
		t.Fatalf("Err after Close: %v, want nil", err)
	}
}
