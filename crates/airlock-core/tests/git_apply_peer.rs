//! apply_patch's unified diffs against the peers themselves: `git diff` writes the
//! patch, `git apply` and GNU `patch` apply it, and airlock must give the same bytes.
//!
//! - Random texts (LF, CRLF and mixed line endings, with or without a final newline)
//!   and random edits: git's patch gives git's bytes, which are the edited text.
//! - New files, CRLF included: the added file is byte for byte what git writes.
//! - The same patches damaged (hunks moved by wrong line numbers, the file's line
//!   endings changed, lines added around): wherever `git apply` still accepts the
//!   patch, airlock's bytes are git's.
//!
//! Needs `git` and GNU `patch` on PATH (CI installs them). A plain `cargo test`
//! without them skips these properties and says so on stderr; with
//! `AIRLOCK_TEST_PEERS=1` (`scripts/test.sh`) their absence fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Stdio};

use airlock_core::patch::{PatchFormat, PatchOp, apply_chunks, parse};
use proptest::prelude::*;

/// Whether `git` and GNU `patch` are here (see the module's note), decided
/// and told once.
fn peers_present() -> bool {
    static PRESENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PRESENT.get_or_init(|| {
        let runs = |program: &str| {
            Command::new(program)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|status| status.success())
        };
        let missing: Vec<&str> = ["git", "patch"]
            .into_iter()
            .filter(|program| !runs(program))
            .collect();
        if missing.is_empty() {
            return true;
        }
        assert!(
            std::env::var("AIRLOCK_TEST_PEERS").as_deref() != Ok("1"),
            "git_apply_peer needs {missing:?} (AIRLOCK_TEST_PEERS=1 requires every peer)"
        );
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "skipped git_apply_peer: needs {missing:?} (apt-get install git patch)"
        );
        false
    })
}

/// A scratch git repository holding one file, `f`.
struct Repo {
    dir: tempfile::TempDir,
}

impl Repo {
    fn new() -> Repo {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repo { dir };
        repo.git(&["init", "-q"]);
        repo.git(&["config", "core.autocrlf", "false"]);
        repo.git(&["config", "core.safecrlf", "false"]);
        repo
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn git(&self, args: &[&str]) -> std::process::Output {
        Command::new("git")
            .args(args)
            .current_dir(self.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", self.path())
            .stdin(Stdio::null())
            .output()
            .expect("git runs")
    }

    fn write(&self, name: &str, bytes: &[u8]) {
        std::fs::write(self.path().join(name), bytes).unwrap();
    }

    fn read(&self, name: &str) -> Option<Vec<u8>> {
        std::fs::read(self.path().join(name)).ok()
    }

    /// `git diff` of `f` from `a` to `b`; `f` holds `a` again afterwards.
    fn diff(&self, a: &str, b: &str) -> String {
        self.write("f", a.as_bytes());
        let added = self.git(&["add", "f"]);
        assert!(added.status.success(), "{added:?}");
        self.write("f", b.as_bytes());
        let diff = self.git(&["diff", "--no-color", "--no-ext-diff", "--", "f"]);
        assert!(diff.status.success(), "{diff:?}");
        self.write("f", a.as_bytes());
        String::from_utf8(diff.stdout).unwrap()
    }

    /// What `git apply` makes of `f` holding `a`, or `None` if it refuses.
    fn git_apply(&self, a: &str, patch: &str) -> Option<Vec<u8>> {
        self.write("f", a.as_bytes());
        self.write("p.diff", patch.as_bytes());
        let applied = self.git(&["apply", "p.diff"]);
        applied.status.success().then(|| self.read("f").unwrap())
    }

    /// What GNU patch makes of `f` holding `a` (exact, no fuzz, no backup), or `None`.
    fn gnu_patch(&self, a: &str, patch: &str) -> Option<Vec<u8>> {
        self.write("f", a.as_bytes());
        self.write("p.diff", patch.as_bytes());
        let output = Command::new("patch")
            .args([
                "-p1",
                "-s",
                "-F0",
                "--no-backup-if-mismatch",
                "-i",
                "p.diff",
            ])
            .current_dir(self.path())
            .stdin(Stdio::null())
            .output()
            .expect("GNU patch runs");
        output.status.success().then(|| self.read("f").unwrap())
    }
}

/// What airlock makes of `a` with the unified diff `patch` (one update of `f`).
fn airlock(a: &str, patch: &str) -> Result<Vec<u8>, String> {
    let parsed = parse(patch, PatchFormat::Unified).map_err(|error| error.to_string())?;
    match &parsed.ops[..] {
        [PatchOp::Update { path, chunks, .. }] => apply_chunks(path, a, chunks)
            .map(String::into_bytes)
            .map_err(|error| error.to_string()),
        ops => Err(format!("expected one update, parsed {ops:?}")),
    }
}

/// A line's text, drawn so that texts repeat and a hunk's context recurs.
fn word() -> impl Strategy<Value = &'static str> {
    prop_oneof![5 => Just("a"), 3 => Just("b"), 1 => Just(""), 1 => Just("c d"), 1 => Just("  a")]
}

fn ending() -> impl Strategy<Value = &'static str> {
    prop_oneof![3 => Just("\n"), 1 => Just("\r\n")]
}

/// A text: lines with LF or CRLF endings (all one kind, or mixed), the last one
/// perhaps without.
fn text() -> impl Strategy<Value = Vec<(&'static str, &'static str)>> {
    (
        prop::collection::vec((word(), ending()), 0..30),
        any::<bool>(),
        ending(),
    )
        .prop_map(|(mut lines, mixed, only)| {
            if !mixed {
                for line in &mut lines {
                    line.1 = only;
                }
            }
            lines
        })
}

fn join(lines: &[(&str, &str)], final_newline: bool) -> String {
    let mut out = String::new();
    for (index, (word, ending)) in lines.iter().enumerate() {
        out.push_str(word);
        if final_newline || index + 1 < lines.len() {
            out.push_str(ending);
        }
    }
    out
}

#[derive(Debug, Clone)]
enum Edit {
    Replace(usize, &'static str, &'static str),
    Insert(usize, &'static str, &'static str),
    Delete(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), word(), ending()).prop_map(|(at, w, e)| Edit::Replace(at, w, e)),
        (any::<usize>(), word(), ending()).prop_map(|(at, w, e)| Edit::Insert(at, w, e)),
        any::<usize>().prop_map(Edit::Delete),
    ]
}

/// An old text and a new one made from it by a few edits.
fn text_pair() -> impl Strategy<Value = (String, String)> {
    (
        text(),
        prop::collection::vec(edit(), 1..6),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(old, edits, old_final, new_final)| {
            let mut new = old.clone();
            for edit in edits {
                match edit {
                    Edit::Replace(at, w, e) if !new.is_empty() => {
                        let at = at % new.len();
                        new[at] = (w, e);
                    }
                    Edit::Insert(at, w, e) => new.insert(at % (new.len() + 1), (w, e)),
                    Edit::Delete(at) if !new.is_empty() => {
                        new.remove(at % new.len());
                    }
                    Edit::Replace(..) | Edit::Delete(_) => {}
                }
            }
            (join(&old, old_final), join(&new, new_final))
        })
}

/// Ways to damage a patch or the file it applies to.
#[derive(Debug, Clone)]
enum Damage {
    /// Moves every hunk's line numbers by this much.
    ShiftHunks(i64),
    /// Lines put before the file's text.
    Prepend(usize),
    /// Lines put after it.
    Append(usize),
    /// The file's LF endings made CRLF, or the other way round.
    FlipEndings,
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (-6i64..7).prop_map(Damage::ShiftHunks),
        (1usize..4).prop_map(Damage::Prepend),
        (1usize..4).prop_map(Damage::Append),
        Just(Damage::FlipEndings),
    ]
}

/// The hunk headers of `patch` with both start lines moved by `by` (kept at 0 or
/// more).
fn shift_hunks(patch: &str, by: i64) -> String {
    let mut out = String::new();
    for line in patch.split_inclusive('\n') {
        let Some(rest) = line.strip_prefix("@@ -") else {
            out.push_str(line);
            continue;
        };
        let shift = |range: &str| -> String {
            let (start, len) = match range.split_once(',') {
                Some((start, len)) => (start, Some(len)),
                None => (range, None),
            };
            let start: i64 = start.parse().unwrap();
            let start = if start == 0 { 0 } else { (start + by).max(1) };
            match len {
                Some(len) => format!("{start},{len}"),
                None => start.to_string(),
            }
        };
        let (old, rest) = rest.split_once(" +").unwrap();
        let (new, rest) = rest.split_once(' ').unwrap();
        out.push_str(&format!("@@ -{} +{} {rest}", shift(old), shift(new)));
    }
    out
}

fn damaged(a: &str, patch: &str, damage: &Damage) -> (String, String) {
    match damage {
        Damage::ShiftHunks(by) => (a.to_owned(), shift_hunks(patch, *by)),
        Damage::Prepend(lines) => ("a\n".repeat(*lines) + a, patch.to_owned()),
        Damage::Append(lines) => {
            let mut text = a.to_owned();
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            (text + &"b\n".repeat(*lines), patch.to_owned())
        }
        Damage::FlipEndings => {
            let flipped = if a.contains("\r\n") {
                a.replace("\r\n", "\n")
            } else {
                a.replace('\n', "\r\n")
            };
            (flipped, patch.to_owned())
        }
    }
}

fn show(bytes: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(bytes))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    /// git's own patch of a random edit: git, GNU patch and airlock all give the
    /// edited text, byte for byte.
    #[test]
    fn gits_patch_of_a_random_edit_gives_gits_bytes((a, b) in text_pair()) {
        if !peers_present() {
            return Ok(());
        }
        prop_assume!(a != b);
        let repo = Repo::new();
        let patch = repo.diff(&a, &b);
        let by_git = repo.git_apply(&a, &patch);
        prop_assert_eq!(by_git.as_deref(), Some(b.as_bytes()), "git apply:\n{}", patch);
        let by_patch = repo.gnu_patch(&a, &patch);
        prop_assert_eq!(by_patch.as_deref(), Some(b.as_bytes()), "GNU patch:\n{}", patch);
        let ours = airlock(&a, &patch);
        prop_assert!(ours.as_deref() == Ok(b.as_bytes()), "airlock {:?}, expected {}\n{}", ours.map(|bytes| show(&bytes)), show(b.as_bytes()), patch);
    }

    /// The same patch after damage: wherever git still applies it, airlock's bytes
    /// are git's.
    #[test]
    fn wherever_git_applies_a_damaged_patch_airlock_agrees(
        (a, b) in text_pair(),
        damage in prop::collection::vec(damage(), 1..3),
    ) {
        if !peers_present() {
            return Ok(());
        }
        prop_assume!(a != b);
        let repo = Repo::new();
        let mut patch = repo.diff(&a, &b);
        let mut file = a.clone();
        for damage in &damage {
            (file, patch) = damaged(&file, &patch, damage);
        }
        if let Some(by_git) = repo.git_apply(&file, &patch) {
            let ours = airlock(&file, &patch);
            prop_assert!(ours.as_deref() == Ok(&by_git[..]), "airlock {:?}, git {}\nfile {}\n{}", ours.map(|bytes| show(&bytes)), show(&by_git), show(file.as_bytes()), patch);
        } else {
            // Refused by git: airlock may be more lenient, but must not panic.
            let _ = airlock(&file, &patch);
        }
    }

    /// A new file, CRLF or not, final newline or not: airlock creates what git does.
    #[test]
    fn a_new_file_is_created_byte_for_byte(lines in text(), final_newline in any::<bool>()) {
        if !peers_present() {
            return Ok(());
        }
        let content = join(&lines, final_newline);
        prop_assume!(!content.is_empty());
        let repo = Repo::new();
        repo.write("g", content.as_bytes());
        let intent = repo.git(&["add", "-N", "g"]);
        prop_assert!(intent.status.success());
        let diff = repo.git(&["diff", "--no-color", "--", "g"]);
        let patch = String::from_utf8(diff.stdout).unwrap();
        std::fs::remove_file(repo.path().join("g")).unwrap();
        repo.git(&["rm", "-q", "--cached", "g"]);
        repo.write("p.diff", patch.as_bytes());
        let applied = repo.git(&["apply", "p.diff"]);
        prop_assert!(applied.status.success(), "{:?}\n{}", applied, patch);
        let by_git = repo.read("g").unwrap();
        prop_assert_eq!(&by_git, &content.as_bytes().to_vec());
        let parsed = parse(&patch, PatchFormat::Unified).map_err(|error| TestCaseError::fail(error.to_string()))?;
        match &parsed.ops[..] {
            [PatchOp::Add { path, content: ours }] => {
                prop_assert_eq!(path, "g");
                prop_assert!(ours.as_bytes() == &by_git[..], "airlock {}, git {}\n{}", show(ours.as_bytes()), show(&by_git), patch);
            }
            ops => prop_assert!(false, "expected one add, parsed {ops:?}"),
        }
    }
}
