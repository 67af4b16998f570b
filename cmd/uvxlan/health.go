package main

// `uvxlan health`: the probes of a container (deploy/kubernetes's
// DaemonSet): liveness, the node's agent answers on its control socket;
// readiness, the agent answering is this container's and its TAPs are up.
//
// Which agent answers matters during a rolling update: the old and the new
// pod share the node's /run/uvxlan, so both reach whichever agent serves
// the socket. The kernel tells them apart: SO_PEERCRED gives the pid of
// the process that listens, translated into the asking process's PID
// namespace, and 0 when that process is outside it (another container).
// The new pod is ready only once its own agent has taken the socket over,
// and the old one, its agent gone or lingering (--linger), is ready no more.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/controlapi"
)

func healthCommand() *cli.Command {
	return &cli.Command{
		Name:  "health",
		Usage: "exit 0 when the agent on --control answers (a liveness probe); with --ready, only when that agent runs in this PID namespace (this container, not another pod's) and all its TAPs are up (a readiness probe); otherwise exit 1 saying why",
		Flags: append(controlFlags()[:1:1],
			&cli.BoolFlag{Name: "ready", Usage: "also require the agent to be this PID namespace's, with its TAPs up"},
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Second, Usage: "give the agent this long to answer"}),
		Action: healthAction,
	}
}

func healthAction(c *cli.Context) error {
	if c.Args().Present() {
		return usageError{fmt.Errorf("health takes no arguments, got %q", c.Args().Slice())}
	}
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	st, pid, err := probeStatus(ctx, c.String("control"))
	if err != nil {
		return cli.Exit(fmt.Sprintf("not alive: %v", err), exitError)
	}
	if !c.Bool("ready") {
		fmt.Fprintf(c.App.Writer, "alive: agent %s answers on %s\n", st.Name, c.String("control"))
		return nil
	}
	if pid == 0 {
		return cli.Exit(fmt.Sprintf("not ready: the agent on %s runs outside this PID namespace (another container's, before a takeover or after a hand-over)", c.String("control")), exitError)
	}
	for _, s := range st.Segments {
		ifi, err := net.InterfaceByName(s.Dev)
		if err != nil {
			return cli.Exit(fmt.Sprintf("not ready: TAP %s: %v", s.Dev, err), exitError)
		}
		if ifi.Flags&net.FlagUp == 0 {
			return cli.Exit(fmt.Sprintf("not ready: TAP %s is down", s.Dev), exitError)
		}
	}
	fmt.Fprintf(c.App.Writer, "ready: agent %s (pid %d here) serves %s, %d TAPs up\n", st.Name, pid, c.String("control"), len(st.Segments))
	return nil
}

// probeStatus asks the agent on the control socket for its status, and
// returns it with the pid of the process serving the socket as this
// process's PID namespace sees it (0: outside it).
func probeStatus(ctx context.Context, control string) (controlapi.Status, int, error) {
	var st controlapi.Status
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", control)
	if err != nil {
		return st, 0, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return st, 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) { cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return st, 0, err
	}
	if credErr != nil {
		return st, 0, fmt.Errorf("SO_PEERCRED: %w", credErr)
	}
	if _, err := conn.Write([]byte("GET /v1/status HTTP/1.1\r\nHost: uvxlan\r\nConnection: close\r\n\r\n")); err != nil {
		return st, 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return st, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, 0, fmt.Errorf("status: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, 0, fmt.Errorf("status: %w", err)
	}
	if st.Name == "" {
		return st, 0, errors.New("status: no agent name")
	}
	return st, int(cred.Pid), nil
}

// agentAnswers reports whether an agent answers on the control socket
// within 5 s (--takeover-if-running).
func agentAnswers(ctx context.Context, control string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, _, err := probeStatus(ctx, control)
	return err == nil
}
