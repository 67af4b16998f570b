// Real Kubernetes nodes: a control plane (etcd, kube-apiserver with Node
// and RBAC authorization and ServiceAccount tokens, kube-controller-manager
// assigning podCIDRs, kube-scheduler) in one host, and nodes in others:
// each a Mountns of its host with its own containerd (CRI) and kubelet,
// in cgroups of its own, torn down with everything it started.

package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/uvxlan/uvxlan/testenv/wait"
)

// KubeNodeBins are what RequireKubeNodes looks for in $UVXLAN_KUBE_BIN.
var KubeNodeBins = []string{"kube-apiserver", "etcd", "kubectl", "kubelet", "kube-scheduler", "kube-controller-manager"}

// RequireKubeNodes is RequireContainerd, and returns the directory of the
// Kubernetes binaries, kubelet and the rest of the control plane included
// (scripts/kube-bins.sh); it fails under UVXLAN_REQUIRE_NETNS=1 when any
// is missing, and skips otherwise.
func RequireKubeNodes(t T) string {
	t.Helper()
	RequireContainerd(t)
	dir := os.Getenv(KubeBinEnv)
	var missing []string
	for _, b := range KubeNodeBins {
		if fi, err := os.Stat(filepath.Join(dir, b)); dir == "" || err != nil || fi.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	var msgs []string
	if len(missing) > 0 {
		msgs = append(msgs, fmt.Sprintf("no %s in $%s=%q (scripts/kube-bins.sh builds them and prints the directory)",
			strings.Join(missing, ", "), KubeBinEnv, dir))
	}
	missing = nil
	for _, b := range []string{"gcc", "iptables", "iperf3"} { // the pause image, the Service's DNAT, the pods' image
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if _, err := os.Stat("/bin/busybox"); err != nil { // the pods' image
		missing = append(missing, "/bin/busybox (Debian: busybox-static)")
	}
	if len(missing) > 0 {
		msgs = append(msgs, "no "+strings.Join(missing, ", ")+" on this machine")
	}
	if len(msgs) > 0 {
		msg := strings.Join(msgs, "; ")
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%s", msg)
		}
		t.Skipf("skipping: %s", msg)
	}
	return dir
}

// KubeCluster is a control plane in one host and the nodes added to it.
type KubeCluster struct {
	API               *KubeAPI
	ControllerManager *Proc
	Scheduler         *Proc
	// Images are docker-archive tarballs every node imports (the pause
	// image is made and imported besides).
	Images []string
	// ClusterCIDR holds the podCIDRs the controller manager assigns.
	ClusterCIDR string
	pause       string // the pause image's tarball
}

// PauseImage is the sandbox image the nodes' containerd runs (built from
// the kubernetes module's build/pause/linux/pause.c).
const PauseImage = "registry.k8s.io/pause:3.10-uvxlan"

// StartKubeCluster starts etcd, kube-apiserver, kube-controller-manager
// and kube-scheduler (the binaries in bin) inside h, with a token for a
// kubelet on every host of the testbed ("system:node:h2" ...), and builds
// the pause image; images are the tarballs every node imports. It runs
// until Stop, or Down.
func (h *Host) StartKubeCluster(ctx context.Context, bin string, images []string) (*KubeCluster, error) {
	fail := func(err error) (*KubeCluster, error) {
		return nil, fmt.Errorf("testenv: %s: kube cluster: %w", h.Name, err)
	}
	var users []KubeUser
	for _, o := range h.tb.Hosts() {
		users = append(users, KubeUser{Name: "system:node:" + o.Name, Groups: []string{"system:nodes"}})
	}
	k, err := h.startEtcd(ctx, bin, users)
	if err != nil {
		return fail(err)
	}
	a := h.Underlay.String()
	c := &KubeCluster{API: k, Images: images, ClusterCIDR: "10.244.0.0/16"}
	p, err := h.Start(context.WithoutCancel(ctx), "", filepath.Join(bin, "kube-apiserver"),
		"--etcd-servers=http://"+a+":12379", "--bind-address="+a, "--advertise-address="+a,
		fmt.Sprintf("--secure-port=%d", KubeAPIPort), "--endpoint-reconciler-type=none",
		"--cert-dir="+filepath.Join(k.Dir, "certs"), "--service-cluster-ip-range="+kubeServiceRange,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+filepath.Join(k.Dir, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(k.Dir, "sa.key"),
		"--token-auth-file="+filepath.Join(k.Dir, "tokens.csv"),
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--kubelet-preferred-address-types=InternalIP", "--allow-privileged=true")
	if err != nil {
		k.Etcd.Stop()
		return fail(err)
	}
	k.APIServer = p
	var out string
	err = wait.Until(ctx, kubeStartTimeout, func() bool {
		if p.Exited() {
			return true
		}
		out, err = k.Kubectl(ctx, "get", "--raw", "/readyz")
		return err == nil && strings.TrimSpace(out) == "ok"
	})
	if p.Exited() || err != nil {
		c.Stop()
		return fail(fmt.Errorf("kube-apiserver not ready: %v (last %q)\n%s", err, out, p.Log()))
	}
	// The controller manager and the scheduler as admin (system:masters):
	// the harness's, not a test of their RBAC.
	flex := filepath.Join(k.Dir, "flexvolume")
	os.MkdirAll(flex, 0o755)
	c.ControllerManager, err = h.Start(context.WithoutCancel(ctx), "", filepath.Join(bin, "kube-controller-manager"),
		"--kubeconfig="+k.Admin, "--leader-elect=false", "--allocate-node-cidrs", "--cluster-cidr="+c.ClusterCIDR,
		"--node-cidr-mask-size=24", "--service-cluster-ip-range="+kubeServiceRange,
		"--service-account-private-key-file="+filepath.Join(k.Dir, "sa.key"),
		"--root-ca-file="+filepath.Join(k.Dir, "certs", "apiserver.crt"), "--use-service-account-credentials=false",
		"--flex-volume-plugin-dir="+flex, "--bind-address="+a, "--secure-port=10257")
	if err != nil {
		c.Stop()
		return fail(err)
	}
	c.Scheduler, err = h.Start(context.WithoutCancel(ctx), "", filepath.Join(bin, "kube-scheduler"),
		"--kubeconfig="+k.Admin, "--leader-elect=false", "--bind-address="+a, "--secure-port=10259")
	if err != nil {
		c.Stop()
		return fail(err)
	}
	if c.pause, err = buildPause(ctx, filepath.Join(k.Dir, "pause")); err != nil {
		c.Stop()
		return fail(err)
	}
	return c, nil
}

// kubeServiceRange is the Services' range; the API server's Service is
// its first address, 10.96.0.1:443, which each node forwards to the API
// server (the harness's own kube-proxy, for that Service alone).
const kubeServiceRange = "10.96.0.0/24"

// Stop stops the scheduler, the controller manager, the API server and
// etcd; the nodes are stopped by their own Stop (or Down).
func (c *KubeCluster) Stop() error {
	var errs []error
	for _, p := range []*Proc{c.Scheduler, c.ControllerManager, c.API.APIServer, c.API.Etcd} {
		if p != nil {
			errs = append(errs, p.Stop())
		}
	}
	return errors.Join(errs...)
}

// buildPause compiles the kubernetes module's pause.c, static, and writes
// PauseImage as a docker-archive in dir; it returns the tarball.
func buildPause(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMODCACHE").Output()
	if err != nil {
		return "", fmt.Errorf("pause: go env GOMODCACHE: %w", err)
	}
	src, err := filepath.Glob(filepath.Join(strings.TrimSpace(string(out)), "k8s.io", "kubernetes@*", "build", "pause", "linux", "pause.c"))
	if err != nil || len(src) == 0 {
		return "", fmt.Errorf("pause: no k8s.io/kubernetes build/pause/linux/pause.c in the module cache (scripts/kube-bins.sh downloads it)")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "pause")
	if out, err := exec.CommandContext(ctx, "gcc", "-Os", "-static", "-DVERSION=3.10-uvxlan", "-o", bin, src[len(src)-1]).CombinedOutput(); err != nil {
		return "", fmt.Errorf("pause: gcc: %w\n%s", err, out)
	}
	// scripts/mkimage writes the image, as make image does.
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(gomod)), "go.mod") {
		return "", fmt.Errorf("pause: not inside the uvxlan module (go env GOMOD: %q, %v)", gomod, err)
	}
	tarball := filepath.Join(dir, "pause.tar")
	mkimage := filepath.Join(filepath.Dir(strings.TrimSpace(string(gomod))), "scripts", "mkimage")
	if out, err := exec.CommandContext(ctx, "go", "run", mkimage, "-o", tarball, "-tag", PauseImage, "-entrypoint", "/pause", bin+"=/pause").CombinedOutput(); err != nil {
		return "", fmt.Errorf("pause: mkimage: %w\n%s", err, out)
	}
	return tarball, nil
}

// KubeNode is a kubelet and its containerd in a Mountns of a host.
type KubeNode struct {
	Name       string
	Host       *Host
	Mountns    *Mountns
	Containerd *Containerd
	Kubelet    *Proc
	Dir        string
	Cgroup     string // the kubelet's cgroupRoot, in every hierarchy
	// cgroupsMade are the cgroup directories made for Cgroup (it, and
	// the parents that were missing), parents last.
	cgroupsMade []string
}

// hostSysctls are the kernel settings kubelet checks
// (protectKernelDefaults) with the values it wants; a node gets files
// holding them bound over /proc/sys inside its Mountns, so that kubelet
// neither rewrites the host's nor refuses to start.
var hostSysctls = map[string]string{
	"kernel/panic": "10", "kernel/panic_on_oops": "1", "vm/overcommit_memory": "1", "vm/panic_on_oom": "0",
	"kernel/keys/root_maxkeys": "1000000", "kernel/keys/root_maxbytes": "25000000",
}

// AddNode makes h a node: a default route through its underlay interface
// (the agent's VTEP is the default route's address), the API server's
// Service forwarded to the API server, a Mountns with the node's own
// directories, a containerd with the CRI and the images, and a kubelet
// named after the host. It returns once the Node is registered.
func (c *KubeCluster) AddNode(ctx context.Context, h *Host) (*KubeNode, error) {
	fail := func(n *KubeNode, err error) (*KubeNode, error) {
		if n != nil {
			n.Stop()
		}
		return nil, fmt.Errorf("testenv: %s: kube node: %w", h.Name, err)
	}
	run, err := h.tb.RunDir()
	if err != nil {
		return fail(nil, err)
	}
	n := &KubeNode{Name: h.Name, Host: h, Dir: filepath.Join(run, h.Name+"-node")}
	for _, d := range []string{"cni-bin", "cni-net", "cni-lib", "kubelet", "log-containers", "log-pods", "uvxlan-run", "uvxlan-lib", "sysctl"} {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o755); err != nil {
			return fail(nil, err)
		}
	}
	for _, p := range []string{"bridge", "host-local", "portmap", "loopback"} {
		b, err := os.ReadFile(filepath.Join("/usr/lib/cni", p))
		if err != nil {
			return fail(nil, fmt.Errorf("reference CNI plugin %s (Debian: containernetworking-plugins): %w", p, err))
		}
		if err := os.WriteFile(filepath.Join(n.Dir, "cni-bin", p), b, 0o755); err != nil {
			return fail(nil, err)
		}
	}
	api := c.API.Host.Underlay.String()
	// A node forwards (the pods' traffic; kube-proxy and the runtimes
	// need it too): net.ipv4.ip_forward of the node's network namespace,
	// not the host's.
	steps := [][]string{
		{"sysctl", "-q", "-w", "net.ipv4.ip_forward=1"},
		{"ip", "route", "add", "default", "dev", h.Iface},
		{"iptables", "-t", "nat", "-A", "OUTPUT", "-d", "10.96.0.1/32", "-p", "tcp", "--dport", "443",
			"-j", "DNAT", "--to-destination", fmt.Sprintf("%s:%d", api, KubeAPIPort)},
	}
	for _, s := range steps {
		if out, err := h.Run(ctx, s[0], s[1:]...); err != nil {
			return fail(nil, fmt.Errorf("%v\n%s", err, out))
		}
	}
	if n.Mountns, err = h.NewMountns(ctx); err != nil {
		return fail(nil, err)
	}
	binds := map[string]string{
		"cni-bin": "/opt/cni/bin", "cni-net": "/etc/cni/net.d", "cni-lib": "/var/lib/cni", "kubelet": "/var/lib/kubelet",
		"log-containers": "/var/log/containers", "log-pods": "/var/log/pods",
		"uvxlan-run": "/run/uvxlan", "uvxlan-lib": "/var/lib/uvxlan",
	}
	for src, dst := range binds {
		if err := n.Mountns.Bind(ctx, filepath.Join(n.Dir, src), dst); err != nil {
			return fail(n, err)
		}
	}
	for key, want := range hostSysctls {
		have, err := os.ReadFile("/proc/sys/" + key)
		if err != nil || strings.TrimSpace(string(have)) == want {
			continue
		}
		f := filepath.Join(n.Dir, "sysctl", strings.ReplaceAll(key, "/", "."))
		if err := os.WriteFile(f, []byte(want+"\n"), 0o444); err != nil {
			return fail(n, err)
		}
		if _, err := n.Mountns.Run(ctx, "mount", "--bind", f, "/proc/sys/"+key); err != nil {
			return fail(n, err)
		}
	}
	n.Cgroup, n.cgroupsMade, err = makeNodeCgroup(h.tb.Prefix() + "-" + h.Name)
	if err != nil {
		return fail(n, err)
	}
	procs := cgroupProcs(n.Cgroup)
	// Every process of the node enters its cgroups before it execs, so
	// that the shims and containers it starts are found there at the end.
	n.Mountns.enter = procs
	if n.Containerd, err = n.Mountns.StartContainerd(ctx, ContainerdConfig{CRI: true, SandboxImage: PauseImage,
		CNIBinDir: "/opt/cni/bin", CNIConfDir: "/etc/cni/net.d"}); err != nil {
		return fail(n, err)
	}
	for _, img := range append([]string{c.pause}, c.Images...) {
		if out, err := n.Containerd.Ctr(ctx, "k8s.io", "images", "import", img); err != nil {
			return fail(n, fmt.Errorf("import %s: %v\n%s", img, err, out))
		}
	}
	kubeconfig, err := c.API.Kubeconfig("system:node:" + h.Name)
	if err != nil {
		return fail(n, err)
	}
	resolv := filepath.Join(n.Dir, "resolv.conf")
	os.WriteFile(resolv, []byte("nameserver 127.0.0.1\n"), 0o644)
	conf := filepath.Join(n.Dir, "kubelet.yaml")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %s
containerRuntimeEndpoint: unix://%s
address: %s
readOnlyPort: 0
healthzPort: 0
failSwapOn: false
protectKernelDefaults: true
resolvConf: %s
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
syncFrequency: 10s
nodeStatusUpdateFrequency: 4s
`, n.Cgroup, n.Containerd.Socket, h.Underlay, resolv)), 0o644); err != nil {
		return fail(n, err)
	}
	n.Kubelet, err = n.Mountns.Start(ctx, "", filepath.Join(c.API.bin, "kubelet"), "--config", conf, "--kubeconfig", kubeconfig,
		"--hostname-override", h.Name, "--node-ip", h.Underlay.String(), "--root-dir", "/var/lib/kubelet")
	if err != nil {
		return fail(n, err)
	}
	if err := wait.Until(ctx, 120*time.Second, func() bool {
		_, err := c.API.Kubectl(ctx, "get", "node", h.Name)
		return err == nil || n.Kubelet.Exited()
	}); err != nil || n.Kubelet.Exited() {
		return fail(n, fmt.Errorf("the Node never registered (%v)\n%s", err, lastLogLines(n.Kubelet.Log(), 40)))
	}
	return n, nil
}

// Stop stops the kubelet and containerd, kills every process left in the
// node's cgroups (the shims and the pods' containers), removes the
// cgroups, and closes the Mountns (its mounts go with it).
func (n *KubeNode) Stop() error {
	var errs []error
	if n.Kubelet != nil {
		errs = append(errs, n.Kubelet.Stop())
	}
	if n.Containerd != nil {
		n.Containerd.Stop()
	}
	if n.Cgroup != "" {
		for i := 0; i < 50; i++ {
			pids := cgroupPids(n.Cgroup)
			if len(pids) == 0 {
				break
			}
			killAll(pids)
		}
		// A killed task leaves its cgroup a moment after it is gone from
		// cgroup.procs (rmdir: busy): try again for a while.
		var err error
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if err = RemoveCgroups(n.Cgroup); err == nil || time.Now().After(deadline) {
				break
			}
			killAll(cgroupPids(n.Cgroup))
		}
		errs = append(errs, err)
	}
	// The parents made for it, when nothing else uses them.
	for _, d := range n.cgroupsMade {
		os.Remove(d)
	}
	if n.Mountns != nil {
		errs = append(errs, n.Mountns.Close())
	}
	return errors.Join(errs...)
}

// ownMemoryCgroup is this process's cgroup in the memory hierarchy ("/"
// when none): node cgroups go below it, so that what the nodes use is
// counted where this process's use is.
func ownMemoryCgroup() string {
	b, _ := os.ReadFile("/proc/self/cgroup")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.SplitN(l, ":", 3); len(f) == 3 && f[1] == "memory" {
			return f[2]
		}
	}
	return "/"
}

// cgroupHierarchies are the v1 hierarchies a node's cgroup is made in.
var cgroupHierarchies = []string{"cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids", "systemd"}

// makeNodeCgroup makes <own memory cgroup>/uvxlan-<name> in every v1
// hierarchy (cpuset's cpus and mems copied from its parent) and returns
// that path and the directories it made, children first.
func makeNodeCgroup(name string) (string, []string, error) {
	path := filepath.Join(ownMemoryCgroup(), "uvxlan-"+name)
	var made []string
	// runc makes the same path in the v2 hierarchy of a hybrid layout:
	// what is missing there now goes at the end too.
	if _, err := os.Stat("/sys/fs/cgroup/unified"); err == nil {
		for d := filepath.Join("/sys/fs/cgroup/unified", path); ; d = filepath.Dir(d) {
			if _, err := os.Stat(d); err == nil {
				break
			}
			made = append(made, d)
		}
	}
	for _, hy := range cgroupHierarchies {
		dir := filepath.Join("/sys/fs/cgroup", hy, path)
		for d := dir; ; d = filepath.Dir(d) {
			if _, err := os.Stat(d); err == nil {
				break
			}
			made = append(made, d)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", made, fmt.Errorf("cgroup %s: %w", dir, err)
		}
		if hy == "cpuset" {
			// Each level from the top needs cpus and mems before a
			// process may enter.
			rel := strings.Split(strings.Trim(path, "/"), "/")
			cur := "/sys/fs/cgroup/cpuset"
			for _, r := range rel {
				parent := cur
				cur = filepath.Join(cur, r)
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					if b, _ := os.ReadFile(filepath.Join(cur, f)); strings.TrimSpace(string(b)) != "" {
						continue
					}
					b, _ := os.ReadFile(filepath.Join(parent, f))
					if err := os.WriteFile(filepath.Join(cur, f), b, 0o644); err != nil {
						return "", made, fmt.Errorf("cgroup %s: %s: %w", cur, f, err)
					}
				}
			}
		}
	}
	// Low CPU shares: the cluster must not starve the rest of the machine.
	os.WriteFile(filepath.Join("/sys/fs/cgroup/cpu", path, "cpu.shares"), []byte("256"), 0o644)
	return path, made, nil
}

// cgroupProcs are the cgroup.procs files of path in every hierarchy.
func cgroupProcs(path string) []string {
	var fs []string
	for _, hy := range cgroupHierarchies {
		fs = append(fs, filepath.Join("/sys/fs/cgroup", hy, path, "cgroup.procs"))
	}
	return fs
}

// cgroupPids returns the processes in path or below it (pids hierarchy).
func cgroupPids(path string) []int {
	var pids []int
	filepath.WalkDir(filepath.Join("/sys/fs/cgroup/pids", path), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// lastLogLines returns the last n lines of s.
func lastLogLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
