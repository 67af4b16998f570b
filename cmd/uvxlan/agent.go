package main

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/l3host"
	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
	"github.com/uvxlan/uvxlan/cmd/uvxlan/routed"
)

// runAgent assembles one agent: the control socket and the metrics (bound
// first, so a bad --control or --metrics fails before a TAP appears), the
// node, the adapters serving the node's read API and, with --network,
// routed mode's host networking. It returns when ctx is done (nil) or when
// any part fails: the node's error first (the cause of the others, such as
// a lease lost or a name taken), else the first one.
//
// The agent is assembled in two halves, this one and node.New. node.New
// builds the node: the data path and the control planes that write its
// tables (gossip, EVPN, leases, encryption), which node's tests run in one
// process. runAgent builds what the process does around the node, which
// those tests need none of: the control socket and the metrics (adapters
// over the node's read API), takeover (over the control socket) and
// SIGHUP, the service manager's notifications, and routed mode's host
// networking (routed; kube when the subnets come from the Kubernetes API
// server), which changes the host's routes and firewall outside the
// node's TAPs and sockets.
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
	a := &agentRun{cfg: cfg, ctl: ctl}
	if cfg.Metrics != "" {
		if a.metrics, err = listenMetrics(cfg.Metrics, func() metricsSnapshot { return snapshotOf(a.n)() }); err != nil {
			return err
		}
		defer a.metrics.Close()
	}
	if a.n, err = node.New(cfg.Config); err != nil {
		return err
	}
	a.ctx, a.cancel = context.WithCancel(ctx)
	defer a.cancel()
	a.start()
	// The service manager learns the new main process before the old one
	// exits on "ready".
	notifyReady(cfg.Logger)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go a.reloadOn(hup, self, selfErr)
	if successor != nil {
		if d, _ := time.ParseDuration(os.Getenv(takeoverReadyPauseEnv)); d > 0 {
			time.Sleep(min(d, readyTimeout/2))
		}
		cfg.Logger.Info("took over from the running agent", "control", cfg.Control)
		if _, err := successor.Write([]byte("ready\n")); err != nil {
			cfg.Logger.Warn("could not tell the agent taken over that this one is ready", "err", err)
		}
		finishTakeover(successor, cfg.Inherit, a.n, cfg.Logger)
		successor.Close()
	}
	<-a.ctx.Done()
	err = a.stop()
	if err == nil && a.handingOver.Load() && cfg.Linger {
		cfg.Logger.Info("lingering until SIGINT or SIGTERM (--linger)")
		<-ctx.Done()
	}
	return err
}

// agentRun is a running agent: its node and the adapters that serve it,
// each in a goroutine whose end ends them all.
type agentRun struct {
	cfg     runConfig
	ctl     *controlServer
	metrics *metricsServer
	n       *node.Node

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	first  error // the first goroutine's error
	// nodeErr is the node's: it outranks first.
	nodeErr error
	// handingOver: a successor takes over; the control socket and the
	// metrics stop serving, and that ends nothing.
	handingOver atomic.Bool
	handedErr   error
}

// start runs the node, routed mode's host networking when it holds a
// lease, the control socket (with takeover) and the metrics.
func (a *agentRun) start() {
	a.ctl.takeover = &takeoverServer{n: a.n, log: a.cfg.Logger,
		release: func() {
			a.handingOver.Store(true)
			a.ctl.Close()
			if a.metrics != nil {
				a.metrics.Close()
			}
		},
		stop: func(err error) {
			a.mu.Lock()
			a.handedErr = err
			a.mu.Unlock()
			a.cancel()
		},
	}
	a.spawn(func() error { a.nodeErr = a.n.Run(a.ctx); return a.nodeErr })
	if w := a.n.LeaseWatch(); w != nil {
		cfg, seg := a.cfg, a.n.Status().Segments[0]
		rc := routed.Config{VNI: seg.VNI, Dev: seg.Dev, MTU: seg.MTU,
			SubnetFile: cfg.SubnetFile, IPMasq: cfg.IPMasq, Logger: cfg.Logger.With("subsystem", "routed"),
			HandedOver: a.handingOver.Load}
		if cfg.Leases != nil {
			rc.Network = cfg.Leases.Network
		}
		if cfg.Leases6 != nil {
			rc.Network6 = cfg.Leases6.Network
		}
		a.spawn(func() error { return routed.Run(a.ctx, rc, w, a.n) })
	}
	if k := a.cfg.Kube; k != nil { // routed mode with the API server's subnets
		cfg, seg := a.cfg, a.n.Status().Segments[0]
		rc := routed.Config{Network: k.Network(), Network6: k.Network6(), VNI: seg.VNI, Dev: seg.Dev, MTU: seg.MTU,
			SubnetFile: cfg.SubnetFile, IPMasq: cfg.IPMasq, Logger: cfg.Logger.With("subsystem", "routed"),
			HandedOver: a.handingOver.Load,
			Forwarding: func(subnets []netip.Prefix) {
				if err := a.n.PinSubnet(subnets...); err != nil {
					cfg.Logger.Warn("could not pin the subnet's addresses", "subnets", subnets, "err", err)
				}
				k.Forwarding()
			}}
		a.spawn(func() error { return k.Run(a.ctx, kubeSelf(a.n), a.n) })
		a.spawn(func() error { return routed.Run(a.ctx, rc, k, a.n) })
	}
	if w := a.n.L3Watch(); w != nil { // EVPN routing: the L3 table as the host's routes
		a.spawn(func() error { return l3host.Run(a.ctx, w, a.cfg.Logger.With("subsystem", "l3")) })
	}
	a.spawn(a.serve(func() error { return a.ctl.Serve(a.n) }))
	if a.metrics != nil {
		a.spawn(a.serve(a.metrics.Serve))
	}
}

// spawn runs f in a goroutine; its end cancels the agent's context.
func (a *agentRun) spawn(f func() error) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := f(); err != nil {
			a.mu.Lock()
			if a.first == nil {
				a.first = err
			}
			a.mu.Unlock()
		}
		a.cancel()
	}()
}

// serve runs an adapter's Serve, which returns nil once released for a
// successor: then it waits for the end.
func (a *agentRun) serve(f func() error) func() error {
	return func() error {
		err := f()
		if err == nil && a.handingOver.Load() {
			<-a.ctx.Done()
		}
		return err
	}
}

// reloadOn starts a successor (self) at each SIGHUP on hup, until the end.
func (a *agentRun) reloadOn(hup <-chan os.Signal, self string, selfErr error) {
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-hup:
			if !a.handingOver.Load() {
				startSuccessor(a.cfg.Logger, self, selfErr)
			}
		}
	}
}

// stop waits for every goroutine once the context is done and returns
// why the agent ended: nil for a signal or a hand-over.
func (a *agentRun) stop() error {
	a.ctl.Close()
	if a.metrics != nil {
		a.metrics.Close()
	}
	a.wg.Wait()
	if a.handingOver.Load() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.handedErr == nil {
			a.cfg.Logger.Info("handed over to the successor")
		}
		return a.handedErr
	}
	_ = sdNotify("STOPPING=1")
	first := a.first
	if a.nodeErr != nil {
		first = a.nodeErr
	}
	if errors.Is(first, context.Canceled) {
		return nil
	}
	return first
}
