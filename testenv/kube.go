// Kubernetes: a real kube-apiserver and its etcd inside a host namespace,
// and kubectl against them, for the tests of --kube-subnet-mgr and of the
// manifests. No controller-manager, scheduler or kubelet runs: a test
// creates Nodes and sets their podCIDRs itself.

package testenv

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/uvxlan/uvxlan/testenv/wait"
)

// KubeBinEnv names the directory holding kube-apiserver, etcd and kubectl
// (scripts/kube-bins.sh builds them once and prints it).
const KubeBinEnv = "UVXLAN_KUBE_BIN"

// KubeBins are the binaries RequireKube looks for in $UVXLAN_KUBE_BIN.
var KubeBins = []string{"kube-apiserver", "etcd", "kubectl"}

// RequireKube is Require, and returns the directory of the Kubernetes
// binaries ($UVXLAN_KUBE_BIN); without them it fails the test under
// UVXLAN_REQUIRE_NETNS=1, and skips it otherwise.
func RequireKube(t T) string {
	t.Helper()
	Require(t)
	dir := os.Getenv(KubeBinEnv)
	var missing []string
	for _, b := range KubeBins {
		if fi, err := os.Stat(filepath.Join(dir, b)); dir == "" || err != nil || fi.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("no %s in $%s=%q (scripts/kube-bins.sh builds them and prints the directory)",
			strings.Join(missing, ", "), KubeBinEnv, dir)
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%s", msg)
		}
		t.Skipf("skipping: %s", msg)
	}
	return dir
}

// KubeUser is an identity the API server knows by its bearer token.
type KubeUser struct {
	Name   string   // user name, such as "system:serviceaccount:uvxlan:uvxlan"
	Groups []string // such as "system:serviceaccounts"
}

// KubeAPI is etcd and kube-apiserver running inside one host: the API
// server on https://<underlay>:KubeAPIPort (a self-signed certificate,
// token authentication, RBAC authorization). Its methods are safe for
// concurrent use, but for StopAPIServer and StartAPIServer.
type KubeAPI struct {
	Host      *Host
	Dir       string // data, keys, certificates, kubeconfigs
	URL       string // https://198.18.0.5:16443
	Etcd      *Proc
	APIServer *Proc
	bin       string
	tokens    map[string]string // user name -> token
	// Admin is a kubeconfig of a system:masters user.
	Admin string
}

// KubeAPIPort is the API server's port; etcd listens on 12379 and 12380.
const KubeAPIPort = 16443

// kubeStartTimeout bounds the wait for /readyz.
const kubeStartTimeout = 90 * time.Second

// StartKubeAPI starts etcd and then kube-apiserver (the binaries in bin)
// inside h, with their state in <RunDir>/<host>-kube, users admin
// (system:masters) and those given (KubeAPI.Kubeconfig writes a
// kubeconfig for any of them), and returns once /readyz answers ok. They
// run until Stop, or Down (NewForTest's teardown, also when the test
// failed).
func (h *Host) StartKubeAPI(ctx context.Context, bin string, users ...KubeUser) (*KubeAPI, error) {
	fail := func(err error) (*KubeAPI, error) {
		return nil, fmt.Errorf("testenv: %s: kube-apiserver: %w", h.Name, err)
	}
	k, err := h.startEtcd(ctx, bin, users)
	if err != nil {
		return fail(err)
	}
	if err := k.StartAPIServer(ctx); err != nil {
		k.Etcd.Stop()
		return fail(err)
	}
	return k, nil
}

// startEtcd makes the state directory of a KubeAPI in h (service account
// keys, a token for admin and each of users, admin's kubeconfig) and
// starts its etcd; the API server is the caller's to start.
func (h *Host) startEtcd(ctx context.Context, bin string, users []KubeUser) (*KubeAPI, error) {
	run, err := h.tb.RunDir()
	if err != nil {
		return nil, err
	}
	k := &KubeAPI{Host: h, Dir: filepath.Join(run, h.Name+"-kube"), bin: bin, tokens: map[string]string{},
		URL: fmt.Sprintf("https://%s:%d", h.Underlay, KubeAPIPort)}
	if err := os.MkdirAll(k.Dir, 0o700); err != nil {
		return nil, err
	}
	if err := writeServiceAccountKeys(k.Dir); err != nil {
		return nil, err
	}
	var csv strings.Builder
	for i, u := range append([]KubeUser{{Name: "admin", Groups: []string{"system:masters"}}}, users...) {
		tok := make([]byte, 16)
		rand.Read(tok)
		k.tokens[u.Name] = hex.EncodeToString(tok)
		fmt.Fprintf(&csv, "%s,%s,uid%d,%q\n", k.tokens[u.Name], u.Name, i, strings.Join(u.Groups, ","))
	}
	if err := os.WriteFile(filepath.Join(k.Dir, "tokens.csv"), []byte(csv.String()), 0o600); err != nil {
		return nil, err
	}
	if k.Admin, err = k.Kubeconfig("admin"); err != nil {
		return nil, err
	}
	a := h.Underlay.String()
	k.Etcd, err = h.Start(context.WithoutCancel(ctx), "", filepath.Join(bin, "etcd"),
		"--data-dir", filepath.Join(k.Dir, "etcd"), "--unsafe-no-fsync",
		"--listen-client-urls", "http://"+a+":12379", "--advertise-client-urls", "http://"+a+":12379",
		"--listen-peer-urls", "http://"+a+":12380", "--initial-advertise-peer-urls", "http://"+a+":12380",
		"--initial-cluster", "default=http://"+a+":12380")
	if err != nil {
		return nil, err
	}
	return k, nil
}

// StartAPIServer starts kube-apiserver (again, after StopAPIServer) and
// waits for /readyz.
func (k *KubeAPI) StartAPIServer(ctx context.Context) error {
	a := k.Host.Underlay.String()
	p, err := k.Host.Start(context.WithoutCancel(ctx), "", filepath.Join(k.bin, "kube-apiserver"),
		"--etcd-servers=http://"+a+":12379", "--bind-address="+a, "--advertise-address="+a,
		fmt.Sprintf("--secure-port=%d", KubeAPIPort), "--endpoint-reconciler-type=none",
		"--cert-dir="+filepath.Join(k.Dir, "certs"), "--service-cluster-ip-range=10.96.0.0/24",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+filepath.Join(k.Dir, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(k.Dir, "sa.key"),
		"--token-auth-file="+filepath.Join(k.Dir, "tokens.csv"),
		"--authorization-mode=RBAC", "--disable-admission-plugins=ServiceAccount", "--allow-privileged=true")
	if err != nil {
		return err
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
	if p.Exited() {
		return fmt.Errorf("kube-apiserver exited at start: %v\n%s", p.Wait(), p.Log())
	}
	if err != nil {
		p.Stop()
		return fmt.Errorf("not ready: %w (last answer %q)\n%s", err, out, p.Log())
	}
	return nil
}

// StopAPIServer stops kube-apiserver (SIGTERM, SIGKILL after 5 s), leaving
// etcd running.
func (k *KubeAPI) StopAPIServer() error { return k.APIServer.Stop() }

// Stop stops the API server, then etcd (the other order hangs the API
// server's shutdown).
func (k *KubeAPI) Stop() error {
	return errors.Join(k.APIServer.Stop(), k.Etcd.Stop())
}

// Token returns the bearer token of user ("admin" or one given to
// StartKubeAPI).
func (k *KubeAPI) Token(user string) string { return k.tokens[user] }

// Kubeconfig writes a kubeconfig for user into Dir and returns its path.
func (k *KubeAPI) Kubeconfig(user string) (string, error) {
	tok, ok := k.tokens[user]
	if !ok {
		return "", fmt.Errorf("no user %q", user)
	}
	conf := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: %q
  user:
    token: %s
contexts:
- name: test
  context:
    cluster: test
    user: %q
current-context: test
`, k.URL, user, tok, user)
	path := filepath.Join(k.Dir, "kubeconfig-"+strings.NewReplacer(":", "_", "/", "_").Replace(user))
	return path, os.WriteFile(path, []byte(conf), 0o600)
}

// Kubectl runs kubectl as admin inside the API server's host, and returns
// its standard output (an error carries its standard error).
func (k *KubeAPI) Kubectl(ctx context.Context, args ...string) (string, error) {
	return k.KubectlStdin(ctx, "", args...)
}

// KubectlStdin is Kubectl with stdin as its standard input.
func (k *KubeAPI) KubectlStdin(ctx context.Context, stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := k.Host.Exec(ctx, filepath.Join(k.bin, "kubectl"), append([]string{"--kubeconfig", k.Admin}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) || stderr.Len() > 0 {
			err = fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
	}
	return string(out), err
}

// writeServiceAccountKeys writes sa.key and sa.pub, the API server's
// service account signing key pair.
func writeServiceAccountKeys(dir string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	for name, block := range map[string]*pem.Block{
		"sa.key": {Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)},
		"sa.pub": {Type: "PUBLIC KEY", Bytes: pub},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			return err
		}
	}
	return nil
}
