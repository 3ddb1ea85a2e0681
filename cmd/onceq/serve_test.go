package main

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testutil"
)

// TestServeCommand runs onceq serve as a process: /healthz answers
// without a token, a publish needs one (made by token create), and
// SIGTERM stops it cleanly; bad flags exit 2.
func TestServeCommand(t *testing.T) {
	addr, _ := produceBroker(t)
	code, out, stderr := runCLI(t, "", "--brokers", addr, "token", "create", "shop")
	if code != 0 {
		t.Fatalf("token create: %s", stderr)
	}
	tok := strings.TrimSpace(out)
	adminAddr := testutil.FreeAddr(t)
	p := testutil.Start(t, "serve", "--brokers", addr, "--listen", "127.0.0.1:0", "--admin-listen", adminAddr)
	defer p.Kill()
	line := p.WaitOutput(t, `serving.*url=http://127\.0\.0\.1:\d+`, 30*time.Second)
	url := regexp.MustCompile(`http://127\.0\.0\.1:\d+`).FindString(line)
	get := func(method, path, token string) (int, string) {
		req, _ := http.NewRequest(method, url+path, strings.NewReader("hello"))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("GET", "/healthz", ""); code != 200 || body != "ok\n" {
		t.Fatalf("healthz: %d %q", code, body)
	}
	p.WaitOutput(t, "serving the token admin API", 10*time.Second)
	req, _ := http.NewRequest("GET", "http://"+adminAddr+"/token/shop", nil)
	req.Header.Set("X-Token", tok)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 403 {
		t.Fatalf("the admin API with a namespace's token: %v %v; want 403", resp, err)
	} else {
		resp.Body.Close()
	}
	if code, _ := get("PUT", "/api/shop/emails", ""); code != 401 {
		t.Fatalf("publish without a token: %d", code)
	}
	if code, body := get("PUT", "/api/shop/emails?id=a-1", tok); code != 201 || !strings.Contains(body, `"job_id":"a-1"`) {
		t.Fatalf("publish: %d %s", code, body)
	}
	if code, body := get("GET", "/api/shop/emails/job/a-1", tok); code != 200 || !strings.Contains(body, `"state":"pending"`) {
		t.Fatalf("job: %d %s", code, body)
	}
	p.Signal(syscall.SIGTERM)
	if code, err := p.Wait(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("serve after SIGTERM: exit %d, %v\n%s", code, err, p.Output())
	}
	if !strings.Contains(p.Output(), "stopped") {
		t.Fatalf("no clean stop in the log:\n%s", p.Output())
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--listen", "nope"}, `--listen "nope"`},
		{[]string{"serve", "--tls-cert", "c.pem"}, "--tls-cert and --tls-key go together"},
		{[]string{"serve", "--create-queues", "0"}, "--create-queues 0"},
		{[]string{"serve", "--shutdown-timeout", "0s"}, "--shutdown-timeout 0s"},
		{[]string{"serve", "extra"}, "want no arguments"},
		{[]string{"serve", "--pull-slots", "0"}, "--pull-slots"},
		{[]string{"serve", "--admin-listen", "nope"}, `--admin-listen "nope"`},
		{[]string{"serve", "--max-payload-bytes", "0"}, "--max-payload-bytes"},
		{[]string{"serve", "--rate-limit", "10", "--rate-burst", "0"}, "--rate-burst/--rate-limit"},
	} {
		code, _, stderr := runCLI(t, "", tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("onceq %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
}
