//! Property: no patch, however its paths are written, makes airlock write
//! outside the workspace root. Patches are generated over adversarial paths
//! (`..`, absolute, symlinks out of the root, links to the state dir, NUL,
//! unicode, very long) in both formats, planned and committed; the directory
//! around the root must be byte for byte what it was.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use airlock_fs::{CommitOptions, PatchParams, Sandbox, commit, prepare_patch};
use proptest::prelude::*;

const PATHS: &[&str] = &[
    "src/a.txt",
    "b.txt",
    "src/new/c.txt",
    "../outside/victim.txt",
    "../outside/new.txt",
    "src/../../outside/victim.txt",
    "/tmp/airlock-confinement-abs.txt",
    "out/victim.txt",
    "out/new.txt",
    "src/out/victim.txt",
    "state/x.txt",
    ".airlock/airlock.db",
    ".env",
    "airlock.yaml",
    ".git/config",
    "src/\u{0}x.txt",
    "src/ünï.txt",
    "./src/./a.txt",
    "src//a.txt",
    // Quoted, with C escapes, as git writes unusual names: `..` spelled in
    // octal, a control character, a tab.
    "\"src/\\056\\056/\\056\\056/outside/victim.txt\"",
    "\"src/a.\\rtxt\"",
    "\"out/\\166ictim.txt\"",
];

/// Everything under `dir` (files with content, links with target).
fn snapshot(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let rel = path.strip_prefix(root).unwrap().display().to_string();
        let kind = entry.file_type().unwrap();
        if kind.is_symlink() {
            out.insert(
                rel,
                format!("-> {}", std::fs::read_link(&path).unwrap().display()),
            );
        } else if kind.is_dir() {
            out.insert(format!("{rel}/"), String::new());
            walk(root, &path, out);
        } else {
            out.insert(
                rel,
                String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned(),
            );
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Add(usize, String),
    Delete(usize),
    Update(usize, Option<usize>),
}

fn op() -> impl Strategy<Value = Op> {
    let path = 0..PATHS.len();
    prop_oneof![
        (path.clone(), "[a-z\n]{0,12}").prop_map(|(p, c)| Op::Add(p, c)),
        path.clone().prop_map(Op::Delete),
        (path.clone(), proptest::option::of(path)).prop_map(|(p, m)| Op::Update(p, m)),
    ]
}

fn v4a(ops: &[Op]) -> String {
    let mut text = String::from("*** Begin Patch\n");
    for op in ops {
        match op {
            Op::Add(p, content) => {
                text.push_str(&format!("*** Add File: {}\n", PATHS[*p]));
                for line in content.lines() {
                    text.push_str(&format!("+{line}\n"));
                }
            }
            Op::Delete(p) => text.push_str(&format!("*** Delete File: {}\n", PATHS[*p])),
            Op::Update(p, to) => {
                text.push_str(&format!("*** Update File: {}\n", PATHS[*p]));
                if let Some(to) = to {
                    text.push_str(&format!("*** Move to: {}\n", PATHS[*to]));
                }
                text.push_str("@@\n-victim\n+owned\n");
            }
        }
    }
    text.push_str("*** End Patch\n");
    text
}

fn unified(ops: &[Op]) -> String {
    let mut text = String::new();
    for op in ops {
        match op {
            Op::Add(p, _) => text.push_str(&format!(
                "--- /dev/null\n+++ b/{}\n@@ -0,0 +1 @@\n+owned\n",
                PATHS[*p]
            )),
            Op::Delete(p) => text.push_str(&format!(
                "--- a/{}\n+++ /dev/null\n@@ -1 +0,0 @@\n-victim\n",
                PATHS[*p]
            )),
            Op::Update(p, None) => text.push_str(&format!(
                "--- a/{0}\n+++ b/{0}\n@@ -1 +1 @@\n-victim\n+owned\n",
                PATHS[*p]
            )),
            // A git rename (a move), with an edit.
            Op::Update(p, Some(to)) => text.push_str(&format!(
                "diff --git a/{0} b/{1}\nrename from {0}\nrename to {1}\n--- a/{0}\n+++ b/{1}\n@@ -1 +1 @@\n-victim\n+owned\n",
                PATHS[*p], PATHS[*to]
            )),
        }
    }
    text
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn no_patch_writes_outside_the_root(ops in proptest::collection::vec(op(), 1..4), use_unified: bool) {
        let parent = tempfile::tempdir().unwrap();
        let parent_path = std::fs::canonicalize(parent.path()).unwrap();
        let outside = parent_path.join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("victim.txt"), "victim\n").unwrap();
        let root = parent_path.join("ws");
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(root.join(".airlock")).unwrap();
        std::fs::write(root.join("src/a.txt"), "victim\n").unwrap();
        std::fs::write(root.join("b.txt"), "victim\n").unwrap();
        std::fs::write(root.join(".env"), "victim\n").unwrap();
        std::fs::write(root.join(".airlock/airlock.db"), "victim\n").unwrap();
        std::os::unix::fs::symlink("../outside", root.join("out")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("src/out")).unwrap();
        std::os::unix::fs::symlink(".airlock", root.join("state")).unwrap();
        let around = |snap: BTreeMap<String, String>| -> BTreeMap<String, String> {
            snap.into_iter().filter(|(path, _)| !path.starts_with("ws/") && path != "ws/").collect()
        };
        let before = around(snapshot(&parent_path));
        let before_state = snapshot(&root.join(".airlock"));

        let mut loaded = airlock_core::config::load("", "airlock.yaml").unwrap();
        loaded.policy.bind_workspace(root.to_str().unwrap(), Some("airlock.yaml"));
        let sandbox = Sandbox::open(&root, &loaded.config.file_broker, Arc::new(loaded.policy)).unwrap();
        let patch = if use_unified { unified(&ops) } else { v4a(&ops) };
        let params = PatchParams { patch, patch_format: Default::default(), dry_run: false };
        // A second, parallel journal directory outside the state dir's tree is
        // not needed: the journal lives in the state dir, which airlock owns.
        let journal = root.join(".airlock/journal");
        if let Ok(plan) = prepare_patch(&sandbox, &params) {
            for change in &plan.changes {
                prop_assert!(!change.resolved_path.starts_with('/'), "{change:?}");
                prop_assert!(!change.resolved_path.split('/').any(|c| c == ".."), "{change:?}");
            }
            let options = CommitOptions { journal_dir: Some(&journal), ..CommitOptions::default() };
            let _ = commit(&sandbox, &plan, options);
        }
        prop_assert_eq!(around(snapshot(&parent_path)), before);
        prop_assert!(!Path::new("/tmp/airlock-confinement-abs.txt").exists());
        // The state dir holds what it held, plus only airlock's own journal.
        let mut state = snapshot(&root.join(".airlock"));
        state.retain(|path, _| !path.starts_with("journal"));
        prop_assert_eq!(state, before_state);
    }
}

/// The generator's benign paths do apply: the property above is not vacuous.
#[test]
fn the_benign_paths_of_the_generator_apply() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/a.txt"), "victim\n").unwrap();
    let mut loaded = airlock_core::config::load("", "airlock.yaml").unwrap();
    loaded
        .policy
        .bind_workspace(root.to_str().unwrap(), Some("airlock.yaml"));
    let sandbox =
        Sandbox::open(&root, &loaded.config.file_broker, Arc::new(loaded.policy)).unwrap();
    for (ops, unified_format) in [
        (
            vec![Op::Update(0, None), Op::Add(2, "new\n".to_owned())],
            false,
        ),
        (vec![Op::Update(0, None)], true),
    ] {
        std::fs::write(root.join("src/a.txt"), "victim\n").unwrap();
        let _ = std::fs::remove_dir_all(root.join("src/new"));
        let patch = if unified_format {
            unified(&ops)
        } else {
            v4a(&ops)
        };
        let params = PatchParams {
            patch,
            patch_format: Default::default(),
            dry_run: false,
        };
        let plan = prepare_patch(&sandbox, &params).unwrap();
        let journal = root.join(".airlock/journal");
        let options = CommitOptions {
            journal_dir: Some(&journal),
            ..CommitOptions::default()
        };
        commit(&sandbox, &plan, options).unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("src/a.txt")).unwrap(),
            "owned\n"
        );
    }
}
