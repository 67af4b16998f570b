package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// supported are the CNI versions the plugin speaks: those of the reference
// plugins it delegates to (Debian's containernetworking-plugins 1.1 stop at
// 1.0.0). GC and STATUS (1.1.0) are not implemented.
var supported = version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0")

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{Add: cmdAdd, Del: cmdDel, Check: cmdCheck}, supported,
		"uvxlan-cni: CNI plugin for uvxlan's routed overlay (flannel-compatible)")
}

// loadConfig parses the network config, as a CNI error.
func loadConfig(stdin []byte) (*netConf, error) {
	n, err := parseConfig(stdin)
	if err != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, err.Error(), "")
	}
	return n, nil
}

// loadSubnetEnv reads the agent's subnet.env at path, as a CNI error: a
// missing file means the agent has not leased a subnet (yet), which a
// runtime may retry.
func loadSubnetEnv(path string) (subnetEnv, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return subnetEnv{}, types.NewError(types.ErrTryAgainLater,
			fmt.Sprintf("uvxlan has not written %s yet: is the agent running with --network?", path), err.Error())
	} else if err != nil {
		return subnetEnv{}, types.NewError(types.ErrIOFailure, fmt.Sprintf("reading %s: %v", path, err), "")
	}
	env, err := parseSubnetEnv(b)
	if err != nil {
		return subnetEnv{}, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("%s: %v", path, err), "")
	}
	return env, nil
}

func cmdAdd(args *skel.CmdArgs) error {
	n, err := loadConfig(args.StdinData)
	if err != nil {
		return err
	}
	env, err := loadSubnetEnv(n.SubnetFile)
	if err != nil {
		return err
	}
	d := delegateConfig(n, env)
	if n.RawPrevResult != nil {
		d["prevResult"] = n.RawPrevResult
	}
	conf, err := json.Marshal(d)
	if err != nil {
		return types.NewError(types.ErrInternal, fmt.Sprintf("delegate config: %v", err), "")
	}
	// Saved before the delegate runs: a failed ADD is followed by a DEL,
	// which needs it to undo whatever the delegate did.
	if err := (store{n.DataDir}).save(args.ContainerID, args.IfName, conf); err != nil {
		return types.NewError(types.ErrIOFailure, fmt.Sprintf("saving the delegate config under dataDir %s: %v", n.DataDir, err), "")
	}
	typ := d["type"].(string)
	res, err := invoke.DelegateAdd(context.Background(), typ, conf, nil)
	if err != nil {
		return delegateError(typ, "ADD", err)
	}
	return types.PrintResult(res, n.CNIVersion)
}

func cmdDel(args *skel.CmdArgs) error {
	n, err := loadConfig(args.StdinData)
	if err != nil {
		return err
	}
	st := store{n.DataDir}
	d, _, ok, err := st.load(args.ContainerID, args.IfName)
	switch {
	case errors.Is(err, errTorn):
		// The address must still go back: the delegate's DEL runs with the
		// config ADD would build now (host-local releases by container ID
		// and interface, whatever the range).
		d = rebuiltDelegate(n)
		fmt.Fprintf(os.Stderr, "uvxlan-cni: %v: deleting with the delegate config rebuilt from the network config\n", err)
	case err != nil:
		return types.NewError(types.ErrIOFailure, fmt.Sprintf("loading the delegate config: %v", err), "")
	case !ok:
		return nil // never added, or already deleted
	}
	delete(d, "prevResult")
	conf, err := json.Marshal(d)
	if err != nil {
		return types.NewError(types.ErrInternal, fmt.Sprintf("delegate config: %v", err), "")
	}
	typ := d["type"].(string)
	if err := invoke.DelegateDel(context.Background(), typ, conf, nil); err != nil {
		return delegateError(typ, "DEL", err) // the file stays for the retry
	}
	if err := st.remove(args.ContainerID, args.IfName); err != nil {
		return types.NewError(types.ErrIOFailure, fmt.Sprintf("removing the delegate config: %v", err), "")
	}
	return nil
}

// placeholderEnv stands for subnet.env when DEL must rebuild a delegate
// config without it: host-local releases by container ID and interface,
// whatever the range; the agent is said to masquerade so that the bridge
// touches no iptables rule it cannot know.
var placeholderEnv = subnetEnv{Network: netip.MustParsePrefix("192.0.2.0/24"), Subnet: netip.MustParsePrefix("192.0.2.1/24"), MTU: 1500, IPMasq: true}

// rebuiltDelegate is the delegate config for DEL of an attachment whose
// record is torn: the one ADD would build now, from the network config and
// subnet.env, or placeholderEnv when subnet.env cannot be read.
func rebuiltDelegate(n *netConf) map[string]any {
	env, err := loadSubnetEnv(n.SubnetFile)
	if err != nil {
		env = placeholderEnv
	}
	return delegateConfig(n, env)
}

func cmdCheck(args *skel.CmdArgs) error {
	n, err := loadConfig(args.StdinData)
	if err != nil {
		return err
	}
	d, _, ok, err := store{n.DataDir}.load(args.ContainerID, args.IfName)
	if err != nil {
		return types.NewError(types.ErrIOFailure, fmt.Sprintf("loading the delegate config: %v", err), "")
	}
	if !ok {
		return types.NewError(types.ErrUnknownContainer,
			fmt.Sprintf("container %s (%s) was not added by uvxlan-cni (nothing under dataDir %s)", args.ContainerID, args.IfName, n.DataDir), "")
	}
	if n.RawPrevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, `network config: field "prevResult" is missing`, "")
	}
	d["prevResult"] = n.RawPrevResult
	d["cniVersion"] = n.CNIVersion
	conf, err := json.Marshal(d)
	if err != nil {
		return types.NewError(types.ErrInternal, fmt.Sprintf("delegate config: %v", err), "")
	}
	typ := d["type"].(string)
	if err := invoke.DelegateCheck(context.Background(), typ, conf, nil); err != nil {
		return delegateError(typ, "CHECK", err)
	}
	return nil
}

// delegateError keeps the delegate's error code and says who failed.
func delegateError(typ, cmd string, err error) error {
	var e *types.Error
	if errors.As(err, &e) {
		return types.NewError(e.Code, fmt.Sprintf("delegate %s %s: %s", typ, cmd, e.Msg), e.Details)
	}
	return types.NewError(types.ErrInternal, fmt.Sprintf("delegate %s %s: %v", typ, cmd, err), "")
}
