package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
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
	code, account, stderr := runCLI(t, "correct horse battery\n", "token", "account", "ops")
	if code != 0 {
		t.Fatalf("token account: exit %d: %s", code, stderr)
	}
	accounts := filepath.Join(t.TempDir(), "admin-accounts")
	if err := os.WriteFile(accounts, []byte(account), 0o600); err != nil {
		t.Fatal(err)
	}
	p := testutil.Start(t, "serve", "--brokers", addr, "--listen", "127.0.0.1:0", "--admin-listen", adminAddr, "--admin-accounts", accounts)
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
	for pw, want := range map[string]int{"correct horse battery": 200, "wrong horse battery": 401} {
		req, _ = http.NewRequest("GET", "http://"+adminAddr+"/pools", nil)
		req.SetBasicAuth("ops", pw)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want || resp.Header.Get("X-Request-ID") == "" {
			t.Errorf("the admin API as account ops, password %q: %d, X-Request-ID %q; want %d and one", pw, resp.StatusCode, resp.Header.Get("X-Request-ID"), want)
		}
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

	dir := t.TempDir()
	badAccounts, plain := filepath.Join(dir, "bad"), filepath.Join(dir, "plain")
	if err := os.WriteFile(badAccounts, []byte("# ops\nops:secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--admin-listen", "127.0.0.1:0", "--admin-accounts", badAccounts}, badAccounts + ":2: account ops: its password's hash is not bcrypt's"},
		{[]string{"serve", "--admin-listen", "127.0.0.1:0", "--admin-accounts", filepath.Join(dir, "none")}, "--admin-accounts: open " + filepath.Join(dir, "none")},
		{[]string{"serve", "--admin-accounts", plain}, "without --admin-listen"},
		{[]string{"serve", "--listen", "nope"}, `--listen "nope"`},
		{[]string{"serve", "--https-cert", "c.pem"}, "--https-cert and --https-key go together"},
		{[]string{"serve", "--tls-cert", "c.pem", "--tls-key", "k.pem"}, "the HTTPS certificate of onceq serve is --https-cert"},
		// The brokers' client certificate reaches the connection to them.
		{[]string{"serve", "--tls", "--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"}, `TLS file "/nonexistent/c.pem" cannot be read`},
		{[]string{"serve", "--create-queues", "0"}, "--create-queues 0"},
		{[]string{"serve", "--shutdown-timeout", "0s"}, "--shutdown-timeout 0s"},
		{[]string{"serve", "extra"}, "want no arguments"},
		{[]string{"serve", "--pull-slots", "0"}, "--pull-slots"},
		{[]string{"serve", "--pull-held", "0"}, "--pull-held 0"},
		{[]string{"serve", "--pull-held", "2000000"}, "--pull-held 2000000"},
		{[]string{"serve", "--lane", "a/b"}, `--lane "a/b"`},
		{[]string{"serve", "--lane", "onceq-x"}, "--lane"},
		{[]string{"serve", "--lane", ""}, "--lane is empty"},
		{[]string{"serve", "--topic-per-queue", "--lane", "x"}, `--topic-per-queue and --lane "x"`},
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

// TestServeProbesOutsideTheCap: with --metrics-addr, /healthz and
// /metrics answer on a listener of their own while every place of
// --listen is held by a request in flight (two publishes waiting for
// their bodies, --max-conns 2), which /healthz on --listen waits behind.
func TestServeProbesOutsideTheCap(t *testing.T) {
	addr, _ := produceBroker(t)
	code, out, stderr := runCLI(t, "", "--brokers", addr, "token", "create", "shop")
	if code != 0 {
		t.Fatalf("token create: %s", stderr)
	}
	tok := strings.TrimSpace(out)
	metrics := testutil.FreeAddr(t)
	p := testutil.Start(t, "serve", "--brokers", addr, "--listen", "127.0.0.1:0", "--max-conns", "2", "--body-read-timeout", "1m",
		"--metrics-addr", metrics)
	defer p.Kill()
	line := p.WaitOutput(t, `msg=serving url=http://127\.0\.0\.1:\d+`, 30*time.Second)
	api := strings.TrimPrefix(regexp.MustCompile(`http://127\.0\.0\.1:\d+`).FindString(line), "http://")
	for i := range 2 {
		c, err := net.Dial("tcp", api)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := fmt.Fprintf(c, "PUT /api/shop/q?id=held-%d HTTP/1.1\r\nHost: x\r\nX-Token: %s\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", i, tok); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.Contains(line, "100 Continue") {
			t.Fatalf("publish %d: %q %v; want 100 Continue", i, line, err)
		}
	}
	probe := &http.Client{Timeout: time.Second}
	if resp, err := probe.Get("http://" + api + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatalf("/healthz on --listen with its places held: %d; want it to wait", resp.StatusCode)
	}
	for _, path := range []string{"/healthz", "/metrics"} {
		start := time.Now()
		resp, err := probe.Get("http://" + metrics + path)
		if err != nil {
			t.Fatalf("%s on --metrics-addr with --listen's places held: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || path == "/metrics" && !strings.Contains(string(b), "go_goroutines") {
			t.Fatalf("%s on --metrics-addr: %d\n%.500s", path, resp.StatusCode, b)
		}
		t.Logf("%s on --metrics-addr answered in %v", path, time.Since(start).Round(time.Microsecond))
	}
}

// TestServeFlagsRefusedByName: every flag serve refuses is named by
// itself with what it takes, all of them at once, exit 2, before the
// brokers are reached (there are none at --brokers): an address flag's
// port out of range is blamed on that flag (not on --metrics-addr), and a
// rate of NaN or Inf, a partition count past what a topic takes, or a
// retention too short are refused.
func TestServeFlagsRefusedByName(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--listen", ":99999"}, []string{`--listen ":99999": invalid listen address`, "0 to 65535"}},
		{[]string{"--admin-listen", "127.0.0.1:99999"}, []string{`--admin-listen "127.0.0.1:99999": invalid listen address`}},
		{[]string{"--metrics-addr", "nope"}, []string{`--metrics-addr "nope": invalid listen address`}},
		{[]string{"--rate-limit", "NaN"}, []string{`--rate-limit "NaN/s, burst 100"`, "a finite rate of 0.00001"}},
		{[]string{"--rate-limit", "Inf"}, []string{`--rate-limit "+Inf/s, burst 100"`, "a finite rate"}},
		{[]string{"--rate-limit", "-1"}, []string{`--rate-limit "-1/s`}},
		{[]string{"--rate-limit", "1e-9"}, []string{"--rate-limit", "0.00001 (about one a day) or more"}},
		{[]string{"--rate-burst", "-1"}, []string{`--rate-burst/--rate-limit "0/s, burst -1"`}},
		{[]string{"--create-queues", "100000"}, []string{"--create-queues 100000: want a partition count from 1 to 10000"}},
		{[]string{"--retention", "1s"}, []string{"--retention 1s: want 1m"}},
		{[]string{"--retention", "-1h"}, []string{"--retention -1h0m0s: want 1m"}},
		// All at once.
		{[]string{"--listen", ":99999", "--rate-limit", "NaN", "--create-queues", "0", "--max-conns", "0"},
			[]string{`--listen ":99999"`, `--rate-limit "NaN`, "--create-queues 0", "--max-conns 0"}},
	} {
		args := append([]string{"serve", "--brokers", "127.0.0.1:1"}, tc.args...)
		code, _, stderr := runCLI(t, "", args...)
		if code != exitUsage || tc.args[0] != "--metrics-addr" && strings.Contains(stderr, "--metrics-addr") || strings.Contains(stderr, "dial") {
			t.Errorf("onceq %s: exit %d, stderr %q; want exit 2, before dialing, without --metrics-addr", strings.Join(args, " "), code, stderr)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("onceq %s: stderr %q; want %q in it", strings.Join(args, " "), stderr, w)
			}
		}
	}
}

// TestServeTLS: with --https-cert and --https-key the server answers HTTPS
// with the certificate, and plain HTTP gets no answer of the API.
func TestServeTLS(t *testing.T) {
	addr, _ := produceBroker(t)
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "onceq-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	p := testutil.Start(t, "serve", "--brokers", addr, "--listen", "127.0.0.1:0", "--https-cert", certFile, "--https-key", keyFile)
	defer p.Kill()
	line := p.WaitOutput(t, `serving.*url=https://127\.0\.0\.1:\d+`, 30*time.Second)
	url := regexp.MustCompile(`https://127\.0\.0\.1:\d+`).FindString(line)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	resp, err := cl.Get(url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil {
		t.Fatalf("https healthz: %d, TLS %v", resp.StatusCode, resp.TLS != nil)
	}
	if resp, err := http.Get(strings.Replace(url, "https://", "http://", 1) + "/healthz"); err == nil && resp.StatusCode == 200 {
		resp.Body.Close()
		t.Fatal("plain HTTP answered on the TLS listener")
	}
	if code, _, stderr := runCLI(t, "", "serve", "--brokers", addr, "--https-cert", keyFile, "--https-key", certFile); code != exitUsage || !strings.Contains(stderr, "--https-cert, --https-key") {
		t.Fatalf("swapped certificate and key: exit %d: %s", code, stderr)
	}
}
