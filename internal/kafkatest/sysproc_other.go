//go:build !linux

package kafkatest

import "syscall"

// sysProcAttr: only Linux ends a child with its parent.
func sysProcAttr() *syscall.SysProcAttr { return nil }
