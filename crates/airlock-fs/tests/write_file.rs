#![allow(clippy::unwrap_used, clippy::expect_used)]

//! `write_file` end to end: prepare a plan, change the world (or not), commit,
//! undo. Plans, applied results and file trees are compared whole.

mod common;

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::sync::{Arc, Barrier};

use airlock_fs::{
    ChangePlan, CommitOptions, FileApplied, FileChange, FsError, Sandbox, UndoFile, WriteParams,
    prepare_write, sha256_hex,
};
use common::{Fixture, OUTSIDE_SECRET, code};
use pretty_assertions::assert_eq;
use serde_json::json;

fn plan(sandbox: &Sandbox, args: serde_json::Value) -> Result<ChangePlan, FsError> {
    prepare_write(sandbox, &WriteParams::from_args(&args)?)
}

/// Applies a plan through the one engine every write-class tool uses.
fn commit(sandbox: &Sandbox, plan: &ChangePlan) -> Result<Vec<FileApplied>, FsError> {
    airlock_fs::commit(sandbox, plan, CommitOptions::default())
}

/// The one file a write's plan changes.
fn the_change(plan: &ChangePlan) -> &FileChange {
    assert_eq!(plan.changes.len(), 1, "{plan:?}");
    &plan.changes[0]
}

/// What a write replaces: its content (`None` for a create), checked
/// against the plan's base hash.
fn before_of(sandbox: &Sandbox, plan: &ChangePlan) -> Result<Option<Vec<u8>>, FsError> {
    let mut before = airlock_fs::snapshot(sandbox, plan)?;
    Ok(before.pop().flatten().map(|(bytes, _)| bytes))
}

/// Undoes a write: `path` must still hash to `expected`, and gets `before`
/// back (or is removed).
fn undo(
    sandbox: &Sandbox,
    path: &str,
    expected: &str,
    before: Option<&[u8]>,
) -> Result<Vec<FileApplied>, FsError> {
    let file = UndoFile {
        path: path.to_owned(),
        expected: Some(expected.to_owned()),
        restore: before.map(<[u8]>::to_vec),
        mode: None,
    };
    airlock_fs::undo(sandbox, &[file], CommitOptions::default())
}

/// A write's plan as [`prepare_write`] makes it.
fn write_plan(
    path: &str,
    resolved: &str,
    before: Option<&str>,
    content: &str,
    diff: &str,
) -> ChangePlan {
    let change = FileChange {
        path: path.to_owned(),
        resolved_path: resolved.to_owned(),
        before_hash: before.map(sha256_hex),
        after: Some(content.as_bytes().to_vec()),
        create_parents: false,
        moved_from: None,
        mode: None,
    };
    ChangePlan {
        tool: "write_file".to_owned(),
        summary: change.summary(),
        changes: vec![change],
        diff: diff.to_owned(),
        patch_hash: sha256_hex(diff),
        report: serde_json::Map::new(),
    }
}

/// Names in a directory of the workspace, sorted (temporary files would show).
fn names(fixture: &Fixture, dir: &str) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(fixture.root.join(dir))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn mode_of(fixture: &Fixture, path: &str) -> u32 {
    fs::metadata(fixture.root.join(path))
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn create_proposes_a_diff_from_dev_null_then_creates_the_file() {
    let fixture = Fixture::standard();
    let sandbox = fixture.sandbox("");
    let content = "fn a() {}\nfn b() {}\n";
    let plan = plan(&sandbox, json!({"path": "src/new.rs", "content": content})).unwrap();
    let diff = "--- /dev/null\n+++ b/src/new.rs\n@@ -0,0 +1,2 @@\n+fn a() {}\n+fn b() {}\n";
    assert_eq!(
        plan,
        write_plan("src/new.rs", "src/new.rs", None, content, diff)
    );
    assert_eq!(plan.summary, "CREATE FILE src/new.rs");
    // Preparing changed nothing.
    assert_eq!(names(&fixture, "src"), ["main.rs", "real.txt", "up"]);

    let applied = commit(&sandbox, &plan).unwrap();
    assert_eq!(
        applied,
        [FileApplied {
            path: "src/new.rs".into(),
            before_hash: None,
            after_hash: Some(sha256_hex(content)),
        }]
    );
    assert_eq!(fixture.read("src/new.rs"), content);
    assert_eq!(
        names(&fixture, "src"),
        ["main.rs", "new.rs", "real.txt", "up"]
    );
    // Applying twice: the file exists now.
    assert_eq!(code(&commit(&sandbox, &plan)), "stale");
}

#[test]
fn modify_proposes_a_diff_against_the_current_content() {
    let fixture = Fixture::standard();
    let sandbox = fixture.sandbox("");
    let plan = plan(
        &sandbox,
        json!({"path": "other/existing.txt", "content": "existing\nmore\n"}),
    )
    .unwrap();
    let diff =
        "--- a/other/existing.txt\n+++ b/other/existing.txt\n@@ -1 +1,2 @@\n existing\n+more\n";
    assert_eq!(
        plan,
        write_plan(
            "other/existing.txt",
            "other/existing.txt",
            Some("existing\n"),
            "existing\nmore\n",
            diff
        )
    );
    assert_eq!(plan.summary, "MODIFY other/existing.txt");
    assert_eq!(fixture.read("other/existing.txt"), "existing\n");
    assert_eq!(
        commit(&sandbox, &plan).unwrap(),
        [FileApplied {
            path: "other/existing.txt".into(),
            before_hash: Some(sha256_hex("existing\n")),
            after_hash: Some(sha256_hex("existing\nmore\n")),
        }]
    );
    assert_eq!(fixture.read("other/existing.txt"), "existing\nmore\n");
    assert_eq!(names(&fixture, "other"), ["existing.txt"]);
    // Applying twice: the base changed.
    assert_eq!(code(&commit(&sandbox, &plan)), "stale");
}

#[test]
fn an_unchanged_overwrite_has_only_the_headers() {
    let fixture = Fixture::standard();
    let sandbox = fixture.sandbox("");
    let plan = plan(
        &sandbox,
        json!({"path": "src/real.txt", "content": "real\n"}),
    )
    .unwrap();
    assert_eq!(plan.diff, "--- a/src/real.txt\n+++ b/src/real.txt\n");
    let empty = self::plan(&sandbox, json!({"path": "src/empty.rs", "content": ""})).unwrap();
    assert_eq!(empty.diff, "--- /dev/null\n+++ b/src/empty.rs\n");
    commit(&sandbox, &empty).unwrap();
    assert_eq!(fixture.read("src/empty.rs"), "");
}

#[test]
fn prepare_refusals() {
    let fixture = Fixture::standard();
    let sandbox = fixture.sandbox("file_broker:\n  max_write_bytes_hard: 10\n");
    let cases = [
        (json!({"path": "new.txt", "content": "0123456789"}), "ok"),
        (
            json!({"path": "new.txt", "content": "0123456789+"}),
            "too_large",
        ),
        (
            json!({"path": "src/main.rs", "content": "x", "mode": "create_new"}),
            "file_exists",
        ),
        (
            json!({"path": "src/fresh.rs", "content": "x", "mode": "create_new"}),
            "ok",
        ),
        (json!({"path": "src", "content": "x"}), "is_directory"),
        (
            json!({"path": "src", "content": "x", "mode": "create_new"}),
            "is_directory",
        ),
        (
            json!({"path": "src/a/b/c.rs", "content": "x"}),
            "parent_not_found",
        ),
        (
            json!({"path": "src/a/b/c.rs", "content": "x", "create_parents": true}),
            "ok",
        ),
        (
            json!({"path": "nodir/a/b.txt", "content": "x", "create_parents": true}),
            "create_not_allowed",
        ),
        (
            json!({"path": "other/new.txt", "content": "x"}),
            "create_not_allowed",
        ),
        (json!({"path": "other/existing.txt", "content": "x"}), "ok"),
        (
            json!({"path": "file.txt/x", "content": "x"}),
            "not_a_directory",
        ),
        (
            json!({"path": ".git/config", "content": "x"}),
            "path_forbidden",
        ),
        (
            json!({"path": ".git/new", "content": "x"}),
            "path_forbidden",
        ),
        (
            json!({"path": "git_link", "content": "x"}),
            "path_forbidden",
        ),
        (
            json!({"path": "airlock.yaml", "content": "x"}),
            "path_forbidden",
        ),
        (
            json!({"path": "config_link", "content": "x"}),
            "path_forbidden",
        ),
        (
            json!({"path": ".airlock/x", "content": "x"}),
            "path_forbidden",
        ),
        (json!({"path": ".env", "content": "x"}), "path_denied"),
        (json!({"path": "ok.txt", "content": "x"}), "path_denied"),
        (
            json!({"path": "link_out_file", "content": "x"}),
            "path_forbidden",
        ),
        (
            json!({"path": "dangling_in", "content": "x"}),
            "path_forbidden",
        ),
        (
            json!({"path": "../new.txt", "content": "x"}),
            "path_forbidden",
        ),
        (
            json!({"path": "new.txt", "content": "x", "mode": "append"}),
            "invalid_input",
        ),
        (json!({"path": "new.txt"}), "invalid_input"),
        (
            json!({"path": "new.txt", "content": "x", "extra": true}),
            "invalid_input",
        ),
    ];
    let expected: Vec<String> = cases
        .iter()
        .map(|(args, want)| format!("{args} => {want}"))
        .collect();
    let actual: Vec<String> = cases
        .iter()
        .map(|(args, _)| format!("{args} => {}", code(&plan(&sandbox, args.clone()))))
        .collect();
    assert_eq!(expected, actual);
    // Nothing was written by preparing.
    assert!(!fixture.root.join("new.txt").exists());
    assert!(!fixture.root.join("src/a").exists());
    assert_eq!(fixture.read("other/existing.txt"), "existing\n");
}

#[test]
fn commit_is_stale_when_the_file_changed_after_prepare() {
    let fixture = Fixture::standard();
    let sandbox = fixture.sandbox("");
    let plan = plan(
        &sandbox,
        json!({"path": "src/real.txt", "content": "mine\n"}),
    )
    .unwrap();
    fixture.write("src/real.txt", "theirs\n");
    let error = commit(&sandbox, &plan).unwrap_err();
    assert_eq!(
        (error.code().as_str(), error.to_string()),
        (
            "stale",
            format!(
                "`src/real.txt` changed since the proposal: its hash is {}, not {}",
                sha256_hex("theirs\n"),
                sha256_hex("real\n")
            )
        )
    );
    assert_eq!(fixture.read("src/real.txt"), "theirs\n");
    // Removed after prepare: stale as well.
    let plan = self::plan(&sandbox, json!({"path": "src/real.txt", "content": "x\n"})).unwrap();
    fs::remove_file(fixture.root.join("src/real.txt")).unwrap();
    assert_eq!(code(&commit(&sandbox, &plan)), "stale");
    assert!(!fixture.root.join("src/real.txt").exists());
}

#[test]
fn commit_of_a_create_is_stale_when_the_file_appeared_after_prepare() {
    let fixture = Fixture::standard();
    let sandbox = fixture.sandbox("");
    let plan = plan(&sandbox, json!({"path": "src/new.rs", "content": "mine\n"})).unwrap();
    fixture.write("src/new.rs", "theirs\n");
    let error = commit(&sandbox, &plan).unwrap_err();
    assert_eq!(
        (error.code().as_str(), error.to_string()),
        (
            "stale",
            "`src/new.rs` changed since the proposal: the file was created since".to_owned()
        )
    );
    assert_eq!(fixture.read("src/new.rs"), "theirs\n");
}

#[test]
fn commit_is_stale_when_a_link_now_leads_elsewhere() {
    let fixture = Fixture::standard();
    symlink("src/real.txt", fixture.root.join("alias.txt")).unwrap();
    let sandbox = fixture.sandbox("");
    let plan = plan(&sandbox, json!({"path": "alias.txt", "content": "new\n"})).unwrap();
    assert_eq!(
        (
            the_change(&plan).resolved_path.as_str(),
            plan.summary.as_str()
        ),
        ("src/real.txt", "MODIFY alias.txt (-> src/real.txt)")
    );
    fixture.write("src/twin.txt", "real\n");
    fs::remove_file(fixture.root.join("alias.txt")).unwrap();
    symlink("src/twin.txt", fixture.root.join("alias.txt")).unwrap();
    assert_eq!(code(&commit(&sandbox, &plan)), "stale");
    assert_eq!(
        (fixture.read("src/real.txt"), fixture.read("src/twin.txt")),
        ("real\n".to_owned(), "real\n".to_owned())
    );
}

#[test]
fn a_write_through_a_link_inside_the_root_changes_the_target() {
    let fixture = Fixture::standard();
    let sandbox = fixture.sandbox("");
    let plan = plan(
        &sandbox,
        json!({"path": "link_in/real.txt", "content": "via link\n"}),
    )
    .unwrap();
    commit(&sandbox, &plan).unwrap();
    assert_eq!(fixture.read("src/real.txt"), "via link\n");
    assert!(
        fs::symlink_metadata(fixture.root.join("link_in"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[test]
fn permission_bits_are_kept_and_setuid_is_dropped() {
    let fixture = Fixture::standard();
    let sandbox = fixture.sandbox("");
    fixture.write("src/run.sh", "#!/bin/sh\n");
    fixture.write("src/private.txt", "p\n");
    let set_mode = |path: &str, mode: u32| {
        fs::set_permissions(fixture.root.join(path), fs::Permissions::from_mode(mode)).unwrap();
    };
    set_mode("src/run.sh", 0o4751);
    set_mode("src/private.txt", 0o600);
    for path in ["src/run.sh", "src/private.txt"] {
        let plan = plan(&sandbox, json!({"path": path, "content": "changed\n"})).unwrap();
        commit(&sandbox, &plan).unwrap();
    }
    assert_eq!(
        (
            mode_of(&fixture, "src/run.sh"),
            mode_of(&fixture, "src/private.txt")
        ),
        (0o751, 0o600)
    );
}

#[test]
fn create_parents_makes_the_missing_directories() {
    let fixture = Fixture::standard();
    let sandbox = fixture.sandbox("");
    let plan = plan(
        &sandbox,
        json!({"path": "link_in/a/b/c.rs", "content": "c\n", "create_parents": true}),
    )
    .unwrap();
    let change = the_change(&plan);
    assert_eq!(
        (
            change.resolved_path.as_str(),
            change.create_parents,
            plan.creates_only()
        ),
        ("src/a/b/c.rs", true, true)
    );
    assert!(!fixture.root.join("src/a").exists());
    commit(&sandbox, &plan).unwrap();
    assert_eq!(fixture.read("src/a/b/c.rs"), "c\n");
    // A parent removed between prepare and commit, without create_parents.
    let plan = self::plan(&sandbox, json!({"path": "src/a/b/d.rs", "content": "d\n"})).unwrap();
    fs::remove_dir_all(fixture.root.join("src/a")).unwrap();
    assert_eq!(code(&commit(&sandbox, &plan)), "parent_not_found");
    assert!(!fixture.root.join("src/a").exists());
}

/// Prepares a write under `src/sub`, replaces `src/sub` with a link to a
/// directory outside holding the same content, then commits.
fn swap_directory_for_link(
    yaml: &str,
    link_target: &str,
    path: &str,
) -> (String, Vec<(String, String)>) {
    let fixture = Fixture::standard();
    fixture.write("src/sub/a.txt", "a\n");
    fs::create_dir(fixture.outside.join("sub")).unwrap();
    fs::write(fixture.outside.join("sub/a.txt"), "a\n").unwrap();
    let sandbox = fixture.sandbox(yaml);
    let plan = plan(&sandbox, json!({"path": path, "content": "pwned\n"})).unwrap();
    fs::rename(
        fixture.root.join("src/sub"),
        fixture.root.join("src/sub-old"),
    )
    .unwrap();
    symlink(fixture.expand(link_target), fixture.root.join("src/sub")).unwrap();
    let outcome = code(&commit(&sandbox, &plan));
    (outcome, fixture.outside_snapshot())
}

#[test]
fn a_directory_swapped_for_a_link_to_outside_is_never_written_through() {
    let untouched = vec![
        ("secret.txt".to_owned(), OUTSIDE_SECRET.to_owned()),
        ("sub/".to_owned(), String::new()),
        ("sub/a.txt".to_owned(), "a\n".to_owned()),
    ];
    let mut expected = Vec::new();
    let mut actual = Vec::new();
    for (mode, yaml) in [
        ("within_root_only", ""),
        ("deny", "file_broker:\n  follow_symlinks: deny\n"),
        ("allow", "file_broker:\n  follow_symlinks: allow\n"),
    ] {
        for link in ["{outside}/sub", "../../outside/sub"] {
            for path in ["src/sub/a.txt", "src/sub/new.txt"] {
                let label = format!("{mode} {link} {path}");
                expected.push((
                    label.clone(),
                    "path_forbidden".to_owned(),
                    untouched.clone(),
                ));
                let (outcome, outside) = swap_directory_for_link(yaml, link, path);
                actual.push((label, outcome, outside));
            }
        }
    }
    assert_eq!(expected, actual);
}

#[test]
fn a_hard_linked_file_is_refused_unless_hard_links_are_allowed() {
    let fixture = Fixture::standard();
    let sandbox = fixture.sandbox("");
    let refused = plan(&sandbox, json!({"path": "hl.txt", "content": "replaced\n"}));
    assert_eq!(code(&refused), "path_forbidden");
    assert_eq!(fixture.read("hl.txt"), OUTSIDE_SECRET);
}

#[test]
fn a_write_through_an_allowed_hard_link_leaves_the_other_name_alone() {
    let fixture = Fixture::standard();
    let sandbox = fixture.sandbox("file_broker:\n  allow_hardlinks: true\n");
    let plan = plan(&sandbox, json!({"path": "hl.txt", "content": "replaced\n"})).unwrap();
    assert_eq!(plan.single_base_hash(), Some(sha256_hex(OUTSIDE_SECRET)));
    commit(&sandbox, &plan).unwrap();
    assert_eq!(fixture.read("hl.txt"), "replaced\n");
    assert_eq!(
        fixture.outside_snapshot(),
        vec![("secret.txt".to_owned(), OUTSIDE_SECRET.to_owned())]
    );
}

#[test]
fn diff_preview_is_cut_on_a_character_boundary() {
    let fixture = Fixture::standard();
    let sandbox = fixture.sandbox("");
    let plan = plan(&sandbox, json!({"path": "src/é.rs", "content": "ééé\n"})).unwrap();
    assert_eq!(
        plan.diff,
        "--- /dev/null\n+++ b/src/é.rs\n@@ -0,0 +1 @@\n+ééé\n"
    );
    assert_eq!(
        plan.diff_preview(45),
        "--- /dev/null\n+++ b/src/é.rs\n@@ -0,0 +1 @@\n+é\n... diff truncated: 45 of 48 characters shown\n"
    );
    assert_eq!(plan.diff_preview(48), plan.diff);
    assert_eq!(plan.diff_preview(8_000), plan.diff);
}

#[test]
fn a_stored_plan_applies_and_a_tampered_one_does_not() {
    let fixture = Fixture::standard();
    let sandbox = fixture.sandbox("");
    let plan = plan(
        &sandbox,
        json!({"path": "src/real.txt", "content": "approved\n"}),
    )
    .unwrap();
    let stored = serde_json::to_string(&plan).unwrap();

    let mut tampered: ChangePlan = serde_json::from_str(&stored).unwrap();
    tampered.changes[0].after = Some(b"something else\n".to_vec());
    assert_eq!(code(&commit(&sandbox, &tampered)), "invalid_input");
    assert_eq!(fixture.read("src/real.txt"), "real\n");

    // Another process, another sandbox, the same plan.
    let other = fixture.sandbox("");
    let loaded: ChangePlan = serde_json::from_str(&stored).unwrap();
    commit(&other, &loaded).unwrap();
    assert_eq!(fixture.read("src/real.txt"), "approved\n");
}

#[test]
fn many_plans_against_one_file_exactly_one_applies() {
    let fixture = Fixture::standard();
    let plans: Vec<ChangePlan> = (0..16)
        .map(|i| {
            let sandbox = fixture.sandbox("");
            plan(
                &sandbox,
                json!({"path": "src/real.txt", "content": format!("writer {i}\n")}),
            )
            .unwrap()
        })
        .collect();
    let barrier = Arc::new(Barrier::new(plans.len()));
    let outcomes: Vec<(String, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = plans
            .iter()
            .map(|plan| {
                let barrier = barrier.clone();
                let sandbox = fixture.sandbox("");
                scope.spawn(move || {
                    barrier.wait();
                    (
                        String::from_utf8(the_change(plan).after.clone().unwrap()).unwrap(),
                        code(&commit(&sandbox, plan)),
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().unwrap())
            .collect()
    });
    let winners: Vec<&String> = outcomes
        .iter()
        .filter(|(_, outcome)| outcome == "ok")
        .map(|(content, _)| content)
        .collect();
    let stale = outcomes
        .iter()
        .filter(|(_, outcome)| outcome == "stale")
        .count();
    assert_eq!((winners.len(), stale), (1, 15));
    assert_eq!(&fixture.read("src/real.txt"), winners[0]);
    assert_eq!(names(&fixture, "src"), ["main.rs", "real.txt", "up"]);
}

#[test]
fn undo_restores_the_before_content_or_reports_a_conflict() {
    let fixture = Fixture::standard();
    let sandbox = fixture.sandbox("");
    fs::set_permissions(
        fixture.root.join("src/real.txt"),
        fs::Permissions::from_mode(0o640),
    )
    .unwrap();

    // Modify, then undo.
    let plan = plan(
        &sandbox,
        json!({"path": "src/real.txt", "content": "after\n"}),
    )
    .unwrap();
    let before = before_of(&sandbox, &plan).unwrap();
    assert_eq!(before.as_deref(), Some(&b"real\n"[..]));
    commit(&sandbox, &plan).unwrap();
    assert_eq!(
        undo(
            &sandbox,
            "src/real.txt",
            &sha256_hex("after\n"),
            before.as_deref()
        )
        .unwrap(),
        [FileApplied {
            path: "src/real.txt".into(),
            before_hash: Some(sha256_hex("after\n")),
            after_hash: Some(sha256_hex("real\n")),
        }]
    );
    assert_eq!(
        (
            fixture.read("src/real.txt"),
            mode_of(&fixture, "src/real.txt")
        ),
        ("real\n".to_owned(), 0o640)
    );

    // Create, then undo: the file goes away.
    let plan = self::plan(&sandbox, json!({"path": "src/new.rs", "content": "new\n"})).unwrap();
    assert_eq!(before_of(&sandbox, &plan).unwrap(), None);
    commit(&sandbox, &plan).unwrap();
    assert_eq!(
        undo(&sandbox, "src/new.rs", &sha256_hex("new\n"), None).unwrap(),
        [FileApplied {
            path: "src/new.rs".into(),
            before_hash: Some(sha256_hex("new\n")),
            after_hash: None,
        }]
    );
    assert_eq!(names(&fixture, "src"), ["main.rs", "real.txt", "up"]);

    // Changed after the apply: conflict, nothing changes.
    let plan = self::plan(
        &sandbox,
        json!({"path": "other/existing.txt", "content": "after\n"}),
    )
    .unwrap();
    let before = before_of(&sandbox, &plan).unwrap();
    commit(&sandbox, &plan).unwrap();
    let after_hash = sha256_hex("after\n");
    fixture.write("other/existing.txt", "edited by hand\n");
    let conflict = undo(
        &sandbox,
        "other/existing.txt",
        &after_hash,
        before.as_deref(),
    );
    assert_eq!(code(&conflict), "conflict");
    assert_eq!(fixture.read("other/existing.txt"), "edited by hand\n");

    // Removed after the apply: conflict too.
    fs::remove_file(fixture.root.join("other/existing.txt")).unwrap();
    let conflict = undo(
        &sandbox,
        "other/existing.txt",
        &after_hash,
        before.as_deref(),
    );
    assert_eq!(code(&conflict), "conflict");
    assert!(!fixture.root.join("other/existing.txt").exists());

    // Undo goes through the sandbox like everything else.
    assert_eq!(
        code(&undo(
            &sandbox,
            "link_out_file",
            &sha256_hex(OUTSIDE_SECRET),
            Some(b"x")
        )),
        "path_forbidden"
    );
    assert_eq!(
        fixture.outside_snapshot(),
        vec![("secret.txt".to_owned(), OUTSIDE_SECRET.to_owned())]
    );
}

#[test]
fn snapshot_before_is_stale_when_the_file_changed() {
    let fixture = Fixture::standard();
    let sandbox = fixture.sandbox("");
    let plan = plan(
        &sandbox,
        json!({"path": "src/real.txt", "content": "after\n"}),
    )
    .unwrap();
    fixture.write("src/real.txt", "changed\n");
    assert_eq!(code(&before_of(&sandbox, &plan)), "stale");
}
