package main

// Service manager notifications and reload by SIGHUP.
//
// Under systemd (Type=notify, NotifyAccess=all; deploy/uvxlan.service) the
// agent says READY=1 with its MAINPID once it forwards, and STOPPING=1 at a
// clean stop. SIGHUP (systemctl reload) upgrades in place: the agent starts
// its successor, the binary at the path it was started from with the same
// arguments and --takeover; the successor takes the TAP queues, sockets,
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

// successorCommand is the command of the agent that takes this one over on
// SIGHUP: the binary at the path this one was started from (so an upgraded
// binary there is the one started) with the same arguments and --takeover.
func successorCommand(args []string) (*exec.Cmd, error) {
	if len(args) == 0 {
		return nil, errors.New("no command line to start the successor from")
	}
	bin := args[0]
	if !strings.Contains(bin, "/") {
		p, err := exec.LookPath(bin)
		if err != nil {
			return nil, fmt.Errorf("find %s: %w", bin, err)
		}
		bin = p
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		return nil, err
	}
	rest := slices.Clone(args[1:])
	if !slices.ContainsFunc(rest, func(a string) bool { return a == "--takeover" || strings.HasPrefix(a, "--takeover=") }) {
		rest = append(rest, "--takeover")
	}
	cmd := exec.Command(bin, rest...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	return cmd, nil
}

// startSuccessor starts the successor (SIGHUP) and leaves it running: it
// takes this agent over, which then exits.
func startSuccessor(log *slog.Logger) {
	cmd, err := successorCommand(os.Args)
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		log.Error("SIGHUP: could not start the successor; going on", "err", err)
		return
	}
	log.Info("SIGHUP: started the successor, which takes over", "pid", cmd.Process.Pid, "command", strings.Join(cmd.Args, " "))
	go cmd.Wait() // reaped if it exits while this one still runs
}
