// Command ociimage writes OCI image layouts (a folder: oci-layout,
// index.json, blobs/) with go-containerregistry building the manifests, the
// configs and the digests. hack/build-image-tarball.sh uses it for the
// image's final stage without Docker, hack/build-image-index.sh for the
// multi-platform index the release pushes; built by hack/install-tool.sh.
//
// Image mode: a single-layer image. The layer holds exactly the entries
// given, with the owner and mode given and one modification time, in path
// order, so the same inputs give the same digests. Parent folders not given
// are added as root-owned 0755. Prints "REPO:TAG MANIFEST-DIGEST".
//
//	ociimage -out DIR -name REPO:TAG -created UNIX-SECONDS \
//	  -entry 'file /bin/tool 0755 0:0 path/to/tool' -entry 'dir /tmp 1777 0:0' \
//	  -user 65532:65532 -entrypoint /bin/tool -cmd arg -env K=V -label K=V
//
// Index mode: the images of single-image layouts (each a layout tar, as
// hack/build-image-tarball.sh writes it, or a layout folder) as one OCI
// image index, the one entry of a new layout's index.json, named REPO:TAG as
// image mode names an image. Each image is taken as it is, blobs and
// manifest bytes unchanged, so its manifest digest in the index is its
// digest in its own layout: the image that was tested is the one pushed. Its
// platform is its config's os, architecture and variant; an image whose
// config names no os or architecture, two images of one platform, and an
// input whose blobs do not match their digests are refused. Entries are in
// platform order, so the same images give the same bytes in any argument
// order. Prints "PLATFORM MANIFEST-DIGEST" for each image, then
// "REPO:TAG INDEX-DIGEST".
//
//	ociimage -index -out DIR -name REPO:TAG LAYOUT.tar|LAYOUT-DIR...
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
	"path/filepath"
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
	"github.com/google/go-containerregistry/pkg/v1/validate"
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
	index := flag.Bool("index", false, "index mode: the images of the layouts given as arguments as one image index")
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
	if *index {
		// An image flag would be silently ignored: the index only names
		// what its images already are.
		var extra []string
		flag.Visit(func(f *flag.Flag) {
			if f.Name != "index" && f.Name != "out" && f.Name != "name" {
				extra = append(extra, "-"+f.Name)
			}
		})
		if len(extra) != 0 {
			return fmt.Errorf("-index takes no %s: the images are indexed as they are", strings.Join(extra, " "))
		}
		if *out == "" || *ref == "" || flag.NArg() == 0 {
			flag.Usage()
			return fmt.Errorf("-index takes -out, -name and one layout or more")
		}
		return runIndex(*out, *ref, flag.Args())
	}
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
	if err := p.AppendImage(img,
		layout.WithAnnotations(refAnnotations(tag)),
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

// refAnnotations names an image or an index in index.json. Both names:
// containerd's import reads the full reference from the first, other OCI
// tools read the tag from the second (as `docker save` writes them).
func refAnnotations(tag name.Tag) map[string]string {
	return map[string]string{
		"io.containerd.image.name":          tag.Name(),
		"org.opencontainers.image.ref.name": tag.TagStr(),
	}
}

// platformImage is the one image of an input layout and where it came from.
type platformImage struct {
	src      string
	platform v1.Platform
	image    v1.Image
	digest   v1.Hash
}

// untar unpacks a layout tar into dst: its folders and regular files only,
// each inside dst.
func untar(src, dst string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
		rel := path.Clean(h.Name)
		if !filepath.IsLocal(rel) {
			return fmt.Errorf("%s: %q is outside the layout", src, h.Name)
		}
		target := filepath.Join(dst, rel)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			w, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				return fmt.Errorf("%s: %w", src, err)
			}
			_, err = io.Copy(w, tr)
			if cerr := w.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: %q is neither a file nor a folder", src, h.Name)
		}
	}
}

// loadImage reads the one image of the layout src (a tar, unpacked into
// tmp, or a folder), checked against its digests, with the platform its
// config names.
func loadImage(src, tmp string) (platformImage, error) {
	st, err := os.Stat(src)
	if err != nil {
		return platformImage{}, err
	}
	dir := src
	if !st.IsDir() {
		if err := untar(src, tmp); err != nil {
			return platformImage{}, err
		}
		dir = tmp
	}
	marker, err := os.ReadFile(filepath.Join(dir, "oci-layout"))
	if err != nil {
		return platformImage{}, fmt.Errorf("%s: not an OCI image layout: %w", src, err)
	}
	if !strings.Contains(string(marker), `"imageLayoutVersion"`) {
		return platformImage{}, fmt.Errorf("%s: oci-layout is %q", src, marker)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return platformImage{}, fmt.Errorf("%s: %w", src, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return platformImage{}, fmt.Errorf("%s: %w", src, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return platformImage{}, fmt.Errorf("%s: index.json: %w", src, err)
	}
	if len(m.Manifests) != 1 || !m.Manifests[0].MediaType.IsImage() {
		return platformImage{}, fmt.Errorf("%s: index.json should name one image manifest, it names %d entries", src, len(m.Manifests))
	}
	desc := m.Manifests[0]
	img, err := idx.Image(desc.Digest)
	if err != nil {
		return platformImage{}, fmt.Errorf("%s: %w", src, err)
	}
	// Every blob against its digest and size, the manifest's bytes against
	// the digest index.json gives (which the layout's image reports as its
	// own): a damaged input is refused, never copied into the index.
	if err := validate.Image(img); err != nil {
		return platformImage{}, fmt.Errorf("%s: %w", src, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return platformImage{}, fmt.Errorf("%s: %w", src, err)
	}
	if cf.OS == "" || cf.Architecture == "" {
		return platformImage{}, fmt.Errorf("%s: the image config names no platform (os %q, architecture %q)", src, cf.OS, cf.Architecture)
	}
	plat := v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant, OSVersion: cf.OSVersion}
	if desc.Platform != nil && desc.Platform.String() != plat.String() {
		return platformImage{}, fmt.Errorf("%s: index.json says %s, the image config %s", src, desc.Platform, &plat)
	}
	return platformImage{src: src, platform: plat, image: img, digest: desc.Digest}, nil
}

// runIndex is index mode: the images of the layouts srcs as one index in a
// new layout out, named ref.
func runIndex(out, ref string, srcs []string) error {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return err
	}
	if _, err := os.Stat(out); err == nil {
		return fmt.Errorf("%s exists", out)
	}
	tmp, err := os.MkdirTemp("", "ociimage-index-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	var imgs []platformImage
	for i, src := range srcs {
		pi, err := loadImage(src, filepath.Join(tmp, strconv.Itoa(i)))
		if err != nil {
			return err
		}
		imgs = append(imgs, pi)
	}
	sort.SliceStable(imgs, func(a, b int) bool { return imgs[a].platform.String() < imgs[b].platform.String() })
	for i := 1; i < len(imgs); i++ {
		if imgs[i].platform.String() == imgs[i-1].platform.String() {
			return fmt.Errorf("%s and %s are both %s images: one image a platform", imgs[i-1].src, imgs[i].src, &imgs[i].platform)
		}
	}

	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	adds := make([]mutate.IndexAddendum, 0, len(imgs))
	for _, pi := range imgs {
		plat := pi.platform
		adds = append(adds, mutate.IndexAddendum{Add: pi.image, Descriptor: v1.Descriptor{Platform: &plat}})
	}
	idx = mutate.AppendManifests(idx, adds...)

	// What the index says of each image is what its own layout said.
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for i, d := range m.Manifests {
		if d.Digest != imgs[i].digest || d.MediaType != types.OCIManifestSchema1 {
			return fmt.Errorf("%s: %s %s in the index, %s %s in its layout", imgs[i].src, d.MediaType, d.Digest, types.OCIManifestSchema1, imgs[i].digest)
		}
	}

	p, err := layout.Write(out, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(refAnnotations(tag))); err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	for _, pi := range imgs {
		fmt.Printf("%s %s\n", &pi.platform, pi.digest)
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
