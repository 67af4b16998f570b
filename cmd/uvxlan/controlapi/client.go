package controlapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// Client talks to the agent listening on a control socket. Each request
// dials the socket anew, so that it reaches whichever agent listens there
// now (after a takeover, the successor), and is bounded by Timeout. A
// Client is safe for concurrent use.
type Client struct {
	path string
	hc   *http.Client
}

// Timeout bounds each request of a Client, its answer read included.
const Timeout = 5 * time.Second

// maxAnswer bounds the answer a Client reads.
const maxAnswer = 64 << 20

// NewClient returns a Client of the control socket at path.
func NewClient(path string) *Client {
	return &Client{path: path, hc: &http.Client{
		Timeout: Timeout,
		Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}},
	}}
}

// WithTimeout returns a Client of the same socket whose requests are
// bounded by d instead of Timeout.
func (c *Client) WithTimeout(d time.Duration) *Client {
	hc := *c.hc
	hc.Timeout = d
	return &Client{path: c.path, hc: &hc}
}

// Do sends a request to /v1/<what> (a path and query, such as
// "fdb?vni=7") with body, when not nil, as JSON, and returns the raw JSON
// answer. An answer other than 200 is an error with its text; an agent
// that does not answer is an error saying so.
func (c *Client) Do(ctx context.Context, method, what string, body any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://uvxlan/v1/"+what, rd)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) || isDialError(err) {
			return nil, fmt.Errorf("no agent answers on %s (is `uvxlan run` running with this --control?): %w", c.path, err)
		}
		return nil, fmt.Errorf("control socket %s: %w", c.path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", c.path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("agent refused: %s", strings.TrimSpace(string(raw)))
	}
	return raw, nil
}

// isDialError reports whether err happened while connecting (nobody
// listens, or the socket is stale).
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// Get fetches /v1/<what> and returns the raw JSON answer.
func (c *Client) Get(ctx context.Context, what string) ([]byte, error) {
	return c.Do(ctx, http.MethodGet, what, nil)
}

// GetInto fetches /v1/<what>, decodes it into v and returns it raw too.
func (c *Client) GetInto(ctx context.Context, what string, v any) ([]byte, error) {
	raw, err := c.Get(ctx, what)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return nil, fmt.Errorf("control socket %s: bad %s answer: %w", c.path, what, err)
	}
	return raw, nil
}

// Status returns GET /v1/status, decoded and raw.
func (c *Client) Status(ctx context.Context) (Status, []byte, error) {
	var v Status
	raw, err := c.GetInto(ctx, "status", &v)
	return v, raw, err
}

// FDB returns GET /v1/fdb, decoded and raw.
func (c *Client) FDB(ctx context.Context) ([]FDBRow, []byte, error) {
	var v []FDBRow
	raw, err := c.GetInto(ctx, "fdb", &v)
	return v, raw, err
}

// Neigh returns GET /v1/neigh, decoded and raw.
func (c *Client) Neigh(ctx context.Context) ([]NeighRow, []byte, error) {
	var v []NeighRow
	raw, err := c.GetInto(ctx, "neigh", &v)
	return v, raw, err
}

// Members returns GET /v1/members, decoded and raw.
func (c *Client) Members(ctx context.Context) ([]Member, []byte, error) {
	var v []Member
	raw, err := c.GetInto(ctx, "members", &v)
	return v, raw, err
}

// Stats returns GET /v1/stats, decoded and raw.
func (c *Client) Stats(ctx context.Context) (Stats, []byte, error) {
	var v Stats
	raw, err := c.GetInto(ctx, "stats", &v)
	return v, raw, err
}
