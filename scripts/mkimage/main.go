// Command mkimage writes a container image, as a docker-archive tarball
// (what `docker save` wrote before Docker 25: manifest.json, the image
// config and one uncompressed layer), from files on disk, without a
// registry, a daemon or a shell. `ctr images import` and `podman load`
// accept it. `make image` runs it on the static agent and CNI plugin:
//
//	go run ./scripts/mkimage -o bin/uvxlan-image.tar -tag ghcr.io/uvxlan/uvxlan:0.1.0 \
//	    -entrypoint /usr/local/bin/uvxlan \
//	    bin/image/uvxlan=/usr/local/bin/uvxlan bin/image/uvxlan-cni=/usr/local/bin/uvxlan-cni
//
// Each argument SRC=DST puts the file SRC at DST in the image, mode 0755,
// owned by root; the directories above DST are made (0755). Every time
// stamp is the Unix epoch (or $SOURCE_DATE_EPOCH), so the same files give
// the same image, byte for byte. The tag must name a version: ":latest"
// (or no tag, which means it) is refused, since a kubelet always pulls it.
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	out := flag.String("o", "", "write the tarball to `FILE`")
	tag := flag.String("tag", "", "the image's name and tag, such as ghcr.io/uvxlan/uvxlan:0.1.0")
	entry := flag.String("entrypoint", "", "the image's entrypoint `PATH` (optional)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: mkimage -o FILE -tag NAME:TAG [-entrypoint PATH] SRC=DST...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *out == "" || *tag == "" || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	img := Image{Tag: *tag, Created: epoch()}
	if *entry != "" {
		img.Entrypoint = []string{*entry}
	}
	for _, a := range flag.Args() {
		src, dst, ok := strings.Cut(a, "=")
		if !ok || src == "" || !path.IsAbs(dst) {
			fmt.Fprintf(os.Stderr, "mkimage: %q: want SRC=DST with DST an absolute path in the image\n", a)
			os.Exit(2)
		}
		img.Files = append(img.Files, File{Src: src, Dst: dst})
	}
	if err := img.Check(); err != nil {
		fmt.Fprintf(os.Stderr, "mkimage: %v\n", err)
		os.Exit(2)
	}
	if err := writeFile(*out, img); err != nil {
		fmt.Fprintf(os.Stderr, "mkimage: %v\n", err)
		os.Exit(1)
	}
}

// epoch is $SOURCE_DATE_EPOCH, or the Unix epoch.
func epoch() time.Time {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return time.Unix(n, 0).UTC()
		}
	}
	return time.Unix(0, 0).UTC()
}

// File is one file of the image.
type File struct {
	Src string // on disk
	Dst string // absolute path in the image
}

// Image is what Write puts in the tarball.
type Image struct {
	Tag        string // registry/name:tag
	Entrypoint []string
	Created    time.Time
	Files      []File
}

// tagRE is a reference with a tag: a name of lower-case components
// (optionally a registry host with a port), ':' and a tag (Docker's
// grammar: [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}).
var tagRE = regexp.MustCompile(`^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*:([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})$`)

// Check refuses a tag that is not a versioned reference and paths that
// are not absolute.
func (img Image) Check() error {
	m := tagRE.FindStringSubmatch(img.Tag)
	if m == nil {
		return fmt.Errorf("-tag %q: want NAME:TAG, such as ghcr.io/uvxlan/uvxlan:0.1.0", img.Tag)
	}
	if m[1] == "latest" {
		return fmt.Errorf("-tag %q: a version, not latest (a kubelet always pulls :latest)", img.Tag)
	}
	if len(img.Files) == 0 {
		return errors.New("no files")
	}
	for _, f := range img.Files {
		if !path.IsAbs(f.Dst) || path.Clean(f.Dst) != f.Dst || f.Dst == "/" {
			return fmt.Errorf("%q: not a clean absolute file path", f.Dst)
		}
	}
	return nil
}

func writeFile(name string, img Image) error {
	f, err := os.CreateTemp(path.Dir(name), ".mkimage-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := Write(f, img); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(f.Name(), name)
}

// Write writes img to w as a docker-archive:
//
//	manifest.json                [{"Config":"<config digest>.json","RepoTags":[tag],"Layers":["<layer digest>/layer.tar"]}]
//	<config digest>.json         the image config: entrypoint, rootfs.diff_ids
//	<layer digest>/layer.tar     the files, an uncompressed tar
//
// It checks img first.
func Write(w io.Writer, img Image) error {
	if err := img.Check(); err != nil {
		return err
	}
	layer, err := layerTar(img)
	if err != nil {
		return err
	}
	layerSum := sha256.Sum256(layer)
	layerHex := hex.EncodeToString(layerSum[:])
	config, err := json.Marshal(imageConfig{
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Created:      img.Created,
		Config: containerConfig{
			Entrypoint: img.Entrypoint,
			Env:        []string{"PATH=/usr/local/bin"},
			Labels:     map[string]string{"org.opencontainers.image.version": tagOf(img.Tag)},
		},
		RootFS:  rootFS{Type: "layers", DiffIDs: []string{"sha256:" + layerHex}},
		History: []history{{Created: img.Created, CreatedBy: "scripts/mkimage"}},
	})
	if err != nil {
		return err
	}
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	manifest, err := json.Marshal([]manifestEntry{{Config: configName, RepoTags: []string{img.Tag},
		Layers: []string{layerHex + "/layer.tar"}}})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	entries := []struct {
		name string
		data []byte
	}{{layerHex + "/", nil}, {layerHex + "/layer.tar", layer}, {configName, config}, {"manifest.json", manifest}}
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: img.Created, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if strings.HasSuffix(e.name, "/") {
			hdr.Mode, hdr.Typeflag = 0o755, tar.TypeDir
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// tagOf returns the tag of a reference Check accepted.
func tagOf(ref string) string { return ref[strings.LastIndexByte(ref, ':')+1:] }

// layerTar returns the layer: the directories above each file, then the
// files, in path order.
func layerTar(img Image) ([]byte, error) {
	dirs := map[string]bool{}
	for _, f := range img.Files {
		for d := path.Dir(f.Dst); d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	names := make([]string, 0, len(dirs))
	for d := range dirs {
		names = append(names, d)
	}
	slices.Sort(names)
	files := slices.Clone(img.Files)
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Dst, b.Dst) })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range names {
		hdr := &tar.Header{Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: img.Created, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
	}
	for i, f := range files {
		if i > 0 && files[i-1].Dst == f.Dst {
			return nil, fmt.Errorf("%s given twice", f.Dst)
		}
		if dirs[f.Dst] {
			return nil, fmt.Errorf("%s is both a file and a directory", f.Dst)
		}
		data, err := os.ReadFile(f.Src)
		if err != nil {
			return nil, err
		}
		hdr := &tar.Header{Name: strings.TrimPrefix(f.Dst, "/"), Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg, ModTime: img.Created, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// The docker-archive's JSON: manifest.json's entries and the image
// config (the OCI image spec's, which Docker's is).
type (
	manifestEntry struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	imageConfig struct {
		Architecture string          `json:"architecture"`
		OS           string          `json:"os"`
		Created      time.Time       `json:"created"`
		Config       containerConfig `json:"config"`
		RootFS       rootFS          `json:"rootfs"`
		History      []history       `json:"history"`
	}
	containerConfig struct {
		Entrypoint []string          `json:"Entrypoint,omitempty"`
		Env        []string          `json:"Env"`
		Labels     map[string]string `json:"Labels,omitempty"`
	}
	rootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	}
	history struct {
		Created   time.Time `json:"created"`
		CreatedBy string    `json:"created_by"`
	}
)
