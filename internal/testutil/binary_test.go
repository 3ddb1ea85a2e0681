package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCheckoutRoot: the test binaries of the library's packages and of the
// nested modules' (the CLI's, bench/watermill's) key their onceq binary by
// one directory, the checkout's root; elsewhere the nearest module's.
func TestCheckoutRoot(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{".", "..", "../..", "../../cmd/onceq", "../../bench/watermill"} {
		abs, err := filepath.Abs(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := checkoutRoot(abs); got != root {
			t.Errorf("checkoutRoot(%s) = %s, want %s", abs, got, root)
		}
	}
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "go.mod"), []byte("module example.com/onceq/onceq\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(other, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := checkoutRoot(sub); got != other {
		t.Errorf("checkoutRoot(%s) = %s, want the nearest go.mod's directory %s", sub, got, other)
	}
}
