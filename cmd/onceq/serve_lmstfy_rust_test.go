package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testutil"
)

// TestLmstfyRustClient runs lmstfy's Rust client, the crate lmstfy-client
// 0.1.0 as published, against onceq serve's default layout:
// compat/lmstfy-rust calls every public method of its Client and checks
// each answer as lmstfy's semantics say, as far as the crate can see them
// (its main.rs says how far: it decodes no job of lmstfy's either). The
// same program passes against lmstfy itself.
func TestLmstfyRustClient(t *testing.T) {
	bin := lmstfyRustBinary(t)
	addr, _ := produceBroker(t)
	code, out, stderr := runCLI(t, "", "--brokers", addr, "token", "create", "rust")
	if code != 0 {
		t.Fatalf("token create: exit %d: %s", code, stderr)
	}
	p := testutil.Start(t, "serve", "--brokers", addr, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	url := p.WaitOutput(t, `serving.*url=(http://127\.0\.0\.1:\d+)`, 30*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "LMSTFY_URL="+url, "LMSTFY_NAMESPACE=rust", "LMSTFY_TOKEN="+strings.TrimSpace(out))
	got, err := cmd.CombinedOutput()
	sc := bufio.NewScanner(strings.NewReader(string(got)))
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "FAIL ") {
			t.Error(line)
		}
	}
	if err != nil || t.Failed() {
		t.Fatalf("lmstfy's Rust client against onceq serve: %v; its output:\n%s\nonceq serve's:\n%s", err, got, p.Output())
	}
}

// lmstfyRustBinary builds compat/lmstfy-rust, once per checkout and
// change, and returns its binary. The crate's dependencies are built in
// the user's cache directory, which every checkout shares: the first
// build takes about 2 minutes on 2 cores, a later one of a new checkout
// about 10 s (the program alone). The binary goes to the checkout's own
// directory, beside the onceq it tests. The test is skipped without
// cargo, or with ONCEQ_TEST_NO_CARGO=1.
func lmstfyRustBinary(t *testing.T) string {
	t.Helper()
	if os.Getenv("ONCEQ_TEST_NO_CARGO") == "1" {
		t.Skip("ONCEQ_TEST_NO_CARGO=1: lmstfy's Rust client (compat/lmstfy-rust) is not built")
	}
	cargo, err := exec.LookPath("cargo")
	if err != nil {
		t.Skip("cargo is not on PATH: Rust's cargo (rustup) builds lmstfy's Rust client (compat/lmstfy-rust) for this test")
	}
	manifest, err := filepath.Abs(filepath.Join("..", "..", "compat", "lmstfy-rust", "Cargo.toml"))
	if err != nil {
		t.Fatal(err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatalf("no cache directory for lmstfy's Rust client's build: %v", err)
	}
	target := filepath.Join(filepath.Dir(testutil.Binary(t)), "lmstfy-rust")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cargo, "build", "--release", "--locked", "--manifest-path", manifest)
	// build-dir holds what a build makes on its way (cargo 1.91 and
	// later; an older cargo builds it all under the target dir).
	cmd.Env = append(os.Environ(), "CARGO_TARGET_DIR="+target,
		"CARGO_BUILD_BUILD_DIR="+filepath.Join(cache, "onceq", "lmstfy-rust"))
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cargo build of %s: %v\n%s", manifest, err, out)
	}
	t.Logf("cargo build: %v", time.Since(start).Round(100*time.Millisecond))
	return filepath.Join(target, "release", "lmstfy-rust-compat")
}
