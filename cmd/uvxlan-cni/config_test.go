package main

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	n, err := parseConfig([]byte(`{"cniVersion":"1.0.0","name":"uvxlan","type":"uvxlan-cni"}`))
	if err != nil {
		t.Fatal(err)
	}
	if n.SubnetFile != defaultSubnetFile || n.DataDir != defaultDataDir || n.Name != "uvxlan" || n.CNIVersion != "1.0.0" {
		t.Errorf("defaults: got %+v", n)
	}
	n, err = parseConfig([]byte(`{"cniVersion":"0.4.0","name":"pods","type":"uvxlan-cni","subnetFile":"/run/x/subnet.env",
		"dataDir":"/tmp/d","delegate":{"bridge":"br-pods","hairpinMode":true},"ipam":{"dataDir":"/tmp/ipam"},
		"capabilities":{"portMappings":true},"prevResult":{"cniVersion":"0.4.0"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if n.SubnetFile != "/run/x/subnet.env" || n.DataDir != "/tmp/d" || n.Delegate["bridge"] != "br-pods" ||
		n.Delegate["hairpinMode"] != true || n.IPAM["dataDir"] != "/tmp/ipam" || n.RawPrevResult["cniVersion"] != "0.4.0" {
		t.Errorf("got %+v", n)
	}
}

// A bad config is an error that names the field.
func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		desc, in, want string
	}{
		{"not JSON", `{`, "network config"},
		{"no name", `{"cniVersion":"1.0.0","type":"uvxlan-cni"}`, `"name" is missing`},
		{"name not a string", `{"name":7}`, `"name"`},
		{"subnetFile not a string", `{"name":"n","subnetFile":1}`, `"subnetFile"`},
		{"relative subnetFile", `{"name":"n","subnetFile":"subnet.env"}`, `"subnetFile"`},
		{"relative dataDir", `{"name":"n","dataDir":"var/lib"}`, `"dataDir"`},
		{"delegate not an object", `{"name":"n","delegate":"bridge"}`, `"delegate"`},
		{"delegate type not a string", `{"name":"n","delegate":{"type":1}}`, `"delegate.type"`},
		{"delegate type a path", `{"name":"n","delegate":{"type":"../../bin/sh"}}`, `"delegate.type"`},
		{"delegate bridge empty", `{"name":"n","delegate":{"bridge":""}}`, `"delegate.bridge"`},
		{"ipam not an object", `{"name":"n","ipam":[]}`, `"ipam"`},
		{"ipam type not a string", `{"name":"n","ipam":{"type":false}}`, `"ipam.type"`},
		{"ipam routes not a list", `{"name":"n","ipam":{"routes":{}}}`, `"ipam.routes"`},
	} {
		_, err := parseConfig([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got error %v; want one that says %s", tc.desc, err, tc.want)
		}
	}
}

// roundTrip is v as a program reading it from JSON sees it.
func roundTrip(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDelegateConfig(t *testing.T) {
	env, err := parseSubnetEnv([]byte(goodEnv))
	if err != nil {
		t.Fatal(err)
	}
	env6, err := parseSubnetEnv([]byte(goodEnv6))
	if err != nil {
		t.Fatal(err)
	}
	only6 := env6
	only6.Network, only6.Subnet = netip.Prefix{}, netip.Prefix{}
	for _, tc := range []struct {
		desc, conf string
		env        subnetEnv
		want       string
	}{
		{"defaults", `{"cniVersion":"1.0.0","name":"uvxlan","type":"uvxlan-cni"}`, env, `{
			"cniVersion":"1.0.0","name":"uvxlan","type":"bridge","bridge":"cni-uvx0","isGateway":true,"ipMasq":true,"mtu":1450,
			"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.7.0/24","gateway":"10.244.7.1"}]],"routes":[{"dst":"10.244.0.0/16","gw":"10.244.7.1"}]}}`},
		{"the agent masquerades", `{"cniVersion":"0.4.0","name":"pods"}`, subnetEnv{Network: env.Network, Subnet: env.Subnet, MTU: 1400, IPMasq: true}, `{
			"cniVersion":"0.4.0","name":"pods","type":"bridge","bridge":"cni-uvx0","isGateway":true,"ipMasq":false,"mtu":1400,
			"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.7.0/24","gateway":"10.244.7.1"}]],"routes":[{"dst":"10.244.0.0/16","gw":"10.244.7.1"}]}}`},
		{"the delegate's fields win; ipam is the base", `{"cniVersion":"1.0.0","name":"pods",
			"delegate":{"bridge":"br0","hairpinMode":true,"isGateway":false,"mtu":1300,"ipMasq":true,"name":"ignored"},
			"ipam":{"dataDir":"/tmp/ipam","routes":[{"dst":"0.0.0.0/0"}],"ranges":"ignored"}}`, env, `{
			"cniVersion":"1.0.0","name":"pods","type":"bridge","bridge":"br0","hairpinMode":true,"isGateway":false,"ipMasq":true,"mtu":1300,
			"ipam":{"type":"host-local","dataDir":"/tmp/ipam","ranges":[[{"subnet":"10.244.7.0/24","gateway":"10.244.7.1"}]],
				"routes":[{"dst":"0.0.0.0/0"},{"dst":"10.244.0.0/16","gw":"10.244.7.1"}]}}`},
		{"dual stack: a range and a route per family", `{"cniVersion":"1.0.0","name":"uvxlan","type":"uvxlan-cni"}`, env6, `{
			"cniVersion":"1.0.0","name":"uvxlan","type":"bridge","bridge":"cni-uvx0","isGateway":true,"ipMasq":true,"mtu":1450,
			"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.7.0/24","gateway":"10.244.7.1"}],[{"subnet":"fd00:244:0:7::/64","gateway":"fd00:244:0:7::1"}]],
				"routes":[{"dst":"10.244.0.0/16","gw":"10.244.7.1"},{"dst":"fd00:244::/48","gw":"fd00:244:0:7::1"}]}}`},
		{"IPv6 only", `{"cniVersion":"1.0.0","name":"uvxlan","type":"uvxlan-cni"}`, only6, `{
			"cniVersion":"1.0.0","name":"uvxlan","type":"bridge","bridge":"cni-uvx0","isGateway":true,"ipMasq":true,"mtu":1450,
			"ipam":{"type":"host-local","ranges":[[{"subnet":"fd00:244:0:7::/64","gateway":"fd00:244:0:7::1"}]],
				"routes":[{"dst":"fd00:244::/48","gw":"fd00:244:0:7::1"}]}}`},
		{"another delegate type gets no bridge fields", `{"cniVersion":"1.0.0","name":"pods","delegate":{"type":"ptp"},"ipam":{"type":"static"}}`, env, `{
			"cniVersion":"1.0.0","name":"pods","type":"ptp","ipMasq":true,"mtu":1450,
			"ipam":{"type":"static","ranges":[[{"subnet":"10.244.7.0/24","gateway":"10.244.7.1"}]],"routes":[{"dst":"10.244.0.0/16","gw":"10.244.7.1"}]}}`},
	} {
		n, err := parseConfig([]byte(tc.conf))
		if err != nil {
			t.Fatalf("%s: %v", tc.desc, err)
		}
		before := roundTrip(t, n)
		got := roundTrip(t, delegateConfig(n, tc.env))
		var want any
		if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
			t.Fatalf("%s: %v", tc.desc, err)
		}
		if !reflect.DeepEqual(got, want) {
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(want)
			t.Errorf("%s:\ngot  %s\nwant %s", tc.desc, gb, wb)
		}
		if after := roundTrip(t, n); !reflect.DeepEqual(before, after) {
			t.Errorf("%s: delegateConfig changed the config", tc.desc)
		}
	}
}

func TestStore(t *testing.T) {
	s := store{filepath.Join(t.TempDir(), "data")}
	if _, _, ok, err := s.load("c1", "eth0"); ok || err != nil {
		t.Fatalf("load before save: %v, %v", ok, err)
	}
	if err := s.remove("c1", "eth0"); err != nil {
		t.Fatalf("remove of nothing: %v", err)
	}
	if err := s.save("c1", "eth0", []byte(`{"type":"bridge","name":"n"}`)); err != nil {
		t.Fatal(err)
	}
	d, _, ok, err := s.load("c1", "eth0")
	if !ok || err != nil || d["type"] != "bridge" {
		t.Fatalf("load: %v, %v, %v", d, ok, err)
	}
	if _, _, ok, _ := s.load("c1", "eth1"); ok {
		t.Error("eth1 shares eth0's file")
	}
	if err := s.remove("c1", "eth0"); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(s.dir); len(ents) != 0 {
		t.Errorf("left in the data dir: %v", ents)
	}
	for _, id := range []string{"", "..", "a/b"} {
		if err := s.save(id, "eth0", []byte(`{}`)); err == nil {
			t.Errorf("container ID %q names a file", id)
		}
	}
}
