package main

// Kubernetes: the flags of `uvxlan run` that take routed mode's subnets
// from the API server (package kube) instead of gossip leases.

import (
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/kube"
	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
)

const kubeCategory = "Kubernetes (flannel's kube subnet manager)"

func kubeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "kube-subnet-mgr", Category: kubeCategory, Usage: "routed mode with the subnets of the API server: this node's subnet is its Node's spec.podCIDR (inside --network; with --network6 also its IPv6 podCIDR), the other Nodes' podCIDRs are routed to their VTEPs, gossip seeds come from the Nodes' annotations (no --join); the Node is named by --name or NODE_NAME", EnvVars: env("kube-subnet-mgr")},
		&cli.StringFlag{Name: "kubeconfig", Category: kubeCategory, Usage: "kubeconfig `FILE` for --kube-subnet-mgr (default: the pod's service account)", EnvVars: env("kubeconfig")},
	}
}

// kubeConfig reads the Kubernetes flags into cfg.Kube, after routedConfig:
// --kube-subnet-mgr keeps --network (where the podCIDRs lie) but replaces
// the gossip leases.
func kubeConfig(c *cli.Context, cfg *runConfig) error {
	if !c.Bool("kube-subnet-mgr") {
		if c.String("kubeconfig") != "" {
			return usageError{errors.New("--kubeconfig needs --kube-subnet-mgr")}
		}
		return nil
	}
	if cfg.Leases == nil && cfg.Leases6 == nil {
		return usageError{errors.New("--kube-subnet-mgr needs --network (or --network6, or both), the cluster network that holds every Node's podCIDR (flannel's Network, IPv6Network)")}
	}
	for _, f := range []string{"subnet-len", "subnet-min", "subnet-max", "lease-ttl", "subnet", "route", "subnet-len6", "subnet6"} {
		if c.IsSet(f) {
			return usageError{fmt.Errorf("--%s and --kube-subnet-mgr exclude each other: the subnets are the Nodes' podCIDRs (and extra prefixes ride gossip leases)", f)}
		}
	}
	if cfg.GossipOff {
		return badFlag("gossip", "false", "--kube-subnet-mgr needs gossip: it carries the FDB and neighbour entries")
	}
	name := c.String("name")
	if name == "" {
		name = os.Getenv("NODE_NAME")
	}
	if name == "" {
		return usageError{errors.New("--kube-subnet-mgr needs the Node's name: --name or NODE_NAME (in a DaemonSet: the downward API's spec.nodeName)")}
	}
	kc := kube.Config{Kubeconfig: c.String("kubeconfig"), NodeName: name, Logger: cfg.Logger.With("subsystem", "kube")}
	if cfg.Leases != nil {
		kc.Network = cfg.Leases.Network
	}
	if cfg.Leases6 != nil {
		kc.Network6 = cfg.Leases6.Network
	}
	s, err := kube.New(kc) // reads the kubeconfig; contacts nobody
	if err != nil {
		if kc.Kubeconfig != "" {
			return badFlag("kubeconfig", kc.Kubeconfig, "%v", err)
		}
		return usageError{err}
	}
	cfg.Name, cfg.Kube, cfg.Leases, cfg.Leases6 = name, s, nil, nil
	cfg.SubnetStats = func() any { return s.Stats() }
	return nil
}

// kubeSelf is what the node publishes on its Node.
func kubeSelf(n *node.Node) kube.Self {
	st := n.Status()
	return kube.Self{VNI: st.VNI, MAC: st.MAC, Gossip: n.GossipAddr(),
		VTEP: netip.AddrPortFrom(st.Local, st.Port)}
}
