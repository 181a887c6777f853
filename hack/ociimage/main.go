// Command ociimage writes a single-layer image as an OCI image layout
// (a folder: oci-layout, index.json, blobs/), with go-containerregistry
// building the manifest, the config and the digests. hack/build-image-tarball.sh
// uses it for the image's final stage without Docker; built by
// hack/install-tool.sh.
//
// The layer holds exactly the entries given, with the owner and mode given
// and one modification time, in path order, so the same inputs give the
// same digests. Parent folders not given are added as root-owned 0755.
//
//	ociimage -out DIR -name REPO:TAG -created UNIX-SECONDS \
//	  -entry 'file /bin/tool 0755 0:0 path/to/tool' -entry 'dir /tmp 1777 0:0' \
//	  -user 65532:65532 -entrypoint /bin/tool -cmd arg -env K=V -label K=V
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

// entry is one path of the layer: a regular file read from src, or a folder.
type entry struct {
	dir      bool
	path     string // absolute, in the image
	mode     int64
	uid, gid int
	src      string
}

func parseEntry(spec string) (entry, error) {
	f := strings.Fields(spec)
	bad := fmt.Errorf("-entry %q: want 'file PATH MODE UID:GID SRC' or 'dir PATH MODE UID:GID'", spec)
	if len(f) < 4 || (f[0] == "file") != (len(f) == 5) || (f[0] != "file" && f[0] != "dir") {
		return entry{}, bad
	}
	mode, err := strconv.ParseInt(f[2], 8, 64)
	if err != nil || mode&^0o7777 != 0 {
		return entry{}, bad
	}
	uid, gid, ok := strings.Cut(f[3], ":")
	if !ok {
		return entry{}, bad
	}
	e := entry{dir: f[0] == "dir", path: path.Clean(f[1]), mode: mode}
	if !path.IsAbs(e.path) || e.path == "/" {
		return entry{}, bad
	}
	if e.uid, err = strconv.Atoi(uid); err != nil {
		return entry{}, bad
	}
	if e.gid, err = strconv.Atoi(gid); err != nil {
		return entry{}, bad
	}
	if !e.dir {
		e.src = f[4]
	}
	return e, nil
}

// layerTar is the uncompressed layer: the entries and their missing parents.
func layerTar(entries []entry, mtime time.Time) ([]byte, error) {
	byPath := map[string]entry{}
	for _, e := range entries {
		if _, dup := byPath[e.path]; dup {
			return nil, fmt.Errorf("%s given twice", e.path)
		}
		byPath[e.path] = e
	}
	for _, e := range entries {
		for p := path.Dir(e.path); p != "/"; p = path.Dir(p) {
			if _, ok := byPath[p]; !ok {
				byPath[p] = entry{dir: true, path: p, mode: 0o755}
			} else if !byPath[p].dir {
				return nil, fmt.Errorf("%s is a file and a parent of %s", p, e.path)
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		e := byPath[p]
		h := &tar.Header{
			Name:    strings.TrimPrefix(p, "/"),
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: mtime,
			Format:  tar.FormatPAX,
		}
		var data []byte
		if e.dir {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		} else {
			var err error
			if data, err = os.ReadFile(e.src); err != nil {
				return nil, err
			}
			h.Typeflag, h.Size = tar.TypeReg, int64(len(data))
		}
		if err := tw.WriteHeader(h); err != nil {
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

func run() error {
	var entries, entrypoint, cmd, env, labels list
	out := flag.String("out", "", "OCI image layout folder to write (must not exist)")
	ref := flag.String("name", "", "image reference, REPOSITORY:TAG")
	created := flag.Int64("created", 0, "creation time and every modification time, Unix seconds")
	osName := flag.String("os", "linux", "platform OS")
	arch := flag.String("arch", "amd64", "platform architecture")
	user := flag.String("user", "", "config User")
	workdir := flag.String("workdir", "", "config WorkingDir")
	createdBy := flag.String("created-by", "", "history entry of the layer")
	flag.Var(&entries, "entry", "'file PATH MODE UID:GID SRC' or 'dir PATH MODE UID:GID' (repeated)")
	flag.Var(&entrypoint, "entrypoint", "an Entrypoint element (repeated, in order)")
	flag.Var(&cmd, "cmd", "a Cmd element (repeated, in order)")
	flag.Var(&env, "env", "an Env entry, K=V (repeated)")
	flag.Var(&labels, "label", "a label, K=V (repeated)")
	flag.Parse()
	if *out == "" || *ref == "" || flag.NArg() != 0 {
		flag.Usage()
		return fmt.Errorf("-out and -name are required, and nothing else")
	}
	tag, err := name.NewTag(*ref, name.StrictValidation)
	if err != nil {
		return err
	}
	if _, err := os.Stat(*out); err == nil {
		return fmt.Errorf("%s exists", *out)
	}

	var parsed []entry
	for _, spec := range entries {
		e, err := parseEntry(spec)
		if err != nil {
			return err
		}
		parsed = append(parsed, e)
	}
	when := time.Unix(*created, 0).UTC()
	data, err := layerTar(parsed, when)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(
		func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer),
		tarball.WithCompressionLevel(gzip.DefaultCompression),
	)
	if err != nil {
		return err
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: when}, CreatedBy: *createdBy},
	})
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = *osName, *arch, v1.Time{Time: when}
	cf.Config.User, cf.Config.WorkingDir = *user, *workdir
	cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.Env = entrypoint, cmd, env
	cf.Config.Labels = map[string]string{}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return fmt.Errorf("-label %q: want K=V", l)
		}
		cf.Config.Labels[k] = v
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}

	p, err := layout.Write(*out, empty.Index)
	if err != nil {
		return err
	}
	// Both names: containerd's import reads the full reference from the
	// first, other OCI tools read the tag from the second (as `docker save`
	// writes them).
	if err := p.AppendImage(img,
		layout.WithAnnotations(map[string]string{
			"io.containerd.image.name":          tag.Name(),
			"org.opencontainers.image.ref.name": tag.TagStr(),
		}),
		layout.WithPlatform(v1.Platform{OS: *osName, Architecture: *arch}),
	); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s\n", tag.Name(), digest)
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}
