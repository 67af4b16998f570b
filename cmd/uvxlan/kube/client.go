package kube

// A small client of the API server: what the subnet manager needs of
// Nodes (list, watch, patch) over HTTPS and JSON, and the credentials of a
// kubeconfig or of a pod's service account. Not client-go: its typed
// clientset and scheme register every API group at start, which cost
// every agent, Kubernetes or not, ~40 MB of memory and 64 MB of binary.

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

type nodeList struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Items []node `json:"items"`
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
	server    string // https://host:port
	http      *http.Client
	token     string
	tokenFile string // read at every request (service account tokens rotate)
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

// listNodes lists every Node.
func (c *client) listNodes(ctx context.Context) (*nodeList, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := c.do(ctx, http.MethodGet, "/api/v1/nodes", "", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var l nodeList
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return nil, fmt.Errorf("list of Nodes: %w", err)
	}
	return &l, nil
}

// watchNodes opens a watch of the Nodes from resource version rv: a stream
// of watchEvents, which the server ends after a few minutes.
func (c *client) watchNodes(ctx context.Context, rv string) (io.ReadCloser, error) {
	q := url.Values{"watch": {"1"}, "resourceVersion": {rv}, "allowWatchBookmarks": {"true"}, "timeoutSeconds": {"290"}}
	resp, err := c.do(ctx, http.MethodGet, "/api/v1/nodes?"+q.Encode(), "", nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
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
