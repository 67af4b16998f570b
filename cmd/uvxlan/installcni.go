package main

// `uvxlan install-cni`: what a DaemonSet's init container does on each
// node (deploy/kubernetes), with no shell in the image: copy the CNI
// plugin into the node's CNI bin directory and the network configuration
// into its conf directory, each by a rename, so that a container runtime
// reading them never sees half a file.

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"
)

func installCNICommand() *cli.Command {
	return &cli.Command{
		Name:  "install-cni",
		Usage: "copy the CNI plugin --plugin into --bin-dir and the network configuration --conf into --conf-dir as --conf-name, each by an atomic rename (a DaemonSet's init container)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "plugin", Value: "/usr/local/bin/uvxlan-cni", Usage: "the plugin binary `FILE`"},
			&cli.StringFlag{Name: "bin-dir", Value: "/opt/cni/bin", Usage: "the node's CNI plugin `DIR`"},
			&cli.StringFlag{Name: "conf", Required: true, Usage: "the network configuration list `FILE`"},
			&cli.StringFlag{Name: "conf-dir", Value: "/etc/cni/net.d", Usage: "the node's CNI configuration `DIR`"},
			&cli.StringFlag{Name: "conf-name", Value: "10-uvxlan.conflist", Usage: "the configuration's `NAME` there (the runtime takes the first by name)"},
		},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usageError{fmt.Errorf("install-cni takes no arguments, got %q", c.Args().Slice())}
			}
			plugin := c.String("plugin")
			if err := installFile(plugin, filepath.Join(c.String("bin-dir"), filepath.Base(plugin)), 0o755); err != nil {
				return err
			}
			if err := installFile(c.String("conf"), filepath.Join(c.String("conf-dir"), c.String("conf-name")), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "installed %s in %s and %s in %s\n", filepath.Base(plugin), c.String("bin-dir"), c.String("conf-name"), c.String("conf-dir"))
			return nil
		},
	}
}

// installFile copies src to dst through a temporary file in dst's
// directory and a rename.
func installFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("install-cni: %w", err)
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return fmt.Errorf("install-cni: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing
	_, err = io.Copy(tmp, in)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		return fmt.Errorf("install-cni: %s: %w", dst, err)
	}
	return nil
}
