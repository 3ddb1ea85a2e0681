package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
)

// checkQueuesExist fails early, and clearly, when a handler's output queue
// is missing.
func checkQueuesExist(ctx context.Context, conn broker.Conn, queues []string) error {
	if len(queues) == 0 {
		return nil
	}
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		return err
	}
	defer adm.Close()
	for _, q := range queues {
		if _, err := adm.DescribeTopic(ctx, q); errors.Is(err, broker.ErrTopicNotFound) {
			return fmt.Errorf("output queue %q does not exist: create it with 'onceq topics create %s'", q, q)
		} else if err != nil {
			return err
		}
	}
	return nil
}

// crashHook parses --crash-at POINT:N into a commit hook that SIGKILLs the
// process at that point of its Nth commit.
func crashHook(spec string) (func(consumer.CommitPoint), error) {
	if spec == "" {
		return nil, nil
	}
	name, count, ok := strings.Cut(spec, ":")
	point, err := consumer.ParseCommitPoint(name)
	n, nerr := strconv.Atoi(count)
	if !ok || err != nil || nerr != nil || n < 1 {
		return nil, usagef("--crash-at %q: want POINT:N with POINT before-kafka, between or after and N 1 or more", spec)
	}
	seen := 0
	return func(p consumer.CommitPoint) {
		if p != point {
			return
		}
		if seen++; seen == n {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}, nil
}

// faultyDisk parses --fault-disk OP:N into a filesystem that fails the Nth
// write or sync of the checkpoint's write-ahead log, once.
func faultyDisk(spec string) (vfs.FS, error) {
	if spec == "" {
		return nil, nil
	}
	op, count, ok := strings.Cut(spec, ":")
	n, err := strconv.Atoi(count)
	kinds := map[string][]errorfs.OpKind{
		"write": {errorfs.OpFileWrite, errorfs.OpFileWriteAt},
		"sync":  {errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo},
	}[op]
	if !ok || err != nil || n < 1 || kinds == nil {
		return nil, usagef("--fault-disk %q: want OP:N with OP write or sync and N 1 or more", spec)
	}
	var seen atomic.Int64
	return errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(o errorfs.Op) error {
		if slices.Contains(kinds, o.Kind) && strings.HasSuffix(o.Path, ".log") && seen.Add(1) == int64(n) {
			return errorfs.ErrInjected
		}
		return nil
	})), nil
}

// setMemoryLimit applies --memory-limit ("192MiB", "1GiB", "0" for none)
// unless the GOMEMLIMIT environment variable already set one.
func setMemoryLimit(v string) error {
	if os.Getenv("GOMEMLIMIT") != "" {
		return nil
	}
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}, {"", 1}}
	for _, u := range units {
		num, ok := strings.CutSuffix(v, u.suffix)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n < 0 {
			break
		}
		if n == 0 {
			return nil
		}
		if n*u.mult < 64<<20 {
			return usagef("--memory-limit %q: want at least 64MiB, or 0 for none", v)
		}
		debug.SetMemoryLimit(n * u.mult)
		return nil
	}
	return usagef("--memory-limit %q: want a size such as 256MiB or 1GiB, or 0 for none", v)
}
