package testutil

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// DirSize sums the sizes of the files in dir, for bytes-on-disk figures.
// A file deleted while the walk runs (an obsolete Pebble table) counts as
// gone.
func DirSize(t testing.TB, dir string) int64 {
	t.Helper()
	var size int64
	err := filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil
		case err == nil && !info.IsDir():
			size += info.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return size
}
