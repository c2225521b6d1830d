//! The change engine: multi-file plans applied all or nothing, with a journal
//! that a crash is rolled forward from, and undo.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use airlock_fs::{
    ChangePlan, CommitOptions, FileChange, FsError, Sandbox, UndoFile, commit, recover, sha256_hex,
    undo,
};
use pretty_assertions::assert_eq;

struct Ws {
    _dir: tempfile::TempDir,
    root: PathBuf,
    journal: PathBuf,
    sandbox: Sandbox,
}

fn workspace(files: &[(&str, &str)]) -> Ws {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    for (path, content) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    let mut loaded = airlock_core::config::load("", "airlock.yaml").unwrap();
    loaded
        .policy
        .bind_workspace(root.to_str().unwrap(), Some("airlock.yaml"));
    let sandbox =
        Sandbox::open(&root, &loaded.config.file_broker, Arc::new(loaded.policy)).unwrap();
    Ws {
        _dir: dir,
        journal: root.join(".airlock/journal"),
        root,
        sandbox,
    }
}

impl Ws {
    fn journal(&self) -> &Path {
        &self.journal
    }

    fn options(&self) -> CommitOptions<'_> {
        CommitOptions {
            journal_dir: Some(&self.journal),
            ..CommitOptions::default()
        }
    }

    /// Every file outside `.airlock/`, with its content.
    fn files(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        collect(&self.root, &self.root, &mut out);
        out
    }
}

fn collect(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let rel = path
            .strip_prefix(root)
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        if rel == ".airlock" {
            continue;
        }
        if path.is_dir() {
            collect(root, &path, out);
        } else {
            out.insert(rel, std::fs::read_to_string(&path).unwrap());
        }
    }
}

fn change(path: &str, before: Option<&str>, after: Option<&str>) -> FileChange {
    FileChange {
        path: path.to_owned(),
        resolved_path: path.to_owned(),
        before_hash: before.map(sha256_hex),
        after: after.map(|text| text.as_bytes().to_vec()),
        create_parents: true,
        moved_from: None,
        mode: None,
    }
}

/// Modify `a.txt`, create `src/new/b.txt`, delete `c.txt`.
fn three_file_plan() -> ChangePlan {
    let changes = vec![
        change("a.txt", Some("a1\n"), Some("a2\n")),
        change("src/new/b.txt", None, Some("b\n")),
        change("c.txt", Some("c\n"), None),
    ];
    airlock_fs::new_plan(
        "apply_patch",
        "PATCH 3 files".to_owned(),
        changes,
        &[Some(b"a1\n"), None, Some(b"c\n")],
        serde_json::Map::new(),
    )
}

fn start() -> Ws {
    workspace(&[("a.txt", "a1\n"), ("c.txt", "c\n"), ("src/keep.txt", "k\n")])
}

fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
    entries
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn a_plan_over_three_files_applies_whole_with_one_diff() {
    let ws = start();
    let plan = three_file_plan();
    assert_eq!(
        plan.diff,
        "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a1\n+a2\n\
         --- /dev/null\n+++ b/src/new/b.txt\n@@ -0,0 +1 @@\n+b\n\
         --- a/c.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-c\n"
    );
    let done = commit(&ws.sandbox, &plan, ws.options()).unwrap();
    assert_eq!(
        done.iter()
            .map(|f| (f.path.as_str(), f.before_hash.clone(), f.after_hash.clone()))
            .collect::<Vec<_>>(),
        vec![
            ("a.txt", Some(sha256_hex("a1\n")), Some(sha256_hex("a2\n"))),
            ("src/new/b.txt", None, Some(sha256_hex("b\n"))),
            ("c.txt", Some(sha256_hex("c\n")), None),
        ]
    );
    assert_eq!(
        ws.files(),
        map(&[
            ("a.txt", "a2\n"),
            ("src/keep.txt", "k\n"),
            ("src/new/b.txt", "b\n")
        ])
    );
    // The journal is gone once the commit is done; only the lock stays.
    let left: Vec<String> = std::fs::read_dir(ws.journal())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(left, vec!["apply.lock".to_owned()]);
}

#[test]
fn one_stale_file_stops_the_whole_plan() {
    let ws = start();
    let plan = three_file_plan();
    std::fs::write(ws.root.join("c.txt"), "changed\n").unwrap();
    let before = ws.files();
    let error = commit(&ws.sandbox, &plan, ws.options()).unwrap_err();
    assert_eq!(error.code().as_str(), "stale");
    assert_eq!(ws.files(), before);
    assert!(!ws.root.join("src/new").exists(), "no parent was created");
}

#[test]
fn a_file_created_since_is_stale_too() {
    let ws = start();
    let plan = three_file_plan();
    std::fs::create_dir_all(ws.root.join("src/new")).unwrap();
    std::fs::write(ws.root.join("src/new/b.txt"), "mine\n").unwrap();
    let error = commit(&ws.sandbox, &plan, ws.options()).unwrap_err();
    assert_eq!(error.code().as_str(), "stale");
    assert_eq!(ws.files()["a.txt"], "a1\n");
    assert_eq!(ws.files()["src/new/b.txt"], "mine\n");
}

#[test]
fn a_plan_whose_diff_was_tampered_with_is_refused() {
    let ws = start();
    let mut plan = three_file_plan();
    plan.changes[0].after = Some(b"evil\n".to_vec());
    let error = commit(&ws.sandbox, &plan, ws.options()).unwrap_err();
    assert_eq!(error.code().as_str(), "invalid_input");
    assert_eq!(ws.files()["a.txt"], "a1\n");
}

#[test]
fn several_files_need_a_journal() {
    let ws = start();
    let error = commit(&ws.sandbox, &three_file_plan(), CommitOptions::default()).unwrap_err();
    assert!(matches!(error, FsError::InvalidInput { .. }), "{error}");
    assert_eq!(ws.files()["a.txt"], "a1\n");
}

#[test]
fn a_commit_interrupted_after_its_commit_point_is_rolled_forward() {
    for steps_done in 0..3 {
        let ws = start();
        let plan = three_file_plan();
        let mut options = ws.options();
        options.interrupt_after = Some(steps_done);
        commit(&ws.sandbox, &plan, options).unwrap_err();
        // The journal is there; the targets are part old, part new.
        let journals = std::fs::read_dir(ws.journal())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_str()
                    .unwrap()
                    .ends_with(".json")
            })
            .count();
        assert_eq!(journals, 1, "after {steps_done} steps");
        // The next start finishes it.
        assert_eq!(recover(&ws.sandbox, ws.journal()).unwrap().len(), 1);
        assert_eq!(
            ws.files(),
            map(&[
                ("a.txt", "a2\n"),
                ("src/keep.txt", "k\n"),
                ("src/new/b.txt", "b\n")
            ]),
            "after {steps_done} steps"
        );
        assert_eq!(recover(&ws.sandbox, ws.journal()).unwrap(), vec![]);
        // No temporary file anywhere.
        let mut all = Vec::new();
        for dir in [ws.root.clone(), ws.root.join("src/new")] {
            for e in std::fs::read_dir(dir).unwrap() {
                all.push(e.unwrap().file_name().into_string().unwrap());
            }
        }
        assert!(
            all.iter().all(|name| !name.starts_with(".airlock-tmp-")),
            "{all:?}"
        );
    }
}

#[test]
fn undo_restores_every_file_or_none() {
    let ws = start();
    let plan = three_file_plan();
    commit(&ws.sandbox, &plan, ws.options()).unwrap();
    let files = vec![
        UndoFile {
            path: "a.txt".to_owned(),
            expected: Some(sha256_hex("a2\n")),
            restore: Some(b"a1\n".to_vec()),
            mode: None,
        },
        UndoFile {
            path: "src/new/b.txt".to_owned(),
            expected: Some(sha256_hex("b\n")),
            restore: None,
            mode: None,
        },
        UndoFile {
            path: "c.txt".to_owned(),
            expected: None,
            restore: Some(b"c\n".to_vec()),
            mode: None,
        },
    ];
    // Someone edited b since: conflict, and nothing is undone.
    std::fs::write(ws.root.join("src/new/b.txt"), "edited\n").unwrap();
    let error = undo(&ws.sandbox, &files, ws.options()).unwrap_err();
    assert_eq!(error.code().as_str(), "conflict");
    assert_eq!(ws.files()["a.txt"], "a2\n");
    assert!(!ws.root.join("c.txt").exists());
    // Put it back: the undo goes through.
    std::fs::write(ws.root.join("src/new/b.txt"), "b\n").unwrap();
    undo(&ws.sandbox, &files, ws.options()).unwrap();
    assert_eq!(
        ws.files(),
        map(&[("a.txt", "a1\n"), ("c.txt", "c\n"), ("src/keep.txt", "k\n")])
    );
}

#[test]
fn of_many_plans_against_the_same_files_exactly_one_applies() {
    let ws = start();
    let plans: Vec<ChangePlan> = (0..12)
        .map(|i| {
            let new_a = format!("a{i}\n");
            let changes = vec![
                change("a.txt", Some("a1\n"), Some(&new_a)),
                change("c.txt", Some("c\n"), Some(&format!("c{i}\n"))),
            ];
            airlock_fs::new_plan(
                "apply_patch",
                format!("plan {i}"),
                changes,
                &[Some(b"a1\n"), Some(b"c\n")],
                serde_json::Map::new(),
            )
        })
        .collect();
    let results: Vec<Result<usize, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = plans
            .iter()
            .enumerate()
            .map(|(i, plan)| {
                let ws = &ws;
                scope.spawn(move || {
                    commit(&ws.sandbox, plan, ws.options())
                        .map(|_| i)
                        .map_err(|e| e.code().as_str().to_owned())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let winners: Vec<usize> = results.iter().filter_map(|r| r.clone().ok()).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    assert!(
        results
            .iter()
            .filter_map(|r| r.clone().err())
            .all(|code| code == "stale"),
        "{results:?}"
    );
    let i = winners[0];
    assert_eq!(ws.files()["a.txt"], format!("a{i}\n"));
    assert_eq!(ws.files()["c.txt"], format!("c{i}\n"));
}

/// Leaves `three_file_plan` interrupted after its commit point, with
/// `steps_done` of its three steps done.
fn interrupted(ws: &Ws, steps_done: usize) {
    let mut options = ws.options();
    options.interrupt_after = Some(steps_done);
    options.label = Some("hitl-x:apply");
    commit(&ws.sandbox, &three_file_plan(), options).unwrap_err();
}

#[test]
fn a_later_commit_finishes_an_interrupted_one_first_and_is_stale_against_it() {
    let ws = start();
    interrupted(&ws, 1);
    // a.txt is new, c.txt still old: a plan made now against c.txt...
    let changes = vec![change("c.txt", Some("c\n"), Some("mine\n"))];
    let plan = airlock_fs::new_plan(
        "write_file",
        "MODIFY c.txt".to_owned(),
        changes,
        &[Some(b"c\n")],
        serde_json::Map::new(),
    );
    // ...finds the interrupted apply finished first, and is stale.
    let error = commit(&ws.sandbox, &plan, ws.options()).unwrap_err();
    assert_eq!(error.code().as_str(), "stale");
    assert_eq!(
        ws.files(),
        map(&[
            ("a.txt", "a2\n"),
            ("src/keep.txt", "k\n"),
            ("src/new/b.txt", "b\n")
        ])
    );
}

#[test]
fn recovery_leaves_a_file_that_changed_since_alone_and_says_so() {
    let ws = start();
    interrupted(&ws, 0);
    std::fs::write(ws.root.join("a.txt"), "someone else\n").unwrap();
    let recovered = recover(&ws.sandbox, ws.journal()).unwrap();
    assert_eq!(recovered.len(), 1);
    assert_eq!(recovered[0].label.as_deref(), Some("hitl-x:apply"));
    assert_eq!(recovered[0].skipped, vec!["a.txt".to_owned()]);
    assert_eq!(
        ws.files(),
        map(&[
            ("a.txt", "someone else\n"),
            ("src/keep.txt", "k\n"),
            ("src/new/b.txt", "b\n")
        ])
    );
}

#[test]
fn a_journal_naming_paths_outside_the_root_is_refused() {
    let parent = tempfile::tempdir().unwrap();
    let parent = std::fs::canonicalize(parent.path()).unwrap();
    std::fs::create_dir_all(parent.join("outside")).unwrap();
    std::fs::write(parent.join("outside/victim.txt"), "victim\n").unwrap();
    let ws = start();
    std::fs::create_dir_all(ws.journal()).unwrap();
    std::fs::write(ws.root.join("src/.airlock-tmp-payload"), "owned\n").unwrap();
    let outside = parent.join("outside/victim.txt");
    let escape = pathdiff(&ws.root.join("src"), &outside);
    for (name, temp, dir) in [
        (escape.as_str(), ".airlock-tmp-payload", "src"),
        ("victim.txt", "../../payload", "src"),
        ("airlock.yaml", ".airlock-tmp-payload", ""),
        ("x.txt", "payload", "src"),
    ] {
        let journal = serde_json::json!({
            "id": "evil",
            "steps": [{"dir": dir, "name": name, "action": "replace", "temp": temp,
                       "before_hash": null, "after_hash": null}]
        });
        std::fs::write(ws.journal().join("evil.json"), journal.to_string()).unwrap();
        let error = recover(&ws.sandbox, ws.journal()).unwrap_err();
        assert_eq!(error.code().as_str(), "io_error", "{name} {temp}: {error}");
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "victim\n");
        assert!(!ws.root.join("airlock.yaml").exists());
    }
}

/// `to` relative to `from` (both absolute), through `..`.
fn pathdiff(from: &Path, to: &Path) -> String {
    let ups = from.components().count();
    let mut out = "../".repeat(ups);
    out.push_str(to.to_str().unwrap().trim_start_matches('/'));
    out
}
