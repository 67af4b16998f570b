// Package tap opens and configures Linux TAP devices and reads and writes
// Ethernet frames in batches.
//
// The engine sees only the Device interface, so it can be tested with a fake.
package tap
