//! The image without Docker (`hack/build-image-tarball.sh`, an OCI image
//! layout in a tar) against the Dockerfile's final stage, as a Dockerfile
//! parser reads it: every file the stage COPYs is in the image at that path,
//! owned as Docker would own it, and readable and executable by the image's
//! user; the stage's USER, ENTRYPOINT, CMD and LABELs are the image config's;
//! and what the stage's base (distroless/static-debian12:nonroot) gives, the
//! tarball gives too. Change one side only and these tests fail.
//!
//! The tarball read is `HCP_IMAGE_TARBALL` when set (hack/test.sh: the one
//! packed from the release binaries), else one packed here from stand-in
//! binaries: the layout and the config do not depend on the binaries' bytes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use dockerfile_parser::{Dockerfile, Instruction, ShellOrExecExpr};
use serde_json::Value;

use crate::oci::{Entry, Image, read_image, sha256};
use crate::root;

/// The base the tarball stands in for: its users, folders and environment
/// are written by hack/build-image-tarball.sh, not pulled.
const BASE: &str = "gcr.io/distroless/static-debian12:nonroot";
/// Labels added at build time (hack/build-image.sh, the release workflow,
/// hack/build-image-tarball.sh), not in the Dockerfile.
const BUILD_LABELS: &[&str] = &[
    "org.opencontainers.image.version",
    "org.opencontainers.image.revision",
];

/// What the Dockerfile's final stage says the image is.
#[derive(Debug, Default, Clone)]
struct FinalStage {
    base: String,
    /// Destination path → (`--chmod`, `--chown`) of each file it COPYs.
    copies: BTreeMap<String, (Option<String>, Option<String>)>,
    user: Option<String>,
    entrypoint: Option<Vec<String>>,
    cmd: Option<Vec<String>>,
    labels: BTreeMap<String, String>,
}

fn exec_form(what: &str, expr: &ShellOrExecExpr) -> Vec<String> {
    match expr.as_exec() {
        Some(array) => array.as_str_vec().into_iter().map(String::from).collect(),
        // The shell form runs /bin/sh, which distroless does not have.
        None => panic!("the Dockerfile's {what} is in shell form: the image has no shell"),
    }
}

fn final_stage(text: &str) -> FinalStage {
    let dockerfile = Dockerfile::parse(text).unwrap_or_else(|e| panic!("Dockerfile: {e}"));
    let stages = dockerfile.stages();
    let stage = stages.iter().last().expect("the Dockerfile has a stage");
    let mut out = FinalStage::default();
    for instruction in &stage.instructions {
        match instruction {
            Instruction::From(from) => out.base = from.image.content.clone(),
            Instruction::Copy(copy) => {
                let flag = |name: &str| {
                    copy.flags
                        .iter()
                        .find(|f| f.name.content == name)
                        .map(|f| f.value.content.clone())
                };
                let dest = copy.destination.content.clone();
                let into_folder = dest.ends_with('/') || copy.sources.len() > 1;
                for source in &copy.sources {
                    let path = if into_folder {
                        let name = Path::new(&source.content).file_name().expect("a file name");
                        format!("{}/{}", dest.trim_end_matches('/'), name.to_string_lossy())
                    } else {
                        dest.clone()
                    };
                    out.copies.insert(path, (flag("chmod"), flag("chown")));
                }
            }
            Instruction::Label(label) => {
                for l in &label.labels {
                    out.labels
                        .insert(l.name.content.clone(), l.value.content.clone());
                }
            }
            Instruction::Entrypoint(e) => out.entrypoint = Some(exec_form("ENTRYPOINT", &e.expr)),
            Instruction::Cmd(c) => out.cmd = Some(exec_form("CMD", &c.expr)),
            Instruction::Misc(m) if m.instruction.content.eq_ignore_ascii_case("user") => {
                out.user = Some(m.arguments.to_string().trim().to_string());
            }
            other => panic!(
                "the Dockerfile's final stage has {other:?}: hack/build-image-tarball.sh does not \
                 do that (teach it, then this test)"
            ),
        }
    }
    out
}

fn dockerfile_text() -> String {
    std::fs::read_to_string(root().join("Dockerfile")).expect("Dockerfile")
}

/// Packs stand-ins for both binaries (scripts that say so) with
/// hack/build-image-tarball.sh and `env`; returns the tarball.
fn pack_stand_ins(name: &str, env: &[(&str, &str)]) -> PathBuf {
    crate::pack_stand_ins(
        &crate::scratch("image", name),
        |bin| format!("#!/bin/sh\necho stand-in for {bin}\n").into_bytes(),
        env,
    )
}

/// The tarball under test: `HCP_IMAGE_TARBALL`, else stand-ins packed once.
fn tarball() -> &'static Path {
    static TARBALL: OnceLock<PathBuf> = OnceLock::new();
    TARBALL.get_or_init(|| match std::env::var_os("HCP_IMAGE_TARBALL") {
        Some(path) => root().join(path),
        None => pack_stand_ins("stand-ins", &[]),
    })
}

fn image() -> &'static Image {
    static IMAGE: OnceLock<Image> = OnceLock::new();
    IMAGE.get_or_init(|| read_image(tarball()))
}

/// The ids (third field) of a passwd or group file of the image.
fn ids(image: &Image, file: &str) -> BTreeSet<u64> {
    let text = image.files.get(file).map_or(&[][..], |e| &e.data);
    String::from_utf8_lossy(text)
        .lines()
        .filter_map(|line| line.split(':').nth(2)?.parse().ok())
        .collect()
}

/// `uid:gid`, numeric: the kubelet can verify `runAsNonRoot` only for a
/// numeric user.
fn numeric(spec: &str) -> Option<(u64, u64)> {
    let (uid, gid) = spec.split_once(':')?;
    Some((uid.parse().ok()?, gid.parse().ok()?))
}

/// Whether `uid:gid` may read and execute (search, for a folder) `entry`.
fn can_read_and_execute(entry: &Entry, uid: u64, gid: u64) -> bool {
    let shift = if entry.uid == uid {
        6
    } else if entry.gid == gid {
        3
    } else {
        0
    };
    uid == 0 || (entry.mode >> shift) & 0o5 == 0o5
}

/// Every difference between the final stage and the image, in words.
fn differences(stage: &FinalStage, image: &Image) -> Vec<String> {
    let mut out = Vec::new();
    let config = &image.config["config"];
    if stage.base != BASE {
        out.push(format!(
            "FROM {}: hack/build-image-tarball.sh stands in for {BASE} (its passwd, group, \
             home, /tmp, PATH, SSL_CERT_FILE)",
            stage.base
        ));
    }

    let user = stage.user.clone().unwrap_or_default();
    if config["User"] != user.as_str() {
        out.push(format!(
            "USER {user:?}, image config User {}",
            config["User"]
        ));
    }
    let Some((uid, gid)) = numeric(&user) else {
        out.push(format!("USER {user:?}: not a numeric uid:gid"));
        return out;
    };
    if !ids(image, "/etc/passwd").contains(&uid) || !ids(image, "/etc/group").contains(&gid) {
        out.push(format!(
            "USER {user}: not in the image's /etc/passwd and /etc/group"
        ));
    }

    let strings = |v: &Value| -> Option<Vec<String>> {
        v.as_array().map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or_default().to_string())
                .collect()
        })
    };
    if strings(&config["Entrypoint"]) != stage.entrypoint {
        out.push(format!(
            "ENTRYPOINT {:?}, image config Entrypoint {}",
            stage.entrypoint, config["Entrypoint"]
        ));
    }
    if strings(&config["Cmd"]) != stage.cmd {
        out.push(format!(
            "CMD {:?}, image config Cmd {}",
            stage.cmd, config["Cmd"]
        ));
    }

    let labels: BTreeMap<String, String> = config["Labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    for (k, v) in &stage.labels {
        match labels.get(k) {
            Some(got) if got == v => {}
            got => out.push(format!("LABEL {k}={v:?}, image config {got:?}")),
        }
    }
    for k in labels.keys() {
        if !stage.labels.contains_key(k) && !BUILD_LABELS.contains(&k.as_str()) {
            out.push(format!("image label {k} is not in the Dockerfile"));
        }
    }

    let executable = |path: &str, out: &mut Vec<String>| {
        let ancestors = path
            .match_indices('/')
            .map(|(i, _)| &path[..i])
            .filter(|p| !p.is_empty());
        for dir in ancestors {
            match image.files.get(dir) {
                Some(e) if e.dir && can_read_and_execute(e, uid, gid) => {}
                Some(e) => out.push(format!(
                    "{dir} ({:o}, {}:{}) cannot be searched by {uid}:{gid}",
                    e.mode, e.uid, e.gid
                )),
                None => out.push(format!("{dir} is missing (parent of {path})")),
            }
        }
    };
    for (path, (chmod, chown)) in &stage.copies {
        let Some(entry) = image.files.get(path) else {
            out.push(format!("COPY to {path}: not in the image"));
            continue;
        };
        if entry.dir {
            out.push(format!("COPY to {path}: a folder in the image"));
            continue;
        }
        // COPY without --chown makes root the owner; --chmod sets the mode.
        let owner = chown.as_deref().map_or(Some((0, 0)), numeric);
        if owner != Some((entry.uid, entry.gid)) {
            out.push(format!(
                "{path}: owned by {}:{}, COPY gives {}",
                entry.uid,
                entry.gid,
                chown.as_deref().unwrap_or("0:0")
            ));
        }
        if let Some(mode) = chmod
            && u32::from_str_radix(mode, 8).ok() != Some(entry.mode & 0o7777)
        {
            out.push(format!(
                "{path}: mode {:o}, COPY --chmod={mode}",
                entry.mode
            ));
        }
        if !can_read_and_execute(entry, uid, gid) {
            out.push(format!(
                "{path} ({:o}, {}:{}) cannot be read and executed by {uid}:{gid}",
                entry.mode, entry.uid, entry.gid
            ));
        }
        executable(path, &mut out);
    }

    // What the base gives: a home the user owns as working folder, a
    // world-writable sticky /tmp, and CA certificates where SSL_CERT_FILE says.
    let workdir = config["WorkingDir"].as_str().unwrap_or_default();
    match image.files.get(workdir) {
        Some(e) if e.dir && e.uid == uid => {}
        _ => out.push(format!(
            "WorkingDir {workdir:?} is not a folder the user {uid} owns"
        )),
    }
    match image.files.get("/tmp") {
        Some(e) if e.dir && e.mode & 0o7777 == 0o1777 => {}
        e => out.push(format!("/tmp is not a 1777 folder: {e:?}")),
    }
    let env: Vec<&str> = config["Env"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let certs = env
        .iter()
        .find_map(|e| e.strip_prefix("SSL_CERT_FILE="))
        .unwrap_or("/etc/ssl/certs/ca-certificates.crt");
    match image.files.get(certs) {
        Some(e)
            if String::from_utf8_lossy(&e.data)
                .matches("-----BEGIN CERTIFICATE-----")
                .count()
                > 100 => {}
        _ => out.push(format!("{certs} does not hold the CA certificates")),
    }
    if !env.iter().any(|e| e.starts_with("PATH=")) {
        out.push("no PATH in the image config's Env".into());
    }
    if image.config["os"] != "linux" || image.config["architecture"] != "amd64" {
        out.push(format!(
            "platform {}/{}, want linux/amd64",
            image.config["os"], image.config["architecture"]
        ));
    }
    out
}

#[test]
fn the_image_tarball_is_the_dockerfiles_final_stage() {
    let stage = final_stage(&dockerfile_text());
    assert!(
        !stage.copies.is_empty(),
        "the final stage copies nothing: {stage:?}"
    );
    let found = differences(&stage, image());
    assert!(
        found.is_empty(),
        "{} and the Dockerfile's final stage differ (change hack/build-image-tarball.sh and the Dockerfile together):\n  {}",
        tarball().display(),
        found.join("\n  ")
    );
    // The reference containerd's import names the image by.
    let name = image().annotations["io.containerd.image.name"]
        .as_str()
        .unwrap_or_default();
    let tag = image().annotations["org.opencontainers.image.ref.name"]
        .as_str()
        .unwrap_or_default();
    assert!(
        !tag.is_empty() && name.ends_with(&format!(":{tag}")),
        "{}",
        image().annotations
    );
}

/// The check itself: each kind of change on the Dockerfile's side alone is
/// reported against the same image.
#[test]
fn a_dockerfile_changed_alone_is_reported() {
    let text = dockerfile_text();
    let changes: &[(&str, &str, &str)] = &[
        ("USER 65532:65532", "USER 0:0", "USER"),
        (
            r#"ENTRYPOINT ["/hcp-ingress"]"#,
            r#"ENTRYPOINT ["/hcp-ingress-proxy"]"#,
            "ENTRYPOINT",
        ),
        (r#"CMD ["controller"]"#, r#"CMD ["proxy"]"#, "CMD"),
        (
            "USER 65532:65532",
            "COPY --from=build /hcp-ingress /usr/bin/hcp-ingress\nUSER 65532:65532",
            "/usr/bin/hcp-ingress: not in the image",
        ),
        (
            "USER 65532:65532",
            "LABEL org.opencontainers.image.vendor=\"hcp-ingress\"\nUSER 65532:65532",
            "LABEL org.opencontainers.image.vendor",
        ),
        (
            "COPY --from=build /hcp-ingress-proxy /hcp-ingress-proxy",
            "COPY --from=build --chmod=0700 /hcp-ingress-proxy /hcp-ingress-proxy",
            "--chmod=0700",
        ),
    ];
    for (from, to, expect) in changes {
        assert!(
            text.contains(from),
            "the Dockerfile no longer has {from:?}: update this test"
        );
        let found = differences(&final_stage(&text.replacen(from, to, 1)), image());
        assert!(
            found.iter().any(|d| d.contains(expect)),
            "changing {from:?} to {to:?} was not reported as {expect:?}: {found:?}"
        );
    }
}

#[test]
fn the_same_binaries_pack_to_the_same_bytes() {
    let env = [
        ("SOURCE_DATE_EPOCH", "1700000000"),
        ("REVISION", "0000000"),
        ("TAG", "v0.0.0-test"),
    ];
    let a = std::fs::read(pack_stand_ins("reproducible-a", &env)).unwrap();
    let b = std::fs::read(pack_stand_ins("reproducible-b", &env)).unwrap();
    assert!(
        a == b,
        "two packs of the same inputs differ: {} and {}",
        sha256(&a),
        sha256(&b)
    );
    let image = read_image(&crate::scratch("image", "reproducible-a").join("image.oci.tar"));
    assert_eq!(image.config["created"], "2023-11-14T22:13:20Z");
    assert_eq!(
        image.annotations["io.containerd.image.name"],
        "ghcr.io/hcp-ingress/hcp-ingress:v0.0.0-test"
    );
}

/// Both builds of the binaries embed their dependency list with the same
/// cargo-auditable: the Dockerfile's pin and hack/install-tool.sh's.
#[test]
fn the_dockerfile_and_the_scripts_build_with_the_same_cargo_auditable() {
    let text = dockerfile_text();
    let dockerfile = Dockerfile::parse(&text).expect("Dockerfile");
    let pinned: BTreeSet<String> = dockerfile
        .instructions
        .iter()
        .filter_map(|i| match i {
            Instruction::Arg(arg) if arg.name.content == "CARGO_AUDITABLE_VERSION" => {
                arg.value.as_ref().map(|v| v.content.clone())
            }
            _ => None,
        })
        .collect();
    let out = Command::new("bash")
        .args(["hack/install-tool.sh", "cargo-auditable", "--print-path"])
        .current_dir(root())
        .output()
        .expect("bash runs");
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let scripts = path
        .split('/')
        .find_map(|part| part.strip_prefix("cargo-auditable-"))
        .unwrap_or_else(|| panic!("no version in {path:?}"));
    assert_eq!(
        pinned,
        BTreeSet::from([scripts.to_string()]),
        "ARG CARGO_AUDITABLE_VERSION of the Dockerfile and hack/install-tool.sh's cargo-auditable differ"
    );
    let runs: Vec<String> = dockerfile
        .instructions
        .iter()
        .filter_map(|i| match i {
            Instruction::Run(run) => run.as_shell().map(ToString::to_string),
            _ => None,
        })
        .collect();
    assert!(
        runs.iter()
            .any(|run| run.contains("cargo auditable build --release")),
        "no RUN of the Dockerfile builds with `cargo auditable build --release`"
    );
    assert!(
        !runs.iter().any(|run| run.contains("cargo build")),
        "a RUN of the Dockerfile builds without cargo auditable"
    );
}
