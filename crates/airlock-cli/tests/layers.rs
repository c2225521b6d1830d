//! The crates are layers, and each depends only on layers below it:
//!
//! ```text
//! airlock-core                               (pure)
//! airlock-fs, airlock-audit, airlock-store   (IO, one kind of state each)
//! airlock-broker                             (the application)
//! airlock-mcp, airlock-http                  (faces; none knows another)
//! airlock-testkit                            (what the integration tests share)
//! airlock-cli                                (wires everything)
//! ```
//!
//! Read from every crate's `Cargo.toml`, dev- and build-dependencies
//! included, so a test cannot bring a face into a crate below it either.

use std::collections::BTreeMap;
use std::path::Path;

const LAYERS: &[&[&str]] = &[
    &["airlock-core"],
    &["airlock-fs", "airlock-audit", "airlock-store"],
    &["airlock-broker"],
    &["airlock-mcp", "airlock-http"],
    &["airlock-testkit"],
    &["airlock-cli"],
];

fn layer_of(name: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&name))
}

/// The airlock crates `manifest` names in any dependency table.
fn airlock_dependencies(manifest: &str) -> Vec<String> {
    let mut section = String::new();
    let mut found = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_owned();
            continue;
        }
        if !section.ends_with("dependencies") {
            continue;
        }
        let key = line.split(['=', '.', ' ']).next().unwrap_or("");
        if key.starts_with("airlock-") {
            found.push(key.to_owned());
        }
    }
    found
}

#[test]
fn every_crate_depends_only_on_layers_below_it() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut graph = BTreeMap::new();
    for entry in std::fs::read_dir(&crates).expect("crates/") {
        let dir = entry.expect("entry").path();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        let name = dir
            .file_name()
            .and_then(|name| name.to_str())
            .expect("a crate directory name")
            .to_owned();
        graph.insert(name, airlock_dependencies(&manifest));
    }
    assert_eq!(
        graph.keys().map(String::as_str).collect::<Vec<_>>(),
        {
            let mut all: Vec<&str> = LAYERS
                .iter()
                .flat_map(|layer| layer.iter().copied())
                .collect();
            all.sort_unstable();
            all
        },
        "every crate has its place in LAYERS"
    );
    let mut wrong = Vec::new();
    for (name, dependencies) in &graph {
        let mine = layer_of(name).expect("listed");
        for dependency in dependencies {
            match layer_of(dependency) {
                Some(theirs) if theirs < mine => {}
                _ => wrong.push(format!("{name} -> {dependency}")),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "dependencies on the same or a higher layer: {wrong:?}"
    );
    // The rule has teeth: the faces' old edge would break it.
    assert_eq!(
        airlock_dependencies("[dev-dependencies]\nairlock-mcp.workspace = true\n"),
        ["airlock-mcp"]
    );
}
