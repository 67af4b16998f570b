package main

import "runtime/debug"

// release is the version `make build` and `make image` stamp in
// (-ldflags "-X main.release=$(VERSION)"), the image's tag; a plain go
// build says "dev".
var release = "dev"

// versionString is what `uvxlan --version` prints after "uvxlan version":
// the release, then the VCS revision when Go recorded one, such as
// "0.1.0 (9e50f98d21ab+dirty)".
func versionString() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return release
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value[:min(len(s.Value), 12)]
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev == "" {
		return release
	}
	return release + " (" + rev + dirty + ")"
}
