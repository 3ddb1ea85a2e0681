package testutil

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcCPU is the CPU time (user and system) process pid has used, 0 when
// /proc cannot tell.
func ProcCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command's closing parenthesis: utime is the 12th,
	// stime the 13th (proc(5)), in clock ticks of 1/100 s.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// ProcMem reads process pid's peak (VmHWM) and current (VmRSS) resident
// set, in bytes.
func ProcMem(pid int) (peak, rss int64, err error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "VmHWM:":
			peak, err = strconv.ParseInt(f[1], 10, 64)
		case "VmRSS:":
			rss, err = strconv.ParseInt(f[1], 10, 64)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status: %s: %w", pid, line, err)
		}
	}
	if peak == 0 {
		return 0, 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
	}
	return peak << 10, rss << 10, nil
}
