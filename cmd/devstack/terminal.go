package main

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// takeTerminal lets Ctrl-C reach the devstack alone. Started by `make run`
// (or `go run`), the devstack shares the terminal's foreground process group
// with make, and the terminal's interrupt goes to all of them: make then
// dies of it, or reports the go command's status, although the devstack
// stopped cleanly. So when the devstack is in the foreground of the terminal
// on its standard input and does not lead its process group, it moves into a
// group of its own and makes that group the foreground one; make waits for
// it and exits with its status. The returned function gives the terminal
// back to the original group (call it before exiting). Elsewhere (no
// terminal, running in the background, already a group leader) it does
// nothing.
func takeTerminal() (restore func()) {
	nothing := func() {}
	fd := int(os.Stdin.Fd())
	fg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil || fg != unix.Getpgrp() || unix.Getpgrp() == os.Getpid() {
		return nothing
	}
	if unix.Setpgid(0, 0) != nil {
		return nothing
	}
	// A background group that sets the foreground group is sent SIGTTOU.
	signal.Ignore(syscall.SIGTTOU)
	if unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, os.Getpid()) != nil {
		_ = unix.Setpgid(0, fg)
		signal.Reset(syscall.SIGTTOU)
		return nothing
	}
	return func() {
		_ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, fg)
		signal.Reset(syscall.SIGTTOU)
	}
}
