//! An OCI image layout tar, read back: its index, manifest and config, every
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

/// The image of an OCI layout tar: its config and its filesystem.
pub struct Image {
    pub annotations: Value,
    pub config: Value,
    pub files: BTreeMap<String, Entry>,
}

/// Read an OCI image layout tar, checking on the way that every blob it
/// names is there with that digest and size, and the media types are OCI's.
pub fn read_image(tarball: &Path) -> Image {
    let file =
        std::fs::File::open(tarball).unwrap_or_else(|e| panic!("{}: {e}", tarball.display()));
    let layout = entries(file);
    let json = |path: &str| -> Value {
        let e = layout
            .get(path)
            .unwrap_or_else(|| panic!("{}: no {path}", tarball.display()));
        serde_json::from_slice(&e.data).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let blob = |descriptor: &Value, media_type: &str| -> Vec<u8> {
        assert_eq!(descriptor["mediaType"], media_type, "{descriptor}");
        let digest = descriptor["digest"].as_str().expect("a digest");
        let path = format!("/blobs/{}", digest.replace(':', "/"));
        let data = &layout
            .get(&path)
            .unwrap_or_else(|| panic!("{path} is missing"))
            .data;
        assert_eq!(sha256(data), digest, "{path}: content and name differ");
        assert_eq!(
            Some(data.len() as u64),
            descriptor["size"].as_u64(),
            "{path}: size"
        );
        data.clone()
    };
    assert_eq!(json("/oci-layout")["imageLayoutVersion"], "1.0.0");
    let index = json("/index.json");
    assert_eq!(
        index["mediaType"],
        "application/vnd.oci.image.index.v1+json"
    );
    let [descriptor] = index["manifests"].as_array().expect("manifests").as_slice() else {
        panic!("index.json should name one image: {index}");
    };
    let manifest: Value = serde_json::from_slice(&blob(
        descriptor,
        "application/vnd.oci.image.manifest.v1+json",
    ))
    .unwrap();
    let config: Value = serde_json::from_slice(&blob(
        &manifest["config"],
        "application/vnd.oci.image.config.v1+json",
    ))
    .unwrap();
    let layers = manifest["layers"].as_array().expect("layers");
    let diff_ids = config["rootfs"]["diff_ids"].as_array().expect("diff_ids");
    assert_eq!(layers.len(), diff_ids.len(), "one diff_id a layer");
    let mut files = BTreeMap::new();
    for (layer, diff_id) in layers.iter().zip(diff_ids) {
        let compressed = blob(layer, "application/vnd.oci.image.layer.v1.tar+gzip");
        let mut tar = Vec::new();
        flate2::read::GzDecoder::new(compressed.as_slice())
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
    assert_eq!(descriptor["platform"]["os"], config["os"]);
    assert_eq!(
        descriptor["platform"]["architecture"],
        config["architecture"]
    );
    Image {
        annotations: descriptor["annotations"].clone(),
        config,
        files,
    }
}
