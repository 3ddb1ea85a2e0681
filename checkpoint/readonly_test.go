package checkpoint

import (
	"bufio"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// readOnlyFS is the operating system's filesystem mounted read-only: every
// call that would write fails with EROFS, as on a read-only mount or a
// snapshot.
type readOnlyFS struct{ vfs.FS }

func erofs(op, name string) error { return &fs.PathError{Op: op, Path: name, Err: syscall.EROFS} }

func (readOnlyFS) Create(name string, _ vfs.DiskWriteCategory) (vfs.File, error) {
	return nil, erofs("open", name)
}
func (readOnlyFS) Link(_, newname string) error { return erofs("link", newname) }
func (readOnlyFS) OpenReadWrite(name string, _ vfs.DiskWriteCategory, _ ...vfs.OpenOption) (vfs.File, error) {
	return nil, erofs("open", name)
}
func (readOnlyFS) Remove(name string) error                  { return erofs("remove", name) }
func (readOnlyFS) RemoveAll(name string) error               { return erofs("remove", name) }
func (readOnlyFS) Rename(_, newname string) error            { return erofs("rename", newname) }
func (readOnlyFS) MkdirAll(name string, _ os.FileMode) error { return erofs("mkdir", name) }
func (readOnlyFS) Lock(name string) (io.Closer, error)       { return nil, erofs("open", name) }
func (readOnlyFS) ReuseForWrite(_, newname string, _ vfs.DiskWriteCategory) (vfs.File, error) {
	return nil, erofs("open", newname)
}
func (r readOnlyFS) Unwrap() vfs.FS { return r.FS }

// TestReadOnlyCopy pins the rough edge of issue 17: "checkpoint inspect"
// could not read a read-only copy of a store, because Pebble takes its
// directory lock by creating the LOCK file. A read-only open of a
// directory it cannot write now reads it, unless a process holds the
// store, and writes nothing.
func TestReadOnlyCopy(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, ClusterID("c1"), Group("g1"), Logger(testLogger(t)))
	tp := TP{"jobs", 3}
	b := s.NewBatch()
	for _, err := range []error{b.MarkProcessed(tp, "task-1", time.Now()), b.SetOffsets(tp, Offsets{Source: 7, Changelog: 4}), b.Commit()} {
		if err != nil {
			t.Fatal(err)
		}
	}
	s.Close()

	ro, err := Open(dir, ReadOnly(), FS(readOnlyFS{vfs.Default}), Logger(testLogger(t)))
	if err != nil {
		t.Fatalf("read-only open of a read-only directory: %v", err)
	}
	if o, ok, err := ro.Checkpoint(tp); err != nil || !ok || o.Source != 7 || o.Changelog != 4 {
		t.Errorf("Checkpoint = %v, %v, %v", o, ok, err)
	}
	if ok, err := ro.Has(tp, "task-1"); err != nil || !ok {
		t.Errorf("Has = %v, %v", ok, err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	// A writable open still needs the lock, and says why it failed.
	if _, err := Open(dir, ClusterID("c1"), Group("g1"), FS(readOnlyFS{vfs.Default})); err == nil || !errors.Is(err, syscall.EROFS) {
		t.Errorf("writable open of a read-only directory: %v", err)
	}

	// A store a process holds is refused, even where the lock cannot be
	// taken.
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		_ = cmd.Wait()
	}()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("helper process said %q, %v", line, err)
	}
	if _, err := Open(dir, ReadOnly(), FS(readOnlyFS{vfs.Default})); !errors.Is(err, ErrInUse) {
		t.Errorf("read-only open of a store in use: %v, want ErrInUse", err)
	}
}
