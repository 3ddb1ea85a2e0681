package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"

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
