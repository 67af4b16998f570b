package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
)

func TestAddWithoutSubnetEnv(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "subnet.env")
	conf := `{"cniVersion":"1.0.0","name":"n","type":"uvxlan-cni","subnetFile":"` + path + `","dataDir":"` + dir + `/data"}`
	err := cmdAdd(&skel.CmdArgs{ContainerID: "c1", IfName: "eth0", StdinData: []byte(conf)})
	var e *types.Error
	if !errors.As(err, &e) || e.Code != types.ErrTryAgainLater ||
		e.Msg != "uvxlan has not written "+path+" yet: is the agent running with --network?" {
		t.Fatalf("got %#v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
		t.Error("a failed ADD left a delegate config")
	}
	os.WriteFile(path, []byte("FLANNEL_MTU=x\n"), 0o644)
	err = cmdAdd(&skel.CmdArgs{ContainerID: "c1", IfName: "eth0", StdinData: []byte(conf)})
	if !errors.As(err, &e) || e.Code != types.ErrDecodingFailure || !strings.Contains(e.Msg, path) {
		t.Fatalf("garbled subnet.env: got %#v", err)
	}
}

// DEL of a container that was never added, or is already deleted, succeeds
// without subnet.env and without running a delegate.
func TestDelUnknown(t *testing.T) {
	dir := t.TempDir()
	conf := `{"cniVersion":"1.0.0","name":"n","type":"uvxlan-cni","subnetFile":"/nonexistent/subnet.env","dataDir":"` + dir + `"}`
	t.Setenv("CNI_PATH", "/nonexistent")
	if err := cmdDel(&skel.CmdArgs{ContainerID: "c1", IfName: "eth0", StdinData: []byte(conf)}); err != nil {
		t.Fatal(err)
	}
	err := cmdCheck(&skel.CmdArgs{ContainerID: "c1", IfName: "eth0", StdinData: []byte(conf)})
	var e *types.Error
	if !errors.As(err, &e) || e.Code != types.ErrUnknownContainer {
		t.Errorf("CHECK of an unknown container: %#v", err)
	}
	err = cmdDel(&skel.CmdArgs{ContainerID: "c1", IfName: "eth0", StdinData: []byte(`{"cniVersion":"1.0.0"}`)})
	if !errors.As(err, &e) || e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, `"name"`) {
		t.Errorf("bad config: %#v", err)
	}
}
