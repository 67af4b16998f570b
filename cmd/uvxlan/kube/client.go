package kube

// A small client of the API server: what the subnet manager needs of
// Nodes (list, watch, patch) over HTTPS and JSON, and the credentials of a
// kubeconfig or of a pod's service account. Not client-go: its typed
// clientset and scheme register every API group at start, which cost
// every agent, Kubernetes or not, ~40 MB of memory and 64 MB of binary.
//
// What the server sends is bounded, whoever answers: a list comes in pages
// of listPage Nodes, each page at most maxPageBytes and each Node in it, or
// in a watch event, at most maxNodeBytes; the Nodes are decoded one at a
// time from the stream (never a whole page in one buffer), and only the
// fields read are kept (keep). A watch that brings nothing, not even a
// bookmark, for watchIdle is closed and opened again from its resource
// version. A server over plain http or with insecure-skip-tls-verify is
// used, with a warning (New): anyone on the path could then read the token
// and rewrite the Nodes, whose podCIDRs become routes.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// node is what the subnet manager reads of a Node.
type node struct {
	Metadata struct {
		Name              string            `json:"name"`
		ResourceVersion   string            `json:"resourceVersion"`
		Annotations       map[string]string `json:"annotations"`
		CreationTimestamp time.Time         `json:"creationTimestamp"`
	} `json:"metadata"`
	Spec struct {
		PodCIDR  string   `json:"podCIDR"`
		PodCIDRs []string `json:"podCIDRs"`
	} `json:"spec"`
	Status struct {
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
	} `json:"status"`
}

// The bounds on what the API server sends.
const (
	// listPage is the Nodes asked for in one page of a list (client-go's
	// reflector asks for 500 too).
	listPage = 500
	// maxPageBytes bounds one page of a list: 128 KiB per Node of a full
	// page, when a real Node is 5-30 KiB of JSON (status, images,
	// managedFields).
	maxPageBytes = 64 << 20
	// maxNodeBytes bounds one Node, in a list or a watch event: etcd
	// stores no object larger than 1.5 MiB (its --max-request-bytes), and
	// the API server refuses annotations of more than 256 KiB.
	maxNodeBytes = 4 << 20
	// maxNodes bounds the Nodes held: Kubernetes supports clusters of
	// 5 000.
	maxNodes = 10000
	// maxKeptBytes bounds what is kept of one Node (keep), as JSON; a
	// Node with more is ignored.
	maxKeptBytes = 4 << 10
	// watchIdle is how long a watch may bring nothing before it is closed
	// and opened again: the API server sends a bookmark about every
	// minute, and ends a watch after watchTimeout.
	watchIdle = 2 * time.Minute
	// watchTimeout is the length of a watch asked of the server
	// (timeoutSeconds).
	watchTimeout = 290 * time.Second
)

var (
	errPageTooLarge = fmt.Errorf("a page of the list of Nodes exceeds %d MiB", maxPageBytes>>20)
	errNodeTooLarge = fmt.Errorf("a Node exceeds %d MiB", maxNodeBytes>>20)
	errTooManyNodes = fmt.Errorf("more than %d Nodes", maxNodes)
	// errWatchIdle ends a watch that brought nothing for watchIdle.
	errWatchIdle = errors.New("the watch brought nothing")
)

// keep drops what the subnet manager does not read of n (the annotations
// but uvxlan's and flannel's, the conditions but NetworkUnavailable, the
// podCIDRs beyond the two of a dual-stack Node), and reports whether the
// rest fits in maxKeptBytes.
func (n *node) keep() bool {
	for k := range n.Metadata.Annotations {
		if !strings.HasPrefix(k, "uvxlan.io/") && !strings.HasPrefix(k, "flannel.alpha.coreos.com/") {
			delete(n.Metadata.Annotations, k)
		}
	}
	conds := n.Status.Conditions[:0]
	for _, c := range n.Status.Conditions {
		if c.Type == "NetworkUnavailable" {
			conds = append(conds, c)
		}
	}
	n.Status.Conditions = conds
	n.Spec.PodCIDRs = n.Spec.PodCIDRs[:min(len(n.Spec.PodCIDRs), 2)]
	b, err := json.Marshal(n)
	return err == nil && len(b) <= maxKeptBytes
}

// listMeta is the metadata of a page of a list.
type listMeta struct {
	ResourceVersion string `json:"resourceVersion"`
	Continue        string `json:"continue"`
}

type watchEvent struct {
	Type   string          `json:"type"` // ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
	Object json.RawMessage `json:"object"`
}

// apiError is an answer of the API server other than 2xx: its Status.
type apiError struct {
	Code    int    `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

func (e *apiError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("API server: %d %s", e.Code, e.Reason)
	}
	return e.Message
}

func hasCode(err error, code int) bool {
	var e *apiError
	return errors.As(err, &e) && e.Code == code
}

func isNotFound(err error) bool     { return hasCode(err, http.StatusNotFound) }
func isForbidden(err error) bool    { return hasCode(err, http.StatusForbidden) }
func isUnauthorized(err error) bool { return hasCode(err, http.StatusUnauthorized) }
func isGone(err error) bool         { return hasCode(err, http.StatusGone) }

// client talks to one API server.
type client struct {
	server     string // https://host:port
	http       *http.Client
	token      string
	tokenFile  string        // read at every request (service account tokens rotate)
	skipVerify bool          // insecure-skip-tls-verify
	watchIdle  time.Duration // watchIdle; shorter in tests
}

// warnings say what a man in the middle could do with this client's
// configuration, if anything.
func (c *client) warnings() []string {
	var w []string
	if strings.HasPrefix(c.server, "http://") {
		w = append(w, "the API server is reached over plain http: anyone on the path can read the credentials and rewrite the Nodes, whose podCIDRs this node routes; use https")
	}
	if c.skipVerify {
		w = append(w, "insecure-skip-tls-verify: the API server's certificate is not checked: anyone on the path can pose as the API server and rewrite the Nodes, whose podCIDRs this node routes; give its certificate-authority")
	}
	return w
}

// kubeconfig is what loadKubeconfig reads of a kubeconfig file.
type kubeconfig struct {
	Clusters []struct {
		Name    string `yaml:"name"`
		Cluster struct {
			Server                   string `yaml:"server"`
			CertificateAuthority     string `yaml:"certificate-authority"`
			CertificateAuthorityData string `yaml:"certificate-authority-data"`
			InsecureSkipTLSVerify    bool   `yaml:"insecure-skip-tls-verify"`
			TLSServerName            string `yaml:"tls-server-name"`
		} `yaml:"cluster"`
	} `yaml:"clusters"`
	Users []struct {
		Name string `yaml:"name"`
		User struct {
			Token                 string         `yaml:"token"`
			TokenFile             string         `yaml:"tokenFile"`
			ClientCertificate     string         `yaml:"client-certificate"`
			ClientCertificateData string         `yaml:"client-certificate-data"`
			ClientKey             string         `yaml:"client-key"`
			ClientKeyData         string         `yaml:"client-key-data"`
			Exec                  map[string]any `yaml:"exec"`
			AuthProvider          map[string]any `yaml:"auth-provider"`
		} `yaml:"user"`
	} `yaml:"users"`
	Contexts []struct {
		Name    string `yaml:"name"`
		Context struct {
			Cluster string `yaml:"cluster"`
			User    string `yaml:"user"`
		} `yaml:"context"`
	} `yaml:"contexts"`
	CurrentContext string `yaml:"current-context"`
}

// loadKubeconfig reads the current context of a kubeconfig file: the
// server, its CA (or insecure-skip-tls-verify) and a bearer token or a
// client certificate. exec and auth-provider credentials are refused.
func loadKubeconfig(path string) (*client, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var kc kubeconfig
	if err := yaml.Unmarshal(b, &kc); err != nil {
		return nil, fmt.Errorf("not a kubeconfig: %w", err)
	}
	dir := filepath.Dir(path)
	rel := func(p string) string {
		if p != "" && !filepath.IsAbs(p) {
			return filepath.Join(dir, p)
		}
		return p
	}
	var ctxCluster, ctxUser string
	found := false
	for _, c := range kc.Contexts {
		if c.Name == kc.CurrentContext {
			ctxCluster, ctxUser, found = c.Context.Cluster, c.Context.User, true
		}
	}
	if !found {
		return nil, fmt.Errorf("no context %q (current-context)", kc.CurrentContext)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	c := &client{}
	found = false
	for _, cl := range kc.Clusters {
		if cl.Name != ctxCluster {
			continue
		}
		found = true
		c.server = strings.TrimSuffix(cl.Cluster.Server, "/")
		tc.InsecureSkipVerify, tc.ServerName = cl.Cluster.InsecureSkipTLSVerify, cl.Cluster.TLSServerName
		c.skipVerify = cl.Cluster.InsecureSkipTLSVerify
		ca, err := pemOf(cl.Cluster.CertificateAuthorityData, rel(cl.Cluster.CertificateAuthority))
		if err != nil {
			return nil, fmt.Errorf("cluster %q certificate-authority: %w", cl.Name, err)
		}
		if ca != nil {
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(ca) {
				return nil, fmt.Errorf("cluster %q: no certificate in its certificate-authority", cl.Name)
			}
		}
	}
	if !found || c.server == "" {
		return nil, fmt.Errorf("no server for cluster %q", ctxCluster)
	}
	for _, u := range kc.Users {
		if u.Name != ctxUser {
			continue
		}
		if u.User.Exec != nil || u.User.AuthProvider != nil {
			return nil, fmt.Errorf("user %q: exec and auth-provider credentials are not supported; use a token or a client certificate", u.Name)
		}
		c.token, c.tokenFile = u.User.Token, rel(u.User.TokenFile)
		cert, err := pemOf(u.User.ClientCertificateData, rel(u.User.ClientCertificate))
		if err != nil {
			return nil, fmt.Errorf("user %q client-certificate: %w", u.Name, err)
		}
		key, err := pemOf(u.User.ClientKeyData, rel(u.User.ClientKey))
		if err != nil {
			return nil, fmt.Errorf("user %q client-key: %w", u.Name, err)
		}
		if cert != nil || key != nil {
			pair, err := tls.X509KeyPair(cert, key)
			if err != nil {
				return nil, fmt.Errorf("user %q client certificate: %w", u.Name, err)
			}
			tc.Certificates = []tls.Certificate{pair}
		}
	}
	return c.withTLS(tc)
}

// pemOf returns base64 data decoded, else the file's contents, else nil.
func pemOf(data, file string) ([]byte, error) {
	switch {
	case data != "":
		return base64.StdEncoding.DecodeString(data)
	case file != "":
		return os.ReadFile(file)
	}
	return nil, nil
}

// The service account of a pod.
const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

var errNotInCluster = errors.New("--kube-subnet-mgr needs --kubeconfig, or to run in a pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set)")

// inCluster is the client of a pod: the API server of the
// KUBERNETES_SERVICE_* variables, the service account's token and CA.
func inCluster() (*client, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errNotInCluster
	}
	ca, err := os.ReadFile(filepath.Join(saDir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("in-cluster configuration: %w", err)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: x509.NewCertPool()}
	tc.RootCAs.AppendCertsFromPEM(ca)
	c := &client{server: "https://" + net.JoinHostPort(host, port), tokenFile: filepath.Join(saDir, "token")}
	return c.withTLS(tc)
}

func (c *client) withTLS(tc *tls.Config) (*client, error) {
	if u, err := url.Parse(c.server); err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, fmt.Errorf("server %q is not an http(s) URL", c.server)
	}
	c.watchIdle = watchIdle
	c.http = &http.Client{Transport: &http.Transport{
		TLSClientConfig:     tc,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		IdleConnTimeout:     90 * time.Second,
	}}
	return c, nil
}

// do sends a request and returns the response of a 2xx answer; any other
// is an *apiError.
func (c *client) do(ctx context.Context, method, path, contentType string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.server+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "uvxlan")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	token := c.token
	if c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("token: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	e := &apiError{Code: resp.StatusCode, Reason: resp.Status}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	json.Unmarshal(b, e) // a Status, usually; else the code is enough
	if e.Code == 0 {
		e.Code = resp.StatusCode
	}
	return nil, e
}

// listNodes lists every Node, page by page, and returns them (kept: see
// keep; those with more are logged by ignore and left out) with the
// list's resource version.
func (c *client) listNodes(ctx context.Context, ignore func(name string, err error)) (map[string]*node, string, error) {
	nodes := map[string]*node{}
	var meta listMeta
	for pages := 0; ; pages++ {
		if pages > maxNodes/listPage {
			return nil, "", fmt.Errorf("list of Nodes: %w", errTooManyNodes)
		}
		q := url.Values{"limit": {fmt.Sprint(listPage)}}
		if meta.Continue != "" {
			q.Set("continue", meta.Continue)
		}
		var err error
		if meta, err = c.listPage(ctx, q.Encode(), func(n *node) error {
			if !n.keep() {
				ignore(n.Metadata.Name, fmt.Errorf("what is read of it exceeds %d KiB", maxKeptBytes>>10))
				return nil
			}
			if len(nodes) >= maxNodes {
				return errTooManyNodes
			}
			nodes[n.Metadata.Name] = n
			return nil
		}); err != nil {
			return nil, "", fmt.Errorf("list of Nodes: %w", err)
		}
		if meta.Continue == "" {
			return nodes, meta.ResourceVersion, nil
		}
	}
}

// listPage gets one page of the list of Nodes and gives each to add as it
// is decoded.
func (c *client) listPage(ctx context.Context, query string, add func(*node) error) (listMeta, error) {
	ctx, cancel := context.WithTimeout(ctx, pageTimeout)
	defer cancel()
	var meta listMeta
	resp, err := c.do(ctx, http.MethodGet, "/api/v1/nodes?"+query, "", nil)
	if err != nil {
		return meta, err
	}
	defer resp.Body.Close()
	return decodePage(resp.Body, add)
}

// decodePage decodes a page of the list of Nodes, at most maxPageBytes,
// and gives each Node to add as it is decoded.
func decodePage(body io.Reader, add func(*node) error) (listMeta, error) {
	var meta listMeta
	// Each value (the metadata, a Node) ends within maxNodeBytes.
	r := &capReader{r: body, total: maxPageBytes, item: maxNodeBytes}
	dec := json.NewDecoder(r)
	if err := expect(dec, json.Delim('{')); err != nil {
		return meta, err
	}
	for dec.More() {
		r.item = dec.InputOffset() + maxNodeBytes
		t, err := dec.Token()
		if err != nil {
			return meta, err
		}
		switch t {
		case "metadata":
			err = dec.Decode(&meta)
		case "items":
			err = decodeItems(dec, r, add)
		default: // kind, apiVersion
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			return meta, err
		}
	}
	r.item = dec.InputOffset() + maxNodeBytes
	return meta, expect(dec, json.Delim('}'))
}

// decodeItems decodes the array of a list's items, one Node at a time, each
// at most maxNodeBytes.
func decodeItems(dec *json.Decoder, r *capReader, add func(*node) error) error {
	if t, err := dec.Token(); err != nil || t == nil { // null: no items
		return err
	} else if t != json.Delim('[') {
		return fmt.Errorf("items: %v, not an array", t)
	}
	for dec.More() {
		r.item = dec.InputOffset() + maxNodeBytes
		var n node
		if err := dec.Decode(&n); err != nil {
			return err
		}
		if err := add(&n); err != nil {
			return err
		}
	}
	return expect(dec, json.Delim(']'))
}

// expect reads the token want.
func expect(dec *json.Decoder, want json.Delim) error {
	t, err := dec.Token()
	if err == nil && t != want {
		err = fmt.Errorf("%v where %v was expected", t, want)
	}
	return err
}

// capReader reads r until total bytes, or until item (moved by its
// reader before each value it decodes: the offset where that value must
// end), and fails then with errPageTooLarge or errNodeTooLarge.
type capReader struct {
	r           io.Reader
	n           int64 // bytes read
	total, item int64
}

func (c *capReader) Read(p []byte) (int, error) {
	end := min(c.total, c.item)
	if c.n >= end {
		if end == c.item {
			return 0, errNodeTooLarge
		}
		return 0, errPageTooLarge
	}
	if int64(len(p)) > end-c.n {
		p = p[:end-c.n]
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// watchNodes opens a watch of the Nodes from resource version rv: a stream
// of watchEvents, which the server ends after watchTimeout. The watch ends
// with errWatchIdle when it brings nothing for c.watchIdle.
func (c *client) watchNodes(ctx context.Context, rv string) (*watchStream, error) {
	q := url.Values{"watch": {"1"}, "resourceVersion": {rv}, "allowWatchBookmarks": {"true"},
		"timeoutSeconds": {fmt.Sprint(int(watchTimeout.Seconds()))}}
	ctx, cancel := context.WithCancelCause(ctx)
	idle := time.AfterFunc(c.watchIdle, func() { cancel(errWatchIdle) })
	resp, err := c.do(ctx, http.MethodGet, "/api/v1/nodes?"+q.Encode(), "", nil)
	if err != nil {
		idle.Stop()
		cancel(nil)
		if errors.Is(context.Cause(ctx), errWatchIdle) {
			return nil, errWatchIdle
		}
		return nil, err
	}
	w := &watchStream{ctx: ctx, body: resp.Body, idle: idle, after: c.watchIdle, cancel: cancel}
	w.cap = capReader{r: w, total: math.MaxInt64}
	w.dec = json.NewDecoder(&w.cap)
	return w, nil
}

// watchStream is an open watch: its events, each at most maxNodeBytes,
// and its idle timer.
type watchStream struct {
	ctx    context.Context
	body   io.ReadCloser
	idle   *time.Timer
	after  time.Duration
	cancel context.CancelCauseFunc
	cap    capReader
	dec    *json.Decoder
}

// Read reads the body, and starts the idle time again when it brings
// something.
func (w *watchStream) Read(p []byte) (int, error) {
	n, err := w.body.Read(p)
	if n > 0 {
		w.idle.Reset(w.after)
	}
	if err != nil && errors.Is(context.Cause(w.ctx), errWatchIdle) {
		err = errWatchIdle
	}
	return n, err
}

// next decodes the next event; io.EOF when the server ended the watch.
func (w *watchStream) next(ev *watchEvent) error {
	w.cap.item = w.dec.InputOffset() + maxNodeBytes
	return w.dec.Decode(ev)
}

// Close ends the watch.
func (w *watchStream) Close() error {
	w.idle.Stop()
	w.cancel(nil)
	return w.body.Close()
}

// patchNode applies a strategic-merge patch to a Node, or to its status
// when subresource is "status".
func (c *client) patchNode(ctx context.Context, name, subresource string, patch []byte) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	path := "/api/v1/nodes/" + url.PathEscape(name)
	if subresource != "" {
		path += "/" + subresource
	}
	resp, err := c.do(ctx, http.MethodPatch, path, "application/strategic-merge-patch+json", patch)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}
