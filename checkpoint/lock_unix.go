//go:build unix

package checkpoint

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// lockHolder returns the ID of the process holding the POSIX lock Pebble
// takes on the file, or 0 if unknown.
func lockHolder(name string) int {
	f, err := os.Open(name)
	if err != nil {
		return 0
	}
	defer f.Close()
	spec := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
	if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &spec); err != nil || spec.Type == unix.F_UNLCK {
		return 0
	}
	return int(spec.Pid)
}
