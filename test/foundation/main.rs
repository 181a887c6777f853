//! Foundation tests: the API, the source adapters, management-side render and
//! the `render` / `crd` commands.

mod bad_input;
mod crates;
mod crd;
mod golden;
mod modules;
mod properties;
mod schema;
mod upstream_types;

use std::path::{Path, PathBuf};

/// The repository root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `../shared/schemas`, the upstream CRDs.
pub fn upstream_schemas() -> PathBuf {
    let dir = root().join("../shared/schemas");
    assert!(
        dir.is_dir(),
        "{} is missing: CI checks out ../shared beside the repository",
        dir.display()
    );
    dir
}

/// Every input the golden tests render: the examples users read, plus test-only fixtures.
pub fn inputs() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ["templates/examples", "test/foundation/fixtures"]
        .iter()
        .flat_map(|dir| std::fs::read_dir(root().join(dir)).expect("input folder exists"))
        .map(|entry| entry.expect("readable folder").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// Parse a multi-document YAML file into JSON values.
pub fn documents(text: &str) -> Vec<serde_json::Value> {
    serde_saphyr::from_multiple::<serde_json::Value>(text)
        .expect("valid YAML")
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}
