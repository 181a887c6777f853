//! The multi-platform image the release pushes (`hack/build-image-index.sh`:
//! the single-platform tarballs of `hack/build-image-tarball.sh` as one OCI
//! image index). What a user pulling it depends on: it holds exactly the
//! platforms the release builds, each image is of the platform its entry
//! says, its binaries are built for that platform's processor (by their ELF
//! header: an x86-64 binary in the arm64 image would fail on every arm64
//! node with "exec format error"), and its linux/amd64 image is the very
//! image the other tests read (test/release/image.rs), manifest byte for
//! byte: what is released is what was tested.
//!
//! The index read is `HCP_IMAGE_INDEX_TARBALL` when set (hack/test.sh: the
//! index of the release binaries' tarballs, with `HCP_IMAGE_TARBALL` its
//! linux/amd64 tarball), else one built here from stand-in binaries: tiny
//! static ELF executables of each architecture, written by hand.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::oci::{ImageIndex, read_image, read_index, sha256};
use crate::{root, run_ok};

/// The platforms the release builds, each with the ELF machine (`e_machine`)
/// of its binaries and that machine's name.
pub const PLATFORMS: &[(&str, u16, &str)] = &[("amd64", 62, "x86-64"), ("arm64", 183, "AArch64")];

/// The binaries every image carries (the Dockerfile's COPYs).
const BINARIES: &[&str] = &["/hcp-ingress", "/hcp-ingress-proxy"];

/// What every stand-in image and index is packed with: fixed, so that two
/// packs of the same binaries give the same bytes.
const PACK_ENV: &[(&str, &str)] = &[
    ("SOURCE_DATE_EPOCH", "1700000000"),
    ("REVISION", "0000000"),
    ("TAG", "v0.0.0-test"),
];

/// The machine of a 64-bit little-endian ELF file, from its header (the
/// identification bytes and `e_machine`, at offset 18); else why not.
fn elf_machine(data: &[u8]) -> Result<u16, String> {
    if data.len() < 64 || !data.starts_with(b"\x7fELF") {
        return Err("not an ELF file".into());
    }
    if data[4] != 2 {
        return Err(format!("ELF class {}, not 64-bit (2)", data[4]));
    }
    if data[5] != 1 {
        return Err(format!(
            "ELF data encoding {}, not little-endian (1)",
            data[5]
        ));
    }
    Ok(u16::from_le_bytes([data[18], data[19]]))
}

/// The name of an ELF machine, for messages.
fn machine_name(machine: u16) -> String {
    match PLATFORMS.iter().find(|(_, m, _)| *m == machine) {
        Some((_, _, name)) => (*name).to_string(),
        None => format!("machine {machine}"),
    }
}

/// `os/architecture[/variant]` of a platform object.
fn platform_name(platform: &serde_json::Value) -> String {
    let field = |k: &str| platform[k].as_str().unwrap_or("?").to_string();
    match platform["variant"].as_str() {
        Some(variant) => format!("{}/{}/{variant}", field("os"), field("architecture")),
        None => format!("{}/{}", field("os"), field("architecture")),
    }
}

/// Everything wrong with `index` for a user, in words naming the platform
/// (and the file): every platform of [`PLATFORMS`], once, and no other; each
/// image's config of its entry's platform; the binaries of each image ELF
/// executables of its architecture.
fn problems(index: &ImageIndex) -> Vec<String> {
    let mut out = Vec::new();
    let name = index.annotations["io.containerd.image.name"]
        .as_str()
        .unwrap_or_default();
    let tag = index.annotations["org.opencontainers.image.ref.name"]
        .as_str()
        .unwrap_or_default();
    if tag.is_empty() || !name.ends_with(&format!(":{tag}")) {
        out.push(format!(
            "the index is not named REPO:TAG: {}",
            index.annotations
        ));
    }
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for entry in &index.images {
        let platform = platform_name(&entry.platform);
        *seen.entry(platform.clone()).or_default() += 1;
        let config = platform_name(&entry.image.config);
        if config != platform {
            out.push(format!(
                "{platform}: the image's config says {config} (manifest {})",
                entry.image.digest
            ));
        }
        let arch = entry.platform["architecture"].as_str().unwrap_or_default();
        let Some(&(_, machine, machine_label)) = PLATFORMS
            .iter()
            .find(|(a, _, _)| entry.platform["os"] == "linux" && *a == arch)
        else {
            out.push(format!("{platform}: not a platform the release builds"));
            continue;
        };
        for bin in BINARIES {
            match entry.image.files.get(*bin) {
                None => out.push(format!("{platform}: {bin} is not in the image")),
                Some(e) if e.dir => out.push(format!("{platform}: {bin} is a folder")),
                Some(e) => match elf_machine(&e.data) {
                    Ok(m) if m == machine => {}
                    Ok(m) => out.push(format!(
                        "{platform}: {bin} is built for {} (ELF e_machine {m}), want \
                         {machine_label} ({machine})",
                        machine_name(m)
                    )),
                    Err(why) => out.push(format!("{platform}: {bin}: {why}")),
                },
            }
        }
    }
    for (platform, n) in &seen {
        if *n > 1 {
            out.push(format!("{platform}: {n} images in the index, want one"));
        }
    }
    for (arch, _, _) in PLATFORMS {
        let platform = format!("linux/{arch}");
        if !seen.contains_key(&platform) {
            out.push(format!("{platform}: not in the index"));
        }
    }
    out
}

fn scratch(name: &str) -> PathBuf {
    crate::scratch("index", name)
}

/// A tiny static ELF executable for `machine` (62 or 183): the ELF header,
/// one loadable segment, and code that exits with status 0. It is what
/// `file` and a loader read of a real binary, not a real binary.
fn stand_in_elf(machine: u16) -> Vec<u8> {
    const BASE: u64 = 0x40_0000;
    const HEADERS: u64 = 64 + 56;
    let code: &[u8] = match machine {
        // xor edi, edi; mov eax, 60 (exit); syscall
        62 => &[0x31, 0xff, 0xb8, 0x3c, 0, 0, 0, 0x0f, 0x05],
        // mov x0, #0; mov x8, #93 (exit); svc #0
        183 => &[
            0x00, 0x00, 0x80, 0xd2, 0xa8, 0x0b, 0x80, 0xd2, 0x01, 0x00, 0x00, 0xd4,
        ],
        other => panic!("no stand-in code for ELF machine {other}"),
    };
    let size = HEADERS + code.len() as u64;
    let mut elf = Vec::new();
    // e_ident: magic, 64-bit, little-endian, version 1, System V ABI.
    elf.extend_from_slice(b"\x7fELF\x02\x01\x01\x00");
    elf.extend_from_slice(&[0; 8]);
    elf.extend_from_slice(&2u16.to_le_bytes()); // e_type: ET_EXEC
    elf.extend_from_slice(&machine.to_le_bytes());
    elf.extend_from_slice(&1u32.to_le_bytes()); // e_version
    elf.extend_from_slice(&(BASE + HEADERS).to_le_bytes()); // e_entry
    elf.extend_from_slice(&64u64.to_le_bytes()); // e_phoff
    elf.extend_from_slice(&0u64.to_le_bytes()); // e_shoff: no sections
    elf.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    for half in [64u16, 56, 1, 64, 0, 0] {
        // e_ehsize, e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx
        elf.extend_from_slice(&half.to_le_bytes());
    }
    // The one program header: PT_LOAD of the whole file, readable and
    // executable.
    elf.extend_from_slice(&1u32.to_le_bytes());
    elf.extend_from_slice(&5u32.to_le_bytes());
    for word in [0, BASE, BASE, size, size, 0x1000u64] {
        // p_offset, p_vaddr, p_paddr, p_filesz, p_memsz, p_align
        elf.extend_from_slice(&word.to_le_bytes());
    }
    assert_eq!(elf.len() as u64, HEADERS);
    elf.extend_from_slice(code);
    elf
}

/// Pack stand-ins for both binaries, ELF executables for `machine`, as the
/// image of `arch` with hack/build-image-tarball.sh; returns the tarball.
fn pack_stand_ins(name: &str, machine: u16, arch: &str) -> PathBuf {
    let mut env = vec![("ARCH", arch)];
    env.extend_from_slice(PACK_ENV);
    crate::pack_stand_ins(&scratch(name), |_| stand_in_elf(machine), &env)
}

/// The stand-in image of `arch` (one of [`PLATFORMS`]), packed once.
fn stand_in(arch: &str) -> &'static Path {
    static PACKED: OnceLock<BTreeMap<&str, PathBuf>> = OnceLock::new();
    PACKED.get_or_init(|| {
        PLATFORMS
            .iter()
            .map(|&(arch, machine, _)| {
                (
                    arch,
                    pack_stand_ins(&format!("stand-in-{arch}"), machine, arch),
                )
            })
            .collect()
    })[arch]
        .as_path()
}

/// Run hack/build-image-index.sh on `inputs` into `out`: its stdout, or its
/// stderr when it fails.
fn build_index(out: &Path, inputs: &[&Path]) -> Result<String, String> {
    let output = Command::new("bash")
        .arg("hack/build-image-index.sh")
        .args(inputs)
        .current_dir(root())
        .env("OUT", out)
        .envs(PACK_ENV.iter().copied())
        .output()
        .expect("bash runs");
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// The index built from `inputs` (which it must accept), read back.
fn index_of(name: &str, inputs: &[&Path]) -> ImageIndex {
    let out = scratch(name).join("index.oci.tar");
    let stdout = build_index(&out, inputs)
        .unwrap_or_else(|stderr| panic!("hack/build-image-index.sh failed:\n{stderr}"));
    assert_eq!(
        stdout.trim(),
        out.to_str().unwrap(),
        "it prints the tarball"
    );
    read_index(&out)
}

/// The tarballs under test: the index and its linux/amd64 image as the
/// other tests read it (`HCP_IMAGE_INDEX_TARBALL` and `HCP_IMAGE_TARBALL`),
/// else stand-ins packed and indexed once.
fn tarballs() -> &'static (PathBuf, PathBuf) {
    static TARBALLS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    TARBALLS.get_or_init(|| match std::env::var_os("HCP_IMAGE_INDEX_TARBALL") {
        Some(index) => {
            let image = std::env::var_os("HCP_IMAGE_TARBALL").expect(
                "HCP_IMAGE_INDEX_TARBALL is set without HCP_IMAGE_TARBALL, its linux/amd64 image",
            );
            (root().join(index), root().join(image))
        }
        None => {
            let inputs: Vec<&Path> = PLATFORMS.iter().map(|(a, _, _)| stand_in(a)).collect();
            let out = scratch("stand-ins").join("index.oci.tar");
            if let Err(stderr) = build_index(&out, &inputs) {
                panic!("hack/build-image-index.sh failed:\n{stderr}");
            }
            (out, stand_in("amd64").to_path_buf())
        }
    })
}

#[test]
fn the_index_holds_each_platforms_image_built_for_it() {
    let (tarball, _) = tarballs();
    // Reading it checks every blob against its digest and size.
    let index = read_index(tarball);
    let found = problems(&index);
    assert!(
        found.is_empty(),
        "{} (index {}):\n  {}",
        tarball.display(),
        index.digest,
        found.join("\n  ")
    );
    let platforms: BTreeSet<String> = index
        .images
        .iter()
        .map(|e| platform_name(&e.platform))
        .collect();
    let want: BTreeSet<String> = PLATFORMS
        .iter()
        .map(|(arch, _, _)| format!("linux/{arch}"))
        .collect();
    assert_eq!(platforms, want);
}

#[test]
fn the_indexs_amd64_image_is_the_tested_image() {
    let (tarball, tested) = tarballs();
    let image = read_image(tested);
    let index = read_index(tarball);
    let amd64: Vec<_> = index
        .images
        .iter()
        .filter(|e| platform_name(&e.platform) == "linux/amd64")
        .collect();
    let [entry] = amd64.as_slice() else {
        panic!(
            "{}: want one linux/amd64 image, found {}",
            tarball.display(),
            amd64.len()
        );
    };
    assert_eq!(
        entry.image.digest,
        image.digest,
        "the index's linux/amd64 manifest ({}) is not the tested image's ({})",
        tarball.display(),
        tested.display()
    );
    assert!(
        entry.image.manifest == image.manifest,
        "same digest, other manifest bytes"
    );
}

/// The check itself: an image whose binaries are of another architecture
/// than its platform is reported, naming the platform and each binary.
#[test]
fn an_image_of_another_architectures_binaries_is_reported() {
    let wrong = pack_stand_ins("arm64-of-x86-64", 62, "arm64");
    let index = index_of("arm64-of-x86-64", &[stand_in("amd64"), &wrong]);
    let found = problems(&index);
    for bin in BINARIES {
        let expect = format!("linux/arm64: {bin} is built for x86-64");
        assert!(
            found.iter().any(|p| p.starts_with(&expect)),
            "not reported as {expect:?}: {found:?}"
        );
    }
    assert_eq!(found.len(), BINARIES.len(), "{found:?}");
}

/// The check itself: an index without the arm64 image is reported.
#[test]
fn an_index_without_arm64_is_reported() {
    let index = index_of("amd64-only", &[stand_in("amd64")]);
    assert_eq!(problems(&index), ["linux/arm64: not in the index"]);
}

/// Same images, same bytes, in whichever order they are given; and the
/// manifests are the images', unchanged.
#[test]
fn the_same_images_index_to_the_same_bytes() {
    let (amd64, arm64) = (stand_in("amd64"), stand_in("arm64"));
    let a = scratch("reproducible-a").join("index.oci.tar");
    let b = scratch("reproducible-b").join("index.oci.tar");
    build_index(&a, &[amd64, arm64]).unwrap_or_else(|e| panic!("{e}"));
    build_index(&b, &[arm64, amd64]).unwrap_or_else(|e| panic!("{e}"));
    let (a, b) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert!(
        a == b,
        "two indexes of the same images differ: {} and {}",
        sha256(&a),
        sha256(&b)
    );
    let index = read_index(&scratch("reproducible-a").join("index.oci.tar"));
    let digests: Vec<&str> = index
        .images
        .iter()
        .map(|e| e.image.digest.as_str())
        .collect();
    assert_eq!(
        digests,
        [read_image(amd64).digest, read_image(arm64).digest],
        "in platform order, each the image's own digest"
    );
    assert_eq!(
        index.annotations["io.containerd.image.name"],
        "ghcr.io/hcp-ingress/hcp-ingress:v0.0.0-test"
    );
}

/// What cannot be one index is refused, with the file named: two images of
/// one platform, an image whose config names no platform, a missing tarball.
#[test]
fn what_an_index_cannot_hold_is_refused() {
    let amd64 = stand_in("amd64");
    let out = scratch("refused").join("index.oci.tar");
    let err = build_index(&out, &[amd64, amd64]).expect_err("two linux/amd64 images");
    assert!(
        err.contains("both linux/amd64 images") && err.contains(amd64.to_str().unwrap()),
        "{err}"
    );

    let tool = run_ok(
        Command::new("bash")
            .args(["hack/install-tool.sh", "ociimage"])
            .current_dir(root()),
        "hack/install-tool.sh ociimage",
    );
    let tool = String::from_utf8(tool.stdout).unwrap();
    let nowhere = scratch("refused").join("no-platform");
    run_ok(
        Command::new(tool.trim())
            .arg("-out")
            .arg(&nowhere)
            .args(["-name", "example.com/x:y", "-os", "", "-arch", ""])
            .args(["-entry", "dir /tmp 1777 0:0"]),
        "ociimage, an image without platform",
    );
    let err = build_index(&out, &[&nowhere]).expect_err("an image without platform");
    assert!(
        err.contains("names no platform") && err.contains(nowhere.to_str().unwrap()),
        "{err}"
    );

    let missing = scratch("refused").join("missing.oci.tar");
    let err = build_index(&out, &[amd64, &missing]).expect_err("a missing tarball");
    assert!(
        err.contains(&format!("{} is missing", missing.display())),
        "{err}"
    );
    assert!(!out.exists(), "a refused index is not written");
}
