package gossip

import (
	"errors"
	"fmt"
	"strings"
)

// ErrKeyMismatch is wrapped by the error Run returns when the node's join
// failed on every seed because of the gossip key: a seed could not decrypt
// our messages or we could not decrypt its answer (different keys), or one
// side encrypts and the other does not. Retrying cannot help.
var ErrKeyMismatch = errors.New("gossip key mismatch")

// keyMismatch returns an error wrapping ErrKeyMismatch when every error of
// a failed join (memberlist's Join, one error per seed address tried) is
// about the key, and nil otherwise: a seed that is down or unreachable may
// yet come up, so the join is retried.
func (n *Node) keyMismatch(joinErr error, seeds int) error {
	if joinErr == nil || seeds == 0 {
		return nil
	}
	errs := []error{joinErr}
	if m, ok := joinErr.(interface{ WrappedErrors() []error }); ok {
		errs = m.WrappedErrors()
	}
	if len(errs) == 0 {
		return nil
	}
	for _, e := range errs {
		if !isKeyError(e) {
			return nil
		}
	}
	ours := "this node encrypts gossip with its key"
	if !n.Encrypted() {
		ours = "this node gossips without a key (--insecure-gossip)"
	}
	return fmt.Errorf("gossip: %w: every seed refused the join: %s, and the seeds use another key or none (%v); give every node the same key (--gossip-key-file)",
		ErrKeyMismatch, ours, errs[0])
}

// isKeyError reports whether a per-seed join error of memberlist is about
// encryption (see memberlist's readStream and decryptPayload).
func isKeyError(err error) bool {
	s := err.Error()
	return strings.Contains(s, "no installed keys could decrypt") ||
		strings.Contains(s, "remote state is encrypted and encryption is not configured") ||
		strings.Contains(s, "encryption is configured but remote state is not encrypted")
}
