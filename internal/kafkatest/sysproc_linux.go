package kafkatest

import "syscall"

// sysProcAttr makes a node's JVM die with the process that started it
// (a test binary that panics or times out leaves no broker behind).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
