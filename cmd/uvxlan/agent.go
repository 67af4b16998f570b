package main

import (
	"context"
	"errors"
	"sync"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
)

// runAgent assembles one agent: the control socket and the metrics (bound
// first, so a bad --control or --metrics fails before a TAP appears), the
// node, and the adapters serving the node's read API. It returns when ctx is
// done (nil) or when any part fails (its error).
func runAgent(ctx context.Context, cfg runConfig) error {
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
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
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
	spawn(func() error { return n.Run(ctx) })
	spawn(func() error { return ctl.Serve(n) })
	if metrics != nil {
		spawn(metrics.Serve)
	}
	<-ctx.Done()
	ctl.Close()
	if metrics != nil {
		metrics.Close()
	}
	wg.Wait()
	if errors.Is(first, context.Canceled) {
		return nil
	}
	return first
}
