package fdb

// Test-only API: what the tests ask of the tables that the agent never
// does.

import "slices"

// Subnets returns the subnet bindings.
func (n *Neighbors) Subnets() []SubnetNeigh {
	if s := n.subnets.Load(); s != nil {
		return slices.Clone(*s)
	}
	return nil
}
