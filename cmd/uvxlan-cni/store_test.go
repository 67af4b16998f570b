package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
)

// Attachments whose container ID and interface joined by "-" are the same
// ((a-b, c) and (a, b-c)) keep separate records: removing one leaves the
// other.
func TestStoreKeysDoNotCollide(t *testing.T) {
	st := store{t.TempDir()}
	type key struct{ id, ifName string }
	keys := []key{{"a-b", "c"}, {"a", "b-c"}, {"a_b", "c"}, {"a", "b_c"}, {"a%2Db", "c"}, {"a", "b%2Dc"}}
	for i, k := range keys {
		if err := st.save(k.id, k.ifName, []byte(`{"type":"bridge","n":`+string(rune('0'+i))+`}`)); err != nil {
			t.Fatal(err)
		}
	}
	for i, k := range keys {
		conf, _, ok, err := st.load(k.id, k.ifName)
		if err != nil || !ok || conf["n"] != float64(i) {
			t.Errorf("(%q, %q): got %v %v %v, want record %d", k.id, k.ifName, conf, ok, err, i)
		}
	}
	if err := st.remove(keys[0].id, keys[0].ifName); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, _ := st.load(keys[0].id, keys[0].ifName); ok {
		t.Errorf("(%q, %q) still has a record after remove", keys[0].id, keys[0].ifName)
	}
	if conf, _, ok, err := st.load(keys[1].id, keys[1].ifName); !ok || err != nil || conf["n"] != float64(1) {
		t.Errorf("removing (a-b, c) took (a, b-c)'s record: %v %v %v", conf, ok, err)
	}
}

// A record saved by an earlier version (<ID>-<ifname>) is still found, so
// containers added before an upgrade can be deleted.
func TestStoreReadsOldRecords(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "c1-eth0"), []byte(`{"type":"bridge"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	st := store{dir}
	conf, _, ok, err := st.load("c1", "eth0")
	if err != nil || !ok || conf["type"] != "bridge" {
		t.Fatalf("old record: %v %v %v", conf, ok, err)
	}
	if err := st.remove("c1", "eth0"); err != nil {
		t.Fatal(err)
	}
	if es, _ := os.ReadDir(dir); len(es) != 0 {
		t.Errorf("left after remove: %v", es)
	}
}

// DEL of an attachment whose record is empty or torn (a power cut while it
// was saved) succeeds and releases the address: the delegate's DEL runs
// with the config rebuilt from the network config and subnet.env, or
// without subnet.env with a placeholder range (host-local releases by
// container ID and interface).
func TestDelTornRecord(t *testing.T) {
	requirePlugins(t)
	for _, tt := range []struct {
		desc, record string
		keepEnv      bool
	}{
		{"empty record", "", true},
		{"torn record", `{"cniVersion":"1.0.0","name":"uvx`, true},
		{"record without a type", `{}`, true},
		{"empty record, no subnet.env", "", false},
	} {
		t.Run(tt.desc, func(t *testing.T) {
			dir := t.TempDir()
			envPath, dataDir, ipamDir := filepath.Join(dir, "subnet.env"), filepath.Join(dir, "data"), filepath.Join(dir, "ipam")
			if err := os.WriteFile(envPath, []byte(goodEnv), 0o644); err != nil {
				t.Fatal(err)
			}
			// host-local alone as the delegate: it allocates without a
			// network namespace.
			conf, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "uvxlan", "type": "uvxlan-cni",
				"subnetFile": envPath, "dataDir": dataDir, "delegate": map[string]any{"type": "host-local"},
				"ipam": map[string]any{"dataDir": ipamDir}})
			t.Setenv("CNI_PATH", refPlugins)
			t.Setenv("CNI_CONTAINERID", "c1")
			t.Setenv("CNI_IFNAME", "eth0")
			t.Setenv("CNI_NETNS", "/var/run/netns/none")
			args := &skel.CmdArgs{ContainerID: "c1", IfName: "eth0", Netns: "/var/run/netns/none", StdinData: conf}
			stdout := os.Stdout // ADD prints its result
			os.Stdout, _ = os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			err := cmdAdd(args)
			os.Stdout.Close()
			os.Stdout = stdout
			if err != nil {
				t.Fatalf("ADD: %v", err)
			}
			leases := func() []string {
				es, _ := os.ReadDir(filepath.Join(ipamDir, "uvxlan"))
				var ips []string
				for _, e := range es {
					if strings.HasPrefix(e.Name(), "10.244.") {
						ips = append(ips, e.Name())
					}
				}
				return ips
			}
			if got := leases(); len(got) != 1 {
				t.Fatalf("after ADD, host-local holds %v, want one address", got)
			}
			records, _ := os.ReadDir(dataDir)
			if len(records) != 1 {
				t.Fatalf("after ADD, %d records: %v", len(records), records)
			}
			if err := os.WriteFile(filepath.Join(dataDir, records[0].Name()), []byte(tt.record), 0o600); err != nil {
				t.Fatal(err)
			}
			if !tt.keepEnv {
				os.Remove(envPath)
			}
			if err := cmdDel(args); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if got := leases(); len(got) != 0 {
				t.Errorf("after DEL, host-local still holds %v", got)
			}
			if es, _ := os.ReadDir(dataDir); len(es) != 0 {
				t.Errorf("after DEL, records left: %v", es)
			}
			if err := cmdDel(args); err != nil {
				t.Errorf("DEL again: %v", err)
			}
		})
	}
}
