//! Link-time layout of the node proxy's code.
//!
//! An idle proxy's memory is mostly the pages of its own binary: the kernel
//! maps a file 64 KiB around every page a process touches, so the ~1.4 MiB
//! of code that runs at start and on the data path, scattered over 6 MiB of
//! text, kept ~4 MiB resident. `link/proxy-text-order.txt` lists the input
//! sections of that code (written by `hack/gen-proxy-text-order.sh` from a
//! run of the benchmark rig); this script turns it into a GNU ld script that
//! places them first, together, in an output section of their own ahead of
//! `.text`. Names that no longer exist match nothing and their code falls
//! back to the ordinary order: a stale list costs memory, never correctness.
//!
//! Only the release build of `hcp-ingress-proxy` for Linux musl (the image's)
//! gets it; `HCP_INGRESS_TEXT_ORDER=off` leaves it out, e.g. for a linker
//! without linker scripts. `HCP_INGRESS_LINK_MAP=<file>` has the linker
//! write its map there (the generator reads which section holds which
//! function from it).

use std::{env, fs, path::PathBuf};

const LIST: &str = "link/proxy-text-order.txt";

fn main() {
    println!("cargo:rerun-if-changed={LIST}");
    println!("cargo:rerun-if-env-changed=HCP_INGRESS_TEXT_ORDER");
    println!("cargo:rerun-if-env-changed=HCP_INGRESS_LINK_MAP");
    let var = |k: &str| env::var(k).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") != "linux"
        || var("CARGO_CFG_TARGET_ENV") != "musl"
        || var("PROFILE") != "release"
        || var("HCP_INGRESS_TEXT_ORDER") == "off"
    {
        return;
    }
    // -Xlinker passes each argument verbatim (-Wl, would split paths at commas).
    let link_arg = |arg: String| {
        println!("cargo:rustc-link-arg-bin=hcp-ingress-proxy=-Xlinker");
        println!("cargo:rustc-link-arg-bin=hcp-ingress-proxy={arg}");
    };
    let map = var("HCP_INGRESS_LINK_MAP");
    if !map.is_empty() {
        link_arg(format!("-Map={map}"));
    }
    let list = fs::read_to_string(LIST).unwrap_or_else(|e| panic!("{LIST}: {e}"));
    let Some(script) = linker_script(&list) else {
        return;
    };
    let out = PathBuf::from(var("OUT_DIR")).join("proxy-text-order.ld");
    fs::write(&out, script).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    link_arg(format!("--script={}", out.display()));
}

/// The ld script for a list of input-section patterns (one per line, `#`
/// comments): one output section inserted before `.text`, so the default
/// script keeps doing everything else. None when the list is empty.
fn linker_script(list: &str) -> Option<String> {
    let patterns: Vec<&str> = list
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    if patterns.is_empty() {
        return None;
    }
    let mut s = String::from("SECTIONS\n{\n  .text.hot :\n  {\n");
    for p in patterns {
        s.push_str("    ");
        s.push_str(p);
        s.push('\n');
    }
    s.push_str("  }\n}\nINSERT BEFORE .text;\n");
    Some(s)
}
