// Package instance keeps the instance ID of a worker or a delay service:
// the part of its stable transactional ID that survives restarts, so a
// restarted instance fences its predecessor's open transaction at once.
package instance

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// New returns a new random ID: prefix and 16 hex digits.
func New(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Load returns the ID kept in the file name of dir, creating dir and the
// file with New(prefix) on first start. The file holds the ID and a
// newline; it is written to a temporary file and renamed, so a crash
// never leaves half an ID. An empty file counts as none.
func Load(dir, name, prefix string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("state dir: %w", err)
	}
	path := filepath.Join(dir, name)
	b, err := os.ReadFile(path)
	if id := strings.TrimSpace(string(b)); err == nil && id != "" {
		return id, nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("reading the instance ID: %w", err)
	}
	id := New(prefix)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("writing the instance ID: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("writing the instance ID: %w", err)
	}
	return id, nil
}
