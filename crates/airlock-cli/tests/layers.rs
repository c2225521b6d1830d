//! The crates are layers, and each depends only on layers below it:
//!
//! ```text
//! airlock-core, airlock-script               (pure: the model; a script's text)
//! airlock-fs, airlock-audit, airlock-store,  (IO, one kind of state each)
//! airlock-exec
//! airlock-broker                             (the application)
//! airlock-mcp, airlock-http, airlock-chat,   (faces; none knows another)
//! airlock-codemode                           (code mode's engine, beside them)
//! airlock-pg                                 (the PostgreSQL driver)
//! airlock-testkit                            (what the integration tests share)
//! airlock-cli                                (wires everything)
//! ```
//!
//! Read from every crate's `Cargo.toml`, dev- and build-dependencies
//! included, so a test cannot bring a face into a crate below it either.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;

const LAYERS: &[&[&str]] = &[
    &["airlock-core", "airlock-script"],
    &[
        "airlock-fs",
        "airlock-audit",
        "airlock-store",
        "airlock-exec",
    ],
    &["airlock-broker", "airlock-net"],
    &[
        "airlock-mcp",
        "airlock-http",
        "airlock-chat",
        "airlock-pg",
        "airlock-codemode",
    ],
    &["airlock-testkit"],
    &["airlock-cli"],
];

fn layer_of(name: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&name))
}

/// The names `manifest` lists in the tables whose name `table` accepts.
fn dependencies_in(manifest: &str, table: impl Fn(&str) -> bool) -> Vec<String> {
    let mut section = String::new();
    let mut found = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_owned();
            continue;
        }
        if !table(&section) || line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(key) = line.split(['=', '.', ' ']).next() {
            found.push(key.to_owned());
        }
    }
    found
}

/// The airlock crates `manifest` names in any dependency table.
fn airlock_dependencies(manifest: &str) -> Vec<String> {
    dependencies_in(manifest, |table| table.ends_with("dependencies"))
        .into_iter()
        .filter(|name| name.starts_with("airlock-"))
        .collect()
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

/// Every dependency name `manifest` lists under `[dependencies]` (the ones a
/// build of the crate links, not its tests').
fn normal_dependencies(manifest: &str) -> Vec<String> {
    dependencies_in(manifest, |table| table == "dependencies")
}

fn manifests() -> Vec<(String, String)> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut all = Vec::new();
    for entry in std::fs::read_dir(&crates).expect("crates/") {
        let dir = entry.expect("entry").path();
        if let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) {
            let name = dir
                .file_name()
                .and_then(|name| name.to_str())
                .expect("a crate directory name")
                .to_owned();
            all.push((name, manifest));
        }
    }
    all.sort();
    all
}

/// Each outside library has one home: only airlock-store knows SQL (and
/// only airlock-pg the PostgreSQL driver that carries it), only
/// airlock-mcp knows rmcp, only airlock-http knows axum, only airlock-cli
/// knows clap and anyhow, only airlock-net speaks TLS and WebSocket; below
/// the faces only airlock-net, the outbound client, runs an async runtime.
#[test]
fn each_protocol_and_storage_library_is_known_to_one_crate() {
    let homes: &[(&str, &[&str])] = &[
        ("rusqlite", &["airlock-store"]),
        ("tokio-postgres", &["airlock-pg"]),
        ("deadpool-postgres", &["airlock-pg"]),
        ("rmcp", &["airlock-mcp"]),
        // The test kit's stand-ins of chat platforms are HTTP servers too.
        ("axum", &["airlock-http", "airlock-testkit"]),
        ("clap", &["airlock-cli"]),
        ("anyhow", &["airlock-cli"]),
        (
            "tokio",
            &[
                "airlock-net",
                "airlock-mcp",
                "airlock-http",
                "airlock-chat",
                "airlock-pg",
                "airlock-testkit",
                "airlock-cli",
            ],
        ),
        // airlock-mcp: a streamable-HTTP upstream's raw lane posts with the
        // client rmcp's transport uses (made by airlock-net).
        (
            "reqwest",
            &["airlock-net", "airlock-http", "airlock-chat", "airlock-mcp"],
        ),
        // The test kit's TLS servers.
        ("rustls", &["airlock-net", "airlock-testkit"]),
        ("tokio-tungstenite", &["airlock-net", "airlock-testkit"]),
        // Code mode's engine and the worker's confinement.
        ("rquickjs", &["airlock-codemode"]),
        ("landlock", &["airlock-codemode"]),
        ("seccompiler", &["airlock-codemode"]),
        // A script's TypeScript and static preview: its text, parsed once.
        ("oxc_parser", &["airlock-script"]),
        ("oxc_ast", &["airlock-script"]),
        ("oxc_ast_visit", &["airlock-script"]),
    ];
    let mut wrong = Vec::new();
    for (name, manifest) in manifests() {
        for dependency in normal_dependencies(&manifest) {
            if let Some((library, allowed)) = homes.iter().find(|(lib, _)| *lib == dependency)
                && !allowed.contains(&name.as_str())
            {
                wrong.push(format!("{name} depends on {library}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:?}");
    // The check reads what it should.
    assert_eq!(
        normal_dependencies(
            "[dependencies]\nrusqlite = { workspace = true }\n[dev-dependencies]\naxum.workspace = true\n"
        ),
        ["rusqlite"]
    );
}

/// Every `.rs` file under `dir`, with its text.
fn sources(dir: &Path) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            out.extend(sources(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push((
                path.clone(),
                std::fs::read_to_string(&path).expect("source"),
            ));
        }
    }
    out
}

/// airlock-core does no IO: no files, sockets, processes, threads, clock or
/// async runtime in its code (callers pass text, data and the time).
#[test]
fn airlock_core_does_no_io() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../airlock-core/src");
    let forbidden = [
        "std::fs",
        "File::",
        "TcpStream",
        "TcpListener",
        "UdpSocket",
        "std::process",
        "std::thread",
        "SystemTime",
        "Instant::now",
        "tokio",
        "std::env",
    ];
    let mut found = Vec::new();
    for (path, text) in sources(&src) {
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for word in forbidden {
                if code.contains(word) {
                    found.push(format!("{}:{}: {word}", path.display(), n + 1));
                }
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

/// No `unsafe` code anywhere but two modules; the workspace denies
/// `unsafe_code` and only they allow it:
/// - the sandbox's child setup (`airlock-exec/src/child.rs`), the one place
///   that must make system calls between `fork` and `exec`;
/// - code mode's `raw` (`airlock-codemode/src/raw.rs`): moving compiled
///   code into a context without `eval`, the engine's counting allocator,
///   and closing the worker's inherited descriptors, for which rquickjs
///   and rustix have no safe form.
#[test]
fn only_the_sandbox_child_setup_is_unsafe() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let allowed_modules = [
        crates.join("airlock-exec/src/child.rs"),
        crates.join("airlock-codemode/src/raw.rs"),
    ];
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&crates).expect("crates") {
        let dir = entry.expect("entry").path().join("src");
        for (path, text) in sources(&dir) {
            if allowed_modules.contains(&path) {
                continue;
            }
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                if code.contains("unsafe ")
                    || code.contains("unsafe_code")
                    || code.contains("unsafe{")
                {
                    found.push(format!("{}:{}", path.display(), n + 1));
                }
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
    for allowed in &allowed_modules {
        let module = std::fs::read_to_string(allowed).expect("an unsafe module");
        assert!(module.contains("#![allow(unsafe_code)]"));
    }
}

/// An approval's stored JSON (plan, terms, result) is written and read by
/// airlock-store's row code only; every other crate sees the typed values.
#[test]
fn only_the_store_reads_an_approvals_stored_json() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    for (name, _) in manifests() {
        if name == "airlock-store" {
            continue;
        }
        for (path, text) in sources(&crates.join(&name).join("src")) {
            for column in ["plan_json", "decision_json", "result_json"] {
                if text.contains(column) {
                    found.push(format!("{} names {column}", path.display()));
                }
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}
