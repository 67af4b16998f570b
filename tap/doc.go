// Package tap opens and configures Linux TAP devices and reads and writes
// Ethernet frames in batches.
//
// With Config.Offload the TAP carries a virtio-net header and the kernel's
// checksum and segmentation offloads are on: Read cuts the 64 KB TCP and UDP
// super-frames the kernel hands over into MTU-sized frames (GSOSplit), and
// Write coalesces consecutive segments of a flow into super-frames (GRO)
// that the kernel takes in one write. The offload primitives allocate
// nothing per frame and are usable and tested on their own: VirtioNetHdr,
// Checksum and GSOSplit are pure functions; GRO is a type that keeps its
// scratch space (and whether UDP is coalesced) between batches, so one
// GRO serves one writer at a time.
//
// Checksums left partial (partial.go): Write recognises a TCP or UDP
// checksum its sender left partial and hands the frame to the kernel as
// needing one; after LeavePartial, Read leaves partial those the kernel
// left for the TAP to finish, and CompletePartial finishes one for a
// receiver that does not take them.
//
// The engine sees only the Device interface, so it can be tested with a fake.
package tap
