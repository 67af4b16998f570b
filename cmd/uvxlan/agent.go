package main

import (
	"context"
	"errors"
	"net"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
	"github.com/uvxlan/uvxlan/cmd/uvxlan/routed"
)

// runAgent assembles one agent: the control socket and the metrics (bound
// first, so a bad --control or --metrics fails before a TAP appears), the
// node, the adapters serving the node's read API and, with --network,
// routed mode's host networking. It returns when ctx is done (nil) or when
// any part fails: the node's error first (the cause of the others, such as
// a lease lost or a name taken), else the first one.
func runAgent(ctx context.Context, cfg runConfig) error {
	self, selfErr := startedFrom(os.Args) // what SIGHUP starts, found now
	var successor *net.UnixConn           // --takeover: the connection to the agent taken over
	if cfg.Takeover {
		h, conn, err := takeOver(ctx, cfg.Control, &cfg.Config)
		if err != nil {
			return err
		}
		defer conn.Close()
		cfg.Inherit, successor = h, conn
	}
	ctl, err := listenControl(cfg.Control)
	if err != nil {
		return err
	}
	defer ctl.Close()
	var metrics *metricsServer
	var n *node.Node
	if cfg.Metrics != "" {
		if metrics, err = listenMetrics(cfg.Metrics, func() metricsSnapshot { return snapshotOf(n)() }); err != nil {
			return err
		}
		defer metrics.Close()
	}
	if n, err = node.New(cfg.Config); err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		first   error
		nodeErr error
		// handingOver: a successor takes over; the control socket and
		// the metrics stop serving, and that ends nothing.
		handingOver atomic.Bool
		handedErr   error
	)
	ctl.takeover = &takeoverServer{n: n, log: cfg.Logger,
		release: func() {
			handingOver.Store(true)
			ctl.Close()
			if metrics != nil {
				metrics.Close()
			}
		},
		stop: func(err error) {
			mu.Lock()
			handedErr = err
			mu.Unlock()
			cancel()
		},
	}
	// serve runs an adapter's Serve, which returns nil once released for a
	// successor: then it waits for the end.
	serve := func(f func() error) func() error {
		return func() error {
			err := f()
			if err == nil && handingOver.Load() {
				<-ctx.Done()
			}
			return err
		}
	}
	spawn := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
			cancel()
		}()
	}
	spawn(func() error { nodeErr = n.Run(ctx); return nodeErr })
	if w := n.LeaseWatch(); w != nil {
		seg := n.Status().Segments[0]
		rc := routed.Config{Network: cfg.Leases.Network, VNI: seg.VNI, Dev: seg.Dev, MTU: seg.MTU,
			SubnetFile: cfg.SubnetFile, IPMasq: cfg.IPMasq, Logger: cfg.Logger.With("subsystem", "routed")}
		spawn(func() error { return routed.Run(ctx, rc, w, n) })
	}
	spawn(serve(func() error { return ctl.Serve(n) }))
	if metrics != nil {
		spawn(serve(metrics.Serve))
	}
	// The service manager learns the new main process before the old one
	// exits on "ready".
	notifyReady(cfg.Logger)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if !handingOver.Load() {
					startSuccessor(cfg.Logger, self, selfErr)
				}
			}
		}
	}()
	if successor != nil {
		cfg.Logger.Info("took over from the running agent", "control", cfg.Control)
		if _, err := successor.Write([]byte("ready\n")); err != nil {
			cfg.Logger.Warn("could not tell the agent taken over that this one is ready", "err", err)
		}
		successor.Close()
	}
	<-ctx.Done()
	ctl.Close()
	if metrics != nil {
		metrics.Close()
	}
	wg.Wait()
	if !handingOver.Load() {
		_ = sdNotify("STOPPING=1")
	}
	if handingOver.Load() {
		mu.Lock()
		defer mu.Unlock()
		if handedErr == nil {
			cfg.Logger.Info("handed over to the successor")
		}
		return handedErr
	}
	if nodeErr != nil {
		first = nodeErr
	}
	if errors.Is(first, context.Canceled) {
		return nil
	}
	return first
}
