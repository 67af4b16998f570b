// Package fdb implements uvxlan's forwarding tables: (VNI, MAC) → VTEP with an
// origin (local, learned, static), ageing of learned entries, a size cap, and
// the per-VNI flood list used for head-end replication.
//
// Reads on the packet path (Lookup, Flood, and Learn refreshing an entry that
// already points at the same VTEP) never take a lock and never allocate;
// writers never make readers wait.
package fdb
