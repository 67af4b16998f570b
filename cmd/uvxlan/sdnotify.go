package main

// Service manager notifications and reload by SIGHUP.
//
// Under systemd (Type=notify, NotifyAccess=all; deploy/uvxlan.service) the
// agent says READY=1 with its MAINPID once it forwards, and STOPPING=1 at a
// clean stop. SIGHUP (systemctl reload) upgrades in place: the agent starts
// its successor, the binary at the path it was started from (checked:
// checkSuccessor) with the same arguments and --takeover, as its sibling,
// so that the successor is the service manager's child: systemd (before
// 253) cannot wait for a main process that is not its child, and SIGKILLs
// it at the next stop. The successor takes the TAP queues, sockets,
// tables and gossip identity over the control socket, says MAINPID=<its
// pid> and READY=1, and the old agent exits 0 (see takeover.go). No frame
// is lost and no peer notices. If the successor cannot start, the agent
// logs why and goes on.

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// sdNotify sends state to the service manager's notification socket
// ($NOTIFY_SOCKET: a path, or @name for an abstract socket). Without the
// variable it does nothing.
func sdNotify(state string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	if strings.HasPrefix(path, "@") {
		path = "\x00" + path[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("notify the service manager: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("notify the service manager: %w", err)
	}
	return nil
}

// notifyReady tells the service manager that this process forwards and is
// the service's main process.
func notifyReady(log *slog.Logger) {
	if err := sdNotify(fmt.Sprintf("MAINPID=%d\nREADY=1\nSTATUS=forwarding", os.Getpid())); err != nil {
		log.Warn("could not notify the service manager", "err", err)
	}
}

// startedFrom is the absolute path of the binary this agent was started
// from (args[0], looked up in PATH when it has no slash), found at start: a
// later change of the working directory or of PATH does not change what
// SIGHUP starts. It is the path, not the file (a symbolic link such as
// /usr/local/bin/uvxlan → /opt/uvxlan-1.2/uvxlan stays one): an upgrade
// installs over it, or moves the link.
func startedFrom(args []string) (string, error) {
	if len(args) == 0 || args[0] == "" {
		return "", errors.New("no command line to start the successor from")
	}
	bin := args[0]
	if !strings.Contains(bin, "/") {
		p, err := exec.LookPath(bin)
		if err != nil {
			return "", fmt.Errorf("find %s: %w", bin, err)
		}
		bin = p
	}
	return filepath.Abs(bin)
}

// successorCommand is the command of the agent that takes this one over on
// SIGHUP: bin (startedFrom) with this one's arguments (args[1:]) and
// --takeover.
func successorCommand(bin string, args []string) *exec.Cmd {
	rest := slices.Clone(args[1:])
	if !slices.ContainsFunc(rest, func(a string) bool { return a == "--takeover" || strings.HasPrefix(a, "--takeover=") }) {
		rest = append(rest, "--takeover")
	}
	cmd := exec.Command(bin, rest...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	// The successor is this agent's sibling (CLONE_PARENT), a child of the
	// service manager: systemd supervises a main process that is not its
	// child only from afar (before version 253: it cannot wait for its
	// exit, so "systemctl stop" SIGKILLs it at once).
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_PARENT}
	return cmd
}

// checkSuccessor refuses a binary that someone other than root or this
// agent's user could have put at bin, since SIGHUP runs it with the agent's
// privileges: the file must be a regular executable file, and it and its
// directory must be owned by root or by us and writable by neither group
// nor others; through a symbolic link, the same holds of the target and
// its directory.
func checkSuccessor(bin string) error {
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return err
	}
	paths := []string{bin, filepath.Dir(bin)}
	if real != bin {
		paths = append(paths, real, filepath.Dir(real))
	}
	for i, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if i%2 == 0 && (!fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0) {
			return fmt.Errorf("%s is not an executable file", p)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no owner", p)
		}
		if uid := int(st.Uid); uid != 0 && uid != os.Geteuid() {
			return fmt.Errorf("%s is owned by uid %d, neither root nor this agent's user", p, uid)
		}
		if fi.Mode().Perm()&0o022 != 0 {
			return fmt.Errorf("%s is writable by group or others (mode %v)", p, fi.Mode().Perm())
		}
	}
	return nil
}

// startSuccessor starts the successor (SIGHUP), bin (startedFrom; binErr
// when it could not be found at start), and leaves it running: it takes
// this agent over, which then exits. A binary that fails checkSuccessor is
// not started; the agent goes on.
func startSuccessor(log *slog.Logger, bin string, binErr error) {
	err := binErr
	if err == nil {
		if err = checkSuccessor(bin); err != nil {
			log.Error("SIGHUP: refusing to start the successor; going on", "binary", bin, "err", err)
			return
		}
	}
	var cmd *exec.Cmd
	if err == nil {
		cmd = successorCommand(bin, os.Args)
		err = cmd.Start()
	}
	if err != nil {
		log.Error("SIGHUP: could not start the successor; going on", "err", err)
		return
	}
	log.Info("SIGHUP: started the successor, which takes over", "pid", cmd.Process.Pid, "command", strings.Join(cmd.Args, " "))
	cmd.Process.Release() // our parent's child, not ours
}
