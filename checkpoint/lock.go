package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// lockError explains why Pebble's LOCK file could not be taken. fsys is the
// caller's filesystem (nil: the operating system's).
func lockError(dir string, fsys vfs.FS, err error) error {
	var pathErr *fs.PathError
	switch {
	case strings.Contains(err.Error(), "lock held by current process"):
		return errorf(ErrInUse, err, "dir %s is in use by this process (a Store on it is still open): close it first", dir)
	case errors.As(err, &pathErr), !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EACCES):
		// Creating the LOCK file failed (permissions, a read-only disk).
		return ioError(err, "lock dir %s", dir)
	}
	holder := ""
	if fsys == nil {
		if pid := lockHolder(filepath.Join(dir, "LOCK")); pid > 0 {
			holder = fmt.Sprintf(" (pid %d)", pid)
		}
	}
	return errorf(ErrInUse, err, "dir %s is in use by another process%s: stop it, or use another --checkpoint-dir", dir, holder)
}

// unwritable reports a lock that failed because its file cannot be created
// or opened for writing: a read-only mount, a snapshot, another user's
// directory. (A lock that another process holds fails differently, in
// fcntl, not in open.)
func unwritable(err error) bool {
	var pathErr *fs.PathError
	return errors.As(err, &pathErr) &&
		(errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM))
}

// readOnlyLock stands in for Pebble's directory lock when a store is
// opened read-only in a directory this process cannot write: Pebble takes
// its lock by creating and locking the LOCK file, which fails there, so
// "checkpoint inspect" could not read a read-only copy of a store. A
// process that writes the store holds a lock on that file, which can still
// be seen: such a store is refused as in use. Otherwise nothing can write
// to it while it is read (this process cannot, and the lock says no one
// else does), and the returned lock locks nothing. The holder of a lock is
// seen on the operating system's filesystem (or one that wraps it).
func readOnlyLock(dir string, fs vfs.FS) (*pebble.Lock, error) {
	if onDisk(fs) {
		if pid := lockHolder(filepath.Join(dir, "LOCK")); pid > 0 {
			return nil, errorf(ErrInUse, nil, "dir %s is in use by another process (pid %d): stop it first", dir, pid)
		}
	}
	return pebble.LockDirectory(dir, noLockFS{fs})
}

// onDisk reports whether fs is, or wraps, the operating system's.
func onDisk(fs vfs.FS) bool {
	for ; fs != nil; fs = fs.Unwrap() {
		if fs == vfs.Default {
			return true
		}
	}
	return false
}

// noLockFS is a filesystem whose locks lock nothing.
type noLockFS struct{ vfs.FS }

func (noLockFS) Lock(string) (io.Closer, error) { return nopCloser{}, nil }

type nopCloser struct{}

func (nopCloser) Close() error { return nil }
