//! The sandbox's path resolver on arbitrary path arguments, for reading and for
//! writing, in a workspace with the paths an attacker aims at: the state directory,
//! a `.env`, symlinks out of the root and onto protected files. Nothing may panic,
//! and a path that resolves is root-relative, without `..`, and not protected.

#![no_main]

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use airlock_fs::{Access, Sandbox};
use libfuzzer_sys::fuzz_target;
use tempfile::TempDir;

struct Workspace {
    sandbox: Sandbox,
    // Kept for the process's lifetime (a static is never dropped, so the
    // directories outlive the run; they are small).
    _root: TempDir,
    _outside: TempDir,
}

fn workspace() -> &'static Workspace {
    static WORKSPACE: OnceLock<Workspace> = OnceLock::new();
    WORKSPACE.get_or_init(|| {
        let root_dir = tempfile::tempdir().expect("create the workspace directory");
        let outside = tempfile::tempdir().expect("create the outside directory");
        let root = fs::canonicalize(root_dir.path()).expect("canonicalize the root");
        let write = |path: &str, content: &str| {
            let path = root.join(path);
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent).expect("create a directory");
            }
            fs::write(path, content).expect("write a file");
        };
        write("src/main.rs", "fn main() {}\n");
        write("src/nested/mod.rs", "\n");
        write("README.md", "# readme\n");
        write(".env", "SECRET=1\n");
        write("config/.env", "SECRET=2\n");
        write(".airlock/approvals.db", "");
        write(".airlock/audit.jsonl", "");
        write("airlock.yaml", "");
        fs::write(outside.path().join("secret.txt"), "outside\n").expect("write outside");
        let link = |target: &Path, name: &str| {
            symlink(target, root.join(name)).expect("create a symlink");
        };
        link(outside.path(), "escape");
        link(&outside.path().join("secret.txt"), "secret_link");
        link(Path::new(".env"), "env_link");
        link(Path::new(".airlock"), "state_link");
        link(Path::new(".."), "src/up");
        link(Path::new("loop"), "loop");

        let mut loaded =
            airlock_core::config::load("", "airlock.yaml").expect("load the default config");
        let root_text = root.to_str().expect("the temp root is UTF-8");
        loaded
            .policy
            .bind_workspace(root_text, Some("airlock.yaml"));
        let sandbox = Sandbox::open(&root, &loaded.config.file_broker, Arc::new(loaded.policy))
            .expect("open the sandbox");
        Workspace {
            sandbox,
            _root: root_dir,
            _outside: outside,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let input = String::from_utf8_lossy(data);
    let workspace = workspace();
    for access in [Access::Read, Access::Write] {
        if let Ok(path) = workspace.sandbox.resolve("path", &input, access) {
            check(path.resolved(), &input, access);
        }
    }
});

fn check(resolved: &str, input: &str, access: Access) {
    let context = format!("{input:?} resolved to {resolved:?} for {access:?}");
    assert!(!resolved.starts_with('/'), "absolute: {context}");
    assert!(
        !resolved.split('/').any(|component| component == ".."),
        "climbs: {context}"
    );
    assert!(
        resolved != ".airlock" && !resolved.starts_with(".airlock/"),
        "state directory: {context}"
    );
    assert!(
        resolved != ".env" && !resolved.ends_with("/.env"),
        "denied file: {context}"
    );
}
