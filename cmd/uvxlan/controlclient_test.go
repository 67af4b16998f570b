package main

import (
	"context"
	"time"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/controlapi"
)

// The tests' short names for the control API (controlapi), which they
// used when its types and client were package main's: the tests read
// agents through controlapi.Client, with a background context (each
// request is bounded by controlapi.Timeout).
type (
	fdbRow    = controlapi.FDBRow
	neighRow  = controlapi.NeighRow
	memberRow = controlapi.Member
	statsView = controlapi.Stats
)

// testClient is a controlapi.Client without contexts, whose requests get
// a minute: one answer slower than controlapi.Timeout (5 s) on a machine
// at load 30 failed TestPartialChecksumsOnlyToTakers, which asserts what
// the agent counts, not how fast it answers.
type testClient struct{ c *controlapi.Client }

func newControlClient(path string) testClient {
	return testClient{controlapi.NewClient(path).WithTimeout(time.Minute)}
}

func (t testClient) get(what string) ([]byte, error) { return t.c.Get(context.Background(), what) }

func (t testClient) getInto(what string, v any) ([]byte, error) {
	return t.c.GetInto(context.Background(), what, v)
}

func (t testClient) fdb() ([]fdbRow, []byte, error)        { return t.c.FDB(context.Background()) }
func (t testClient) neigh() ([]neighRow, []byte, error)    { return t.c.Neigh(context.Background()) }
func (t testClient) members() ([]memberRow, []byte, error) { return t.c.Members(context.Background()) }
func (t testClient) stats() (statsView, []byte, error)     { return t.c.Stats(context.Background()) }
