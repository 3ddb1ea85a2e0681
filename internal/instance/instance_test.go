package instance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadKeepsTheID(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	id, err := Load(dir, "instance-id", "w-")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(id, "w-") || len(id) != len("w-")+16 {
		t.Fatalf("new ID %q, want w- and 16 hex digits", id)
	}
	again, err := Load(dir, "instance-id", "w-")
	if err != nil || again != id {
		t.Fatalf("second load: %q, %v; want %q", again, err, id)
	}
	b, err := os.ReadFile(filepath.Join(dir, "instance-id"))
	if err != nil || string(b) != id+"\n" {
		t.Fatalf("file holds %q (%v), want %q", b, err, id+"\n")
	}
}

// TestLoadReadsOlderFiles pins the format existing state dirs have: an
// ID with surrounding space is read trimmed, an empty file is replaced.
func TestLoadReadsOlderFiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "delay-instance-id"), []byte(" d-kept \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if id, err := Load(dir, "delay-instance-id", "d-"); err != nil || id != "d-kept" {
		t.Fatalf("got %q, %v; want d-kept", id, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "instance-id"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if id, err := Load(dir, "instance-id", "w-"); err != nil || !strings.HasPrefix(id, "w-") {
		t.Fatalf("empty file: got %q, %v; want a new w- ID", id, err)
	}
}
