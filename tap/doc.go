// Package tap opens and configures Linux TAP devices and reads and writes
// Ethernet frames in batches.
//
// With Config.Offload the TAP carries a virtio-net header and the kernel's
// checksum and segmentation offloads are on: Read cuts the 64 KB TCP and UDP
// super-frames the kernel hands over into MTU-sized frames (GSOSplit), and
// Write coalesces consecutive segments of a flow into super-frames (GRO)
// that the kernel takes in one write. The offload primitives (VirtioNetHdr,
// Checksum, GSOSplit, GRO) are pure functions that allocate nothing, usable
// and tested on their own.
//
// The engine sees only the Device interface, so it can be tested with a fake.
package tap
