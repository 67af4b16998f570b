package main

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// readArchive returns the files of a tarball by name.
func readArchive(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = b
	}
}

func TestCheckRefusesLatestAndBadPaths(t *testing.T) {
	f := []File{{Src: "x", Dst: "/usr/local/bin/x"}}
	for _, tc := range []struct {
		desc string
		img  Image
		want string // in the error; "" for none
	}{
		{"a versioned tag", Image{Tag: "ghcr.io/uvxlan/uvxlan:0.1.0", Files: f}, ""},
		{"a registry with a port", Image{Tag: "localhost:5000/uvxlan:v1-rc.2", Files: f}, ""},
		{"latest", Image{Tag: "ghcr.io/uvxlan/uvxlan:latest", Files: f}, "not latest"},
		{"no tag", Image{Tag: "ghcr.io/uvxlan/uvxlan", Files: f}, "want NAME:TAG"},
		{"upper case name", Image{Tag: "Uvxlan:1", Files: f}, "want NAME:TAG"},
		{"relative path", Image{Tag: "u:1", Files: []File{{Src: "x", Dst: "bin/x"}}}, "not a clean absolute"},
		{"unclean path", Image{Tag: "u:1", Files: []File{{Src: "x", Dst: "/bin/../x"}}}, "not a clean absolute"},
		{"no files", Image{Tag: "u:1"}, "no files"},
	} {
		err := tc.img.Check()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: Check() = %v, want an error with %q", tc.desc, err, tc.want)
		}
	}
}

// The archive is a docker-archive whose layer holds exactly the files
// given, under their directories, and the same input gives the same bytes.
func TestWriteLayout(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(a, []byte("agent"), 0o600)
	os.WriteFile(b, []byte("plugin"), 0o600)
	img := Image{Tag: "ghcr.io/uvxlan/uvxlan:0.1.0", Entrypoint: []string{"/usr/local/bin/uvxlan"},
		Files: []File{{Src: b, Dst: "/usr/local/bin/uvxlan-cni"}, {Src: a, Dst: "/usr/local/bin/uvxlan"}}}
	var one, two bytes.Buffer
	if err := Write(&one, img); err != nil {
		t.Fatal(err)
	}
	Write(&two, img)
	if !bytes.Equal(one.Bytes(), two.Bytes()) {
		t.Errorf("two writes of the same image differ")
	}
	files := readArchive(t, &one)
	var m []manifestEntry
	if err := json.Unmarshal(files["manifest.json"], &m); err != nil || len(m) != 1 {
		t.Fatalf("manifest.json %s: %v", files["manifest.json"], err)
	}
	if !slices.Equal(m[0].RepoTags, []string{img.Tag}) || len(m[0].Layers) != 1 {
		t.Fatalf("manifest %+v, want one layer tagged %s", m[0], img.Tag)
	}
	var cfg imageConfig
	if err := json.Unmarshal(files[m[0].Config], &cfg); err != nil {
		t.Fatalf("config %s: %v", m[0].Config, err)
	}
	if !slices.Equal(cfg.Config.Entrypoint, img.Entrypoint) || cfg.OS != "linux" || len(cfg.RootFS.DiffIDs) != 1 {
		t.Errorf("config %+v", cfg)
	}
	layer := files[m[0].Layers[0]]
	if want := "sha256:" + strings.TrimSuffix(m[0].Layers[0], "/layer.tar"); cfg.RootFS.DiffIDs[0] != want {
		t.Errorf("diff_id %s, want the layer's digest %s", cfg.RootFS.DiffIDs[0], want)
	}
	var names []string
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(time.Unix(0, 0)) || h.Mode != 0o755 {
			t.Errorf("%s: uid %d gid %d mtime %v mode %o, want root's, the epoch, 0755", h.Name, h.Uid, h.Gid, h.ModTime, h.Mode)
		}
	}
	if want := []string{"usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/uvxlan", "usr/local/bin/uvxlan-cni"}; !slices.Equal(names, want) {
		t.Errorf("layer %v, want %v", names, want)
	}
	if err := Write(io.Discard, Image{Tag: img.Tag, Files: []File{{Src: a, Dst: "/x"}, {Src: b, Dst: "/x/y"}}}); err == nil {
		t.Errorf("a path both a file and a directory: no error")
	}
}

// `make image` end to end: the static binaries only (no interpreter, no
// shell), tagged with the version deploy/kubernetes/uvxlan.yaml names;
// containerd imports it and runs `uvxlan --version` from it, and podman
// loads it.
func TestMakeImage(t *testing.T) {
	testenv.RequireContainerd(t)
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("no make: %v", err)
	}
	dir := t.TempDir()
	tarball := filepath.Join(dir, "uvxlan-image.tar")
	start := time.Now()
	cmd := exec.Command("make", "-C", "../..", "image", "IMAGE_TAR="+tarball, "IMAGE_BIN="+filepath.Join(dir, "bin"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	fi, err := os.Stat(tarball)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("make image: %v, %s: %.1f MB", time.Since(start).Round(time.Second), filepath.Base(tarball), float64(fi.Size())/1e6)

	f, err := os.Open(tarball)
	if err != nil {
		t.Fatal(err)
	}
	files := readArchive(t, f)
	f.Close()
	var m []manifestEntry
	if err := json.Unmarshal(files["manifest.json"], &m); err != nil || len(m) != 1 || len(m[0].RepoTags) != 1 {
		t.Fatalf("manifest.json %s: %v", files["manifest.json"], err)
	}
	tag := m[0].RepoTags[0]
	version := tagOf(tag)

	t.Run("the manifest runs this tag", func(t *testing.T) {
		y, err := os.ReadFile("../../deploy/kubernetes/uvxlan.yaml")
		if err != nil {
			t.Fatal(err)
		}
		refs := regexp.MustCompile(`(?m)^\s*image:\s*(\S+)`).FindAllStringSubmatch(string(y), -1)
		if len(refs) == 0 {
			t.Fatal("no image in deploy/kubernetes/uvxlan.yaml")
		}
		for _, r := range refs {
			if r[1] != tag {
				t.Errorf("deploy/kubernetes/uvxlan.yaml runs %s, make image builds %s", r[1], tag)
			}
		}
	})
	t.Run("static binaries only", func(t *testing.T) {
		tr := tar.NewReader(bytes.NewReader(files[m[0].Layers[0]]))
		var names []string
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			names = append(names, h.Name)
			if h.Typeflag != tar.TypeReg {
				continue
			}
			b, _ := io.ReadAll(tr)
			e, err := elf.NewFile(bytes.NewReader(b))
			if err != nil {
				t.Errorf("%s: not an ELF binary: %v", h.Name, err)
				continue
			}
			for _, p := range e.Progs {
				if p.Type == elf.PT_INTERP {
					t.Errorf("%s is dynamically linked", h.Name)
				}
			}
		}
		if want := []string{"usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/uvxlan", "usr/local/bin/uvxlan-cni"}; !slices.Equal(names, want) {
			t.Errorf("the image holds %v, want %v", names, want)
		}
	})

	t.Run("containerd imports it and runs uvxlan --version", func(t *testing.T) {
		tb := testenv.NewForTest(t, testenv.Config{Hosts: 1})
		ctx := context.Background()
		mn, err := tb.Host(1).NewMountns(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { mn.Close() })
		c, err := mn.StartContainerd(ctx, testenv.ContainerdConfig{})
		if err != nil {
			t.Fatal(err)
		}
		// The containers of a ctr namespace get the cgroup /<namespace>.
		ns := tb.Prefix()
		t.Cleanup(func() {
			c.Stop()
			if err := testenv.RemoveCgroups("/" + ns); err != nil {
				t.Errorf("cgroups left: %v", err)
			}
		})
		if out, err := c.Ctr(ctx, ns, "images", "import", tarball); err != nil {
			t.Fatalf("ctr images import: %v\n%s", err, out)
		}
		if out, _ := c.Ctr(ctx, ns, "images", "ls", "-q"); strings.TrimSpace(out) != tag {
			t.Errorf("ctr images ls: %q, want %s", out, tag)
		}
		out, err := c.Ctr(ctx, ns, "run", "--rm", tag, "version", "/usr/local/bin/uvxlan", "--version")
		if err != nil || !strings.HasPrefix(out, "uvxlan version "+version) {
			t.Errorf("uvxlan --version in the image: %v\n%s\nwant uvxlan version %s", err, out, version)
		}
		t.Logf("in the image: %s", strings.TrimSpace(out))
		out, err = c.Ctr(ctx, ns, "run", "--rm", tag, "shell", "/bin/sh", "-c", "true")
		if err == nil || !strings.Contains(out, `"/bin/sh": stat /bin/sh: no such file or directory`) {
			t.Errorf("/bin/sh in the image: %v\n%s", err, out)
		}

		// The agent as the DaemonSet runs it: host network (h1's), root
		// with NET_ADMIN alone, /dev/net/tun bound in, /proc/sys read-only
		// (containerd's default spec, as for a pod): it makes its TAP and
		// the readiness probe says so.
		h1 := tb.Host(1)
		run := filepath.Join(t.TempDir(), "run")
		os.Mkdir(run, 0o755)
		args := []string{"run", "-d", "--net-host", "--cap-add", "CAP_NET_ADMIN",
			"--mount", "type=bind,src=/dev/net/tun,dst=/dev/net/tun,options=rbind:rw",
			"--mount", "type=bind,src=" + run + ",dst=/run/uvxlan,options=rbind:rw"}
		for _, c := range []string{"CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
			"SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE"} {
			args = append(args, "--cap-drop", "CAP_"+c)
		}
		args = append(args, tag, "agent", "/usr/local/bin/uvxlan", "run", "--gossip=false", "--local", h1.Underlay.String(),
			"--address", "10.42.0.1/24", "--control", "/run/uvxlan/uvx0.sock", "--state-dir", "/run/uvxlan/state")
		if out, err := c.Ctr(ctx, ns, args...); err != nil {
			t.Fatalf("ctr run the agent: %v\n%s", err, out)
		}
		t.Cleanup(func() {
			c.Ctr(ctx, ns, "tasks", "kill", "-a", "-s", "SIGKILL", "agent")
			wait.Until(ctx, 30*time.Second, func() bool {
				_, err := c.Ctr(ctx, ns, "tasks", "delete", "agent")
				return err == nil
			})
			c.Ctr(ctx, ns, "containers", "delete", "agent")
		})
		probe := []string{"health", "--ready", "--control", filepath.Join(run, "uvx0.sock")}
		var health string
		if err := wait.Until(ctx, 60*time.Second, func() bool {
			health, err = h1.Run(ctx, filepath.Join(dir, "bin", "uvxlan"), probe...)
			return err == nil
		}); err != nil {
			tasks, _ := c.Ctr(ctx, ns, "tasks", "ls")
			t.Fatalf("the agent in the container never got ready: %s\n%s", health, tasks)
		}
		t.Logf("%s", strings.TrimSpace(health))
		tasks, _ := c.Ctr(ctx, ns, "tasks", "ls")
		var pid string
		for _, l := range strings.Split(tasks, "\n") {
			if f := strings.Fields(l); len(f) >= 3 && f[0] == "agent" {
				pid = f[1]
			}
		}
		status, err := os.ReadFile("/proc/" + pid + "/status")
		if err != nil {
			t.Fatalf("the agent's status (pid %q): %v\n%s", pid, err, tasks)
		}
		if m := regexp.MustCompile(`(?m)^CapEff:\s*(\S+)$`).FindSubmatch(status); m == nil || string(m[1]) != "0000000000001000" {
			t.Errorf("the agent's effective capabilities %q, want CAP_NET_ADMIN alone (0000000000001000)", m)
		}
		if out, err := h1.Run(ctx, "ip", "-br", "link", "show", "uvx0"); err != nil || !strings.Contains(out, "UP") {
			t.Errorf("the agent's TAP in h1: %v\n%s", err, out)
		}
	})

	t.Run("podman loads it", func(t *testing.T) {
		if _, err := exec.LookPath("podman"); err != nil {
			if os.Getenv(testenv.RequireEnv) == "1" {
				t.Fatalf("no podman: %v", err)
			}
			t.Skipf("skipping: no podman: %v", err)
		}
		// A storage of its own, removed after; podman wants a short
		// runroot.
		pd, err := os.MkdirTemp("", "pd")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(pd) })
		podman := func(args ...string) (string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, "podman", append([]string{"--root", filepath.Join(pd, "root"), "--runroot", filepath.Join(pd, "run"),
				"--storage-driver", "vfs"}, args...)...).CombinedOutput()
			return string(out), err
		}
		t.Cleanup(func() { podman("rmi", "-a", "-f") }) // before the RemoveAll: cleanups run last first
		if out, err := podman("load", "-i", tarball); err != nil || !strings.Contains(out, "Loaded image: "+tag) {
			t.Fatalf("podman load: %v\n%s", err, out)
		}
		out, err := podman("image", "inspect", "--format", "{{json .Config.Entrypoint}} {{.Size}}", tag)
		if err != nil || !strings.HasPrefix(out, `["/usr/local/bin/uvxlan"]`) {
			t.Errorf("podman image inspect: %v\n%s", err, out)
		}
		t.Logf("podman image inspect: entrypoint and size %s", strings.TrimSpace(out))
	})
}
