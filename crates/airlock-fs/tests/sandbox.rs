#![allow(clippy::unwrap_used, clippy::expect_used)]

//! The adversarial path corpus: every entry is resolved under each
//! `follow_symlinks` setting and the whole table of outcomes is compared.

mod common;

use airlock_fs::{Access, FileKind, Sandbox};
use common::Fixture;
use pretty_assertions::assert_eq;

const WITHIN: &str = "";
const DENY: &str = "file_broker:\n  follow_symlinks: deny\n";
const ALLOW: &str = "file_broker:\n  follow_symlinks: allow\n";
const ABSOLUTE_WITHIN_ROOT: &str = "file_broker:\n  absolute_paths: within_root\n";

use Access::{Read as R, Write as W};

/// `ok <resolved>` (with `(missing)` when it does not exist; `<root>` for the
/// root itself) or the error code.
fn outcome(sandbox: &Sandbox, fixture: &Fixture, access: Access, raw: &str) -> String {
    match sandbox.resolve("path", &fixture.expand(raw), access) {
        Ok(path) => {
            let resolved = if path.resolved().is_empty() {
                "<root>"
            } else {
                path.resolved()
            };
            let missing = if path.exists() { "" } else { " (missing)" };
            format!("ok {resolved}{missing}")
        }
        Err(error) => error.code().to_string(),
    }
}

fn shown(raw: &str) -> String {
    let escaped = raw.replace('\0', "\\0");
    if escaped.chars().count() > 40 {
        let head: String = escaped.chars().take(12).collect();
        format!("{head}… ({} bytes)", raw.len())
    } else {
        escaped
    }
}

#[test]
fn adversarial_corpus_under_each_symlink_policy() {
    let long_name = "a".repeat(300);
    let long_path = format!("{}f", "d/".repeat(2100));
    // (access, path, within_root_only, deny, allow)
    let cases: Vec<(Access, &str, &str, &str, &str)> = vec![
        (
            R,
            "src/main.rs",
            "ok src/main.rs",
            "ok src/main.rs",
            "ok src/main.rs",
        ),
        (
            R,
            "./src//../src/./main.rs/",
            "ok src/main.rs",
            "ok src/main.rs",
            "ok src/main.rs",
        ),
        (
            R,
            "données/café.txt",
            "ok données/café.txt",
            "ok données/café.txt",
            "ok données/café.txt",
        ),
        (R, "", "ok <root>", "ok <root>", "ok <root>"),
        (W, ".", "path_forbidden", "path_forbidden", "path_forbidden"),
        // Escapes, absolute paths, NUL, length.
        (
            R,
            "../outside/secret.txt",
            "path_forbidden",
            "path_forbidden",
            "path_forbidden",
        ),
        (
            R,
            "src/../../outside/secret.txt",
            "path_forbidden",
            "path_forbidden",
            "path_forbidden",
        ),
        (
            R,
            "{root}/src/main.rs",
            "path_forbidden",
            "path_forbidden",
            "path_forbidden",
        ),
        (
            R,
            "/etc/passwd",
            "path_forbidden",
            "path_forbidden",
            "path_forbidden",
        ),
        (
            R,
            "src/ma\0in.rs",
            "path_forbidden",
            "path_forbidden",
            "path_forbidden",
        ),
        (
            W,
            "new\0.txt",
            "path_forbidden",
            "path_forbidden",
            "path_forbidden",
        ),
        (
            R,
            &long_name,
            "invalid_input",
            "invalid_input",
            "invalid_input",
        ),
        (
            W,
            &long_path,
            "invalid_input",
            "invalid_input",
            "invalid_input",
        ),
        // Links that leave the root.
        (
            R,
            "link_out_dir/secret.txt",
            "path_forbidden",
            "path_forbidden",
            "path_forbidden",
        ),
        (
            R,
            "link_out_dir",
            "path_forbidden",
            "path_forbidden",
            "path_forbidden",
        ),
        (
            W,
            "link_out_dir/new.txt",
            "path_forbidden",
            "path_forbidden",
            "path_forbidden",
        ),
        (
            R,
            "link_out_file",
            "path_forbidden",
            "path_forbidden",
            "path_forbidden",
        ),
        (
            W,
            "link_out_file",
            "path_forbidden",
            "path_forbidden",
            "path_forbidden",
        ),
        (
            R,
            "dangling_out",
            "path_forbidden",
            "path_forbidden",
            "not_found",
        ),
        (
            W,
            "dangling_out",
            "path_forbidden",
            "path_forbidden",
            "path_forbidden",
        ),
        (R, "dangling_in", "not_found", "path_forbidden", "not_found"),
        (
            W,
            "dangling_in",
            "path_forbidden",
            "path_forbidden",
            "path_forbidden",
        ),
        (
            R,
            "loop_a",
            "path_forbidden",
            "path_forbidden",
            "path_forbidden",
        ),
        // Links inside the root.
        (
            R,
            "link_in/real.txt",
            "ok src/real.txt",
            "path_forbidden",
            "ok src/real.txt",
        ),
        (
            W,
            "link_in/real.txt",
            "ok src/real.txt",
            "path_forbidden",
            "ok src/real.txt",
        ),
        (
            W,
            "link_in/new.rs",
            "ok src/new.rs (missing)",
            "path_forbidden",
            "ok src/new.rs (missing)",
        ),
        (
            R,
            "src/up/src/main.rs",
            "ok src/main.rs",
            "path_forbidden",
            "ok src/main.rs",
        ),
        (
            R,
            "link_abs_in",
            "path_forbidden",
            "path_forbidden",
            "ok src/real.txt",
        ),
        (
            R,
            "link_root_abs/src/main.rs",
            "path_forbidden",
            "path_forbidden",
            "ok src/main.rs",
        ),
        // `..` is resolved lexically first, so it cannot climb out of a link.
        (
            R,
            "src/up/../outside/secret.txt",
            "ok src/outside/secret.txt (missing)",
            "ok src/outside/secret.txt (missing)",
            "ok src/outside/secret.txt (missing)",
        ),
        // Deny globs, on the requested and on the resolved path.
        (R, ".env", "path_denied", "path_denied", "path_denied"),
        (R, "ok.txt", "path_denied", "path_forbidden", "path_denied"),
        (W, "ok.txt", "path_denied", "path_forbidden", "path_denied"),
        (
            R,
            "secrets/token",
            "path_denied",
            "path_denied",
            "path_denied",
        ),
        (
            R,
            "keys/server.pem",
            "path_denied",
            "path_denied",
            "path_denied",
        ),
        // Protected paths.
        (
            R,
            ".airlock/audit.jsonl",
            "path_forbidden",
            "path_forbidden",
            "path_forbidden",
        ),
        (
            R,
            ".AIRLOCK/audit.jsonl",
            "path_forbidden",
            "path_forbidden",
            "path_forbidden",
        ),
        (
            R,
            "link_airlock/audit.jsonl",
            "path_forbidden",
            "path_forbidden",
            "path_forbidden",
        ),
        (
            W,
            "link_airlock/new.txt",
            "path_forbidden",
            "path_forbidden",
            "path_forbidden",
        ),
        (
            R,
            ".git/config",
            "ok .git/config",
            "ok .git/config",
            "ok .git/config",
        ),
        (
            W,
            ".git/config",
            "path_forbidden",
            "path_forbidden",
            "path_forbidden",
        ),
        (
            R,
            "git_link",
            "ok .git/config",
            "path_forbidden",
            "ok .git/config",
        ),
        (
            W,
            "git_link",
            "path_forbidden",
            "path_forbidden",
            "path_forbidden",
        ),
        (
            R,
            "airlock.yaml",
            "ok airlock.yaml",
            "ok airlock.yaml",
            "ok airlock.yaml",
        ),
        (
            W,
            "airlock.yaml",
            "path_forbidden",
            "path_forbidden",
            "path_forbidden",
        ),
        (
            W,
            "config_link",
            "path_forbidden",
            "path_forbidden",
            "path_forbidden",
        ),
        // The create allowlist.
        (
            W,
            "src/new.rs",
            "ok src/new.rs (missing)",
            "ok src/new.rs (missing)",
            "ok src/new.rs (missing)",
        ),
        (
            W,
            "new.txt",
            "ok new.txt (missing)",
            "ok new.txt (missing)",
            "ok new.txt (missing)",
        ),
        (
            W,
            "other/new.txt",
            "create_not_allowed",
            "create_not_allowed",
            "create_not_allowed",
        ),
        (
            W,
            "other/existing.txt",
            "ok other/existing.txt",
            "ok other/existing.txt",
            "ok other/existing.txt",
        ),
        (
            W,
            "nodir/new.txt",
            "create_not_allowed",
            "create_not_allowed",
            "create_not_allowed",
        ),
        (
            W,
            "src/deep/er/new.rs",
            "ok src/deep/er/new.rs (missing)",
            "ok src/deep/er/new.rs (missing)",
            "ok src/deep/er/new.rs (missing)",
        ),
        (
            R,
            "src/nothing.rs",
            "ok src/nothing.rs (missing)",
            "ok src/nothing.rs (missing)",
            "ok src/nothing.rs (missing)",
        ),
        // A regular file used as a directory.
        (
            R,
            "file.txt/x",
            "not_a_directory",
            "not_a_directory",
            "not_a_directory",
        ),
        (
            W,
            "file.txt/x",
            "not_a_directory",
            "not_a_directory",
            "not_a_directory",
        ),
        // A hard link to a file outside resolves like any file: reading or
        // writing it is what is refused (write_file.rs,
        // `a_hard_linked_file_is_refused_unless_hard_links_are_allowed`).
        (R, "hl.txt", "ok hl.txt", "ok hl.txt", "ok hl.txt"),
    ];

    let fixture = Fixture::standard();
    let sandboxes = [
        fixture.sandbox(WITHIN),
        fixture.sandbox(DENY),
        fixture.sandbox(ALLOW),
    ];
    let mut expected = Vec::new();
    let mut actual = Vec::new();
    for (access, raw, within, deny, allow) in &cases {
        for ((name, want), sandbox) in [
            ("within_root_only", within),
            ("deny", deny),
            ("allow", allow),
        ]
        .into_iter()
        .zip(&sandboxes)
        {
            let label = format!("{name:<16} {access:<5?} {:<34}", shown(raw));
            expected.push(format!("{label} => {want}"));
            actual.push(format!(
                "{label} => {}",
                outcome(sandbox, &fixture, *access, raw)
            ));
        }
    }
    assert_eq!(expected.join("\n"), actual.join("\n"));
    // Nothing outside was touched by resolving.
    assert_eq!(
        fixture.outside_snapshot(),
        vec![("secret.txt".to_owned(), common::OUTSIDE_SECRET.to_owned())]
    );
}

#[test]
fn absolute_paths_inside_the_root_when_allowed() {
    let fixture = Fixture::standard();
    let sandbox = fixture.sandbox(ABSOLUTE_WITHIN_ROOT);
    let root_sibling = format!("{}-evil/x", fixture.root.display());
    let cases: Vec<(Access, &str, &str)> = vec![
        (R, "{root}/src/main.rs", "ok src/main.rs"),
        (R, "{root}", "ok <root>"),
        (R, "{root}/", "ok <root>"),
        (R, "{root}/./src/../src/real.txt", "ok src/real.txt"),
        (R, "{root}/../outside/secret.txt", "path_forbidden"),
        (
            R,
            "{root}/../../../../../../../../etc/passwd",
            "path_forbidden",
        ),
        (R, "{outside}/secret.txt", "path_forbidden"),
        (R, &root_sibling, "path_forbidden"),
        (R, "/etc/passwd", "path_forbidden"),
        (R, "{root}/.env", "path_denied"),
        (R, "{root}/ok.txt", "path_denied"),
        (R, "{root}/link_out_file", "path_forbidden"),
        (W, "{root}/.git/config", "path_forbidden"),
        (W, "{root}/src/new.rs", "ok src/new.rs (missing)"),
        (W, "{root}/other/new.txt", "create_not_allowed"),
        (R, "src/main.rs", "ok src/main.rs"),
    ];
    let expected: Vec<String> = cases
        .iter()
        .map(|(access, raw, want)| format!("{access:?} {raw} => {want}"))
        .collect();
    let actual: Vec<String> = cases
        .iter()
        .map(|(access, raw, _)| {
            format!(
                "{access:?} {raw} => {}",
                outcome(&sandbox, &fixture, *access, raw)
            )
        })
        .collect();
    assert_eq!(expected, actual);
}

#[test]
fn resolved_path_reports_kind_and_missing_parents() {
    let fixture = Fixture::standard();
    let sandbox = fixture.sandbox(WITHIN);
    let src = sandbox.resolve("path", "link_in", R).unwrap();
    assert_eq!(
        (src.requested(), src.resolved(), src.kind()),
        ("link_in", "src", Some(FileKind::Directory))
    );
    let deep = sandbox.resolve("path", "link_in/a/b/c.rs", W).unwrap();
    assert_eq!(
        (deep.resolved(), deep.kind(), deep.missing_parents()),
        (
            "src/a/b/c.rs",
            None,
            vec!["src/a".to_owned(), "src/a/b".to_owned()]
        )
    );
    let file = sandbox.resolve("path", "git_link", R).unwrap();
    assert_eq!(
        (file.requested(), file.resolved(), file.kind()),
        ("git_link", ".git/config", Some(FileKind::File))
    );
}

#[test]
fn error_messages_name_the_parameter_and_path() {
    let fixture = Fixture::standard();
    let sandbox = fixture.sandbox(WITHIN);
    let messages: Vec<String> = [
        ("../x", R),
        ("/etc/passwd", R),
        ("a\0b", R),
        ("link_out_dir/secret.txt", R),
        ("other/new.txt", W),
        ("ok.txt", R),
    ]
    .into_iter()
    .map(|(raw, access)| {
        sandbox
            .resolve("path", raw, access)
            .unwrap_err()
            .to_string()
    })
    .collect();
    assert_eq!(
        messages,
        vec![
            "path `../x` leaves the workspace root",
            "path `/etc/passwd` is absolute and absolute paths are rejected; paths are relative to the workspace root",
            "path contains a nul byte",
            "path `link_out_dir/secret.txt` leaves the workspace root through a symbolic link",
            "`other/new.txt` does not exist and new files may only be created at the root level or under src/, lib/, tests/, docs/, scripts/",
            "path `.env` matches deny glob `**/.env` (reached through `ok.txt`)",
        ]
    );
}
