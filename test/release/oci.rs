//! An OCI image layout tar, read back: its index, manifest and config (or,
//! for a multi-platform image, its image index and each image's), every
//! blob checked against its digest and size, and the files of its layers
//! with their type, mode and owner.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use aws_lc_rs::digest::{SHA256, digest};
use serde_json::Value;

/// One entry of a tar: its type, mode, owner and, for a file, its bytes.
#[derive(Debug, Clone)]
pub struct Entry {
    pub dir: bool,
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub data: Vec<u8>,
}

/// A tar's entries by absolute path, folders without their trailing `/`.
fn entries(reader: impl Read) -> BTreeMap<String, Entry> {
    let mut archive = tar::Archive::new(reader);
    let mut out = BTreeMap::new();
    for entry in archive.entries().expect("a tar") {
        let mut entry = entry.expect("a tar entry");
        let header = entry.header().clone();
        let kind = header.entry_type();
        assert!(
            kind.is_file() || kind.is_dir(),
            "unexpected {kind:?} in the tar"
        );
        let path = format!(
            "/{}",
            entry
                .path()
                .expect("a path")
                .to_string_lossy()
                .trim_end_matches('/')
        );
        let mut data = Vec::new();
        entry.read_to_end(&mut data).expect("entry data");
        let e = Entry {
            dir: kind.is_dir(),
            mode: header.mode().expect("a mode"),
            uid: header.uid().expect("a uid"),
            gid: header.gid().expect("a gid"),
            data,
        };
        assert!(
            out.insert(path.clone(), e).is_none(),
            "{path} twice in the tar"
        );
    }
    out
}

/// The OCI digest of `data`: `sha256:` and its SHA-256 in hex.
pub fn sha256(data: &[u8]) -> String {
    let d = digest(&SHA256, data);
    format!(
        "sha256:{}",
        d.as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    )
}

/// The media types OCI gives an index, a manifest, a config and a layer.
pub const INDEX: &str = "application/vnd.oci.image.index.v1+json";
const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// One image of an OCI layout tar: how it is named, its manifest (bytes and
/// digest), its config and its filesystem.
pub struct Image {
    /// The annotations of the descriptor naming it.
    pub annotations: Value,
    pub digest: String,
    pub manifest: Vec<u8>,
    pub config: Value,
    pub files: BTreeMap<String, Entry>,
}

/// One platform's image of an image index.
pub struct PlatformImage {
    /// The descriptor's `platform`, as the index says it.
    pub platform: Value,
    pub image: Image,
}

/// The image index of an OCI layout tar: how it is named, its digest and
/// its images in its order.
pub struct ImageIndex {
    pub annotations: Value,
    pub digest: String,
    pub images: Vec<PlatformImage>,
}

/// The entries of an OCI image layout tar; every blob read through it is
/// checked against its descriptor's digest, size and media type.
struct Layout<'a> {
    tarball: &'a Path,
    entries: BTreeMap<String, Entry>,
}

impl<'a> Layout<'a> {
    fn open(tarball: &'a Path) -> Self {
        let file =
            std::fs::File::open(tarball).unwrap_or_else(|e| panic!("{}: {e}", tarball.display()));
        let layout = Layout {
            tarball,
            entries: entries(file),
        };
        assert_eq!(layout.json("/oci-layout")["imageLayoutVersion"], "1.0.0");
        layout
    }

    fn json(&self, path: &str) -> Value {
        let e = self
            .entries
            .get(path)
            .unwrap_or_else(|| panic!("{}: no {path}", self.tarball.display()));
        serde_json::from_slice(&e.data).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn blob(&self, descriptor: &Value, media_type: &str) -> &[u8] {
        assert_eq!(descriptor["mediaType"], media_type, "{descriptor}");
        let digest = descriptor["digest"].as_str().expect("a digest");
        let path = format!("/blobs/{}", digest.replace(':', "/"));
        let data = &self
            .entries
            .get(&path)
            .unwrap_or_else(|| panic!("{}: {path} is missing", self.tarball.display()))
            .data;
        assert_eq!(sha256(data), digest, "{path}: content and name differ");
        assert_eq!(
            Some(data.len() as u64),
            descriptor["size"].as_u64(),
            "{path}: size"
        );
        data
    }

    /// The one descriptor of index.json.
    fn root(&self) -> Value {
        let index = self.json("/index.json");
        assert_eq!(index["mediaType"], INDEX);
        let [descriptor] = index["manifests"].as_array().expect("manifests").as_slice() else {
            panic!(
                "{}: index.json should name one image or index: {index}",
                self.tarball.display()
            );
        };
        descriptor.clone()
    }

    /// The image a manifest descriptor names, with every layer unpacked.
    fn image(&self, descriptor: &Value) -> Image {
        let manifest = self.blob(descriptor, MANIFEST).to_vec();
        let parsed: Value = serde_json::from_slice(&manifest).unwrap();
        let config: Value = serde_json::from_slice(self.blob(&parsed["config"], CONFIG)).unwrap();
        let layers = parsed["layers"].as_array().expect("layers");
        let diff_ids = config["rootfs"]["diff_ids"].as_array().expect("diff_ids");
        assert_eq!(layers.len(), diff_ids.len(), "one diff_id a layer");
        let mut files = BTreeMap::new();
        for (layer, diff_id) in layers.iter().zip(diff_ids) {
            let mut tar = Vec::new();
            flate2::read::GzDecoder::new(self.blob(layer, LAYER))
                .read_to_end(&mut tar)
                .expect("a gzip layer");
            assert_eq!(
                sha256(&tar),
                diff_id.as_str().unwrap(),
                "diff_id of {}",
                layer["digest"]
            );
            files.extend(entries(tar.as_slice()));
        }
        Image {
            annotations: descriptor["annotations"].clone(),
            digest: descriptor["digest"].as_str().expect("a digest").to_string(),
            manifest,
            config,
            files,
        }
    }
}

/// Read an OCI image layout tar of one image, checking on the way that
/// every blob it names is there with that digest and size, and the media
/// types are OCI's.
pub fn read_image(tarball: &Path) -> Image {
    let layout = Layout::open(tarball);
    let descriptor = layout.root();
    let image = layout.image(&descriptor);
    assert_eq!(descriptor["platform"]["os"], image.config["os"]);
    assert_eq!(
        descriptor["platform"]["architecture"],
        image.config["architecture"]
    );
    image
}

/// Read an OCI image layout tar of one image index and its images, with
/// the same checks as [`read_image`]. Whether each image is of the
/// platform its entry says is left to the caller.
pub fn read_index(tarball: &Path) -> ImageIndex {
    let layout = Layout::open(tarball);
    let descriptor = layout.root();
    let index: Value = serde_json::from_slice(layout.blob(&descriptor, INDEX)).unwrap();
    assert_eq!(index["mediaType"], INDEX, "the index blob's media type");
    let images = index["manifests"]
        .as_array()
        .expect("manifests")
        .iter()
        .map(|entry| PlatformImage {
            platform: entry["platform"].clone(),
            image: layout.image(entry),
        })
        .collect();
    ImageIndex {
        annotations: descriptor["annotations"].clone(),
        digest: descriptor["digest"].as_str().expect("a digest").to_string(),
        images,
    }
}
