//! The sandbox as a property (DESIGN §13): for random workspaces of files,
//! directories, symlinks (inside, outside, into the state dir and `.git`,
//! dangling, looping), hard links (to files outside and to protected ones)
//! and FIFOs, every tool call through the broker, allowed outright or
//! approved at once:
//!
//! - never shows a byte of a file outside the root, of the state dir, or of a
//!   denied path (`.env`, `secrets/**`);
//! - never writes outside the root, into the state dir, `.git` or the
//!   configuration file;
//! - is decided on where its path really leads: a read the rules deny under
//!   `src/**` is denied through any link, and a write the rules let through
//!   without asking (`docs/**`) only ever lands in `docs/`;
//! - never hangs (each call has a deadline).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use airlock_broker::Clock as _;
use airlock_broker::{Broker, Mode, Workspace};
use airlock_core::{ToolCall, config};
use proptest::prelude::*;
use serde_json::{Value, json};

/// Markers that must never come back from a call.
const OUTSIDE: &str = "OUTSIDE-SECRET";
const STATE: &str = "STATE-SECRET";
const ENV: &str = "ENV-SECRET";
const DENIED: &str = "DENIED-SECRET";
const SOURCE: &str = "SOURCE-SECRET";
/// Every write carries this, so it can be looked for where it must not be.
const MARK: &str = "WRITTEN-BY-A-TOOL";

const CONFIG: &str = "\
security:
  hitl:
    approval_mode: defer
    rules:
      - {tools: [read_file, grep, glob, list_dir, stat, exists], conditions: [{param: path, glob: \"src/**\"}], decision: deny}
      - {tools: [read_file, grep, glob, list_dir, stat, exists], conditions: [{param: path, glob: src}], decision: deny}
      - {tools: [write_file, edit_file], conditions: [{param: path, glob: \"docs/**\"}], require_approval: false}
file_broker:
  allowlisted_create_dirs: [\"\"]
";

/// Names a tree entry may have: plain ones, and ones the policy cares about.
const NAMES: &[&str] = &[
    "a",
    "b",
    "docs",
    "src",
    "secrets",
    ".env",
    "notes.txt",
    "d2",
];

#[derive(Debug, Clone)]
enum Kind {
    Dir,
    File,
    /// A symlink to one of [`LINK_TARGETS`].
    Symlink(usize),
    /// A hard link to one of [`HARD_TARGETS`].
    HardLink(usize),
    Fifo,
}

/// Where symlinks point: `{up}` climbs from the link's directory to the
/// root (a relative link, which the sandbox follows within the root);
/// `{root}` and `{outside}` are absolute.
const LINK_TARGETS: &[&str] = &[
    "{outside}",
    "{outside}/secret.txt",
    "{up}../outside/secret.txt",
    "{up}.airlock",
    "{up}.airlock/state.txt",
    "{root}/.airlock",
    "{up}.git",
    "{up}airlock.yaml",
    "{up}src",
    "{up}src/main.rs",
    "{root}/src/main.rs",
    "{up}docs",
    "{up}.env",
    "{up}secrets",
    "nowhere",
    ".",
    "..",
];

/// What hard links name.
const HARD_TARGETS: &[&str] = &[
    "{outside}/secret.txt",
    "{root}/.airlock/state.txt",
    "{root}/airlock.yaml",
    "{root}/src/main.rs",
];

fn entry() -> impl Strategy<Value = (Vec<usize>, Kind)> {
    let path = prop::collection::vec(0..NAMES.len(), 1..=2);
    let kind = prop_oneof![
        3 => Just(Kind::Dir),
        3 => Just(Kind::File),
        5 => (0..LINK_TARGETS.len()).prop_map(Kind::Symlink),
        2 => (0..HARD_TARGETS.len()).prop_map(Kind::HardLink),
        1 => Just(Kind::Fifo),
    ];
    (path, kind)
}

/// One tool call: which tool; its path: an entry of the tree (by index,
/// modulo their number), a name below it when `Some` (through a directory or
/// a link to one), or a random path when there are no entries; a move's
/// target; whether the person at the terminal approves it at once.
type CallSpec = (usize, usize, Option<usize>, Vec<usize>, Vec<usize>, bool);

fn call() -> impl Strategy<Value = CallSpec> {
    (
        0..TOOLS.len(),
        any::<usize>(),
        prop::option::of(0..NAMES.len()),
        prop::collection::vec(0..NAMES.len(), 1..=3),
        prop::collection::vec(0..NAMES.len(), 1..=3),
        any::<bool>(),
    )
}

const TOOLS: &[&str] = &[
    "read_file",
    "read_file",
    "read_file",
    "grep",
    "grep",
    "glob",
    "list_dir",
    "stat",
    "write_file",
    "edit_file",
    "delete_file",
    "move_file",
    "apply_patch",
];

struct World {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
}

/// `template` for a link `depth` directories below the root.
fn fill(template: &str, world: &World, depth: usize) -> String {
    template
        .replace("{outside}", world.outside.to_str().unwrap())
        .replace("{root}", world.root.to_str().unwrap())
        .replace("{up}", &"../".repeat(depth))
}

fn world(entries: &[(Vec<usize>, Kind)]) -> World {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let root = base.join("root");
    let outside = base.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), format!("{OUTSIDE}\n")).unwrap();
    std::fs::create_dir_all(root.join(".airlock")).unwrap();
    std::fs::create_dir_all(root.join(".git")).unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::create_dir_all(root.join("secrets")).unwrap();
    std::fs::write(root.join(".airlock/state.txt"), format!("{STATE}\n")).unwrap();
    std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(root.join("airlock.yaml"), CONFIG).unwrap();
    std::fs::write(root.join(".env"), format!("{ENV}\n")).unwrap();
    std::fs::write(root.join("secrets/key"), format!("{DENIED}\n")).unwrap();
    std::fs::write(root.join("src/main.rs"), format!("{SOURCE}\n")).unwrap();
    std::fs::write(root.join("docs/guide.md"), "guide\n").unwrap();
    let world = World {
        _dir: dir,
        root,
        outside,
    };
    for (path, kind) in entries {
        let rel: Vec<&str> = path.iter().map(|&i| NAMES[i]).collect();
        let target = world.root.join(rel.join("/"));
        let Some(parent) = target.parent() else {
            continue;
        };
        // Parents that cannot be made (a file is in the way) skip the entry.
        if std::fs::create_dir_all(parent).is_err() || target.symlink_metadata().is_ok() {
            continue;
        }
        let _ = match kind {
            Kind::Dir => std::fs::create_dir(&target),
            Kind::File => std::fs::write(&target, "plain\nneedle\n"),
            Kind::Symlink(index) => std::os::unix::fs::symlink(
                fill(LINK_TARGETS[*index], &world, rel.len() - 1),
                &target,
            ),
            Kind::HardLink(index) => {
                std::fs::hard_link(fill(HARD_TARGETS[*index], &world, 0), &target)
            }
            Kind::Fifo => std::process::Command::new("mkfifo")
                .arg(&target)
                .status()
                .map(|_| ()),
        };
    }
    world
}

/// Every file under `dir` (not following links), with its content.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            out.extend(files(&entry.path()));
        } else if kind.is_file() {
            out.push((
                entry.path(),
                std::fs::read(entry.path()).unwrap_or_default(),
            ));
        }
    }
    out.sort();
    out
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

/// The arguments of `tool` on `path` (and `other` for a move's target).
fn arguments(tool: &str, path: &str, other: &str, n: usize) -> Value {
    let content = format!("{MARK} {n}\n");
    match tool {
        "read_file" | "list_dir" | "stat" => json!({"path": path}),
        "grep" => json!({"pattern": "SECRET|needle", "path": path}),
        "glob" => json!({"pattern": "**/*", "path": path}),
        "write_file" => json!({"path": path, "content": content}),
        "edit_file" => json!({"path": path, "old_string": "needle", "new_string": content}),
        "delete_file" => json!({"path": path}),
        "move_file" => json!({"from": path, "to": other}),
        _ => json!({"patch": format!(
            "*** Begin Patch\n*** Add File: {path}\n+{MARK} {n}\n*** End Patch\n"
        )}),
    }
}

/// Runs `call` with a deadline: a call that hangs fails the property.
fn run_with_deadline(broker: &Arc<Broker>, call: ToolCall, mode: Mode) -> Value {
    let (sender, receiver) = std::sync::mpsc::channel();
    let broker = broker.clone();
    let tool = call.tool.clone();
    std::thread::spawn(move || {
        let envelope = broker.submit(&call, &mode, &|_| {});
        let _ = sender.send(serde_json::to_value(&envelope).unwrap());
    });
    receiver
        .recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{tool} hung"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn no_tool_leaves_the_root_reaches_a_protected_path_passes_a_rule_through_a_link_or_hangs(
        entries in prop::collection::vec(entry(), 0..14),
        calls in prop::collection::vec(call(), 1..10),
    ) {
        let world = world(&entries);
        let outside_before = files(&world.outside);
        let git_before = files(&world.root.join(".git"));
        let mut loaded = config::load(CONFIG, "airlock.yaml").unwrap();
        let root_text = world.root.to_str().unwrap().to_owned();
        loaded.policy.bind_workspace(&root_text, Some(&format!("{root_text}/airlock.yaml")));
        let broker = Arc::new(Broker::open(Workspace::new(world.root.clone(), loaded.clone())).unwrap());
        for (n, (tool, entry, below, random, other, approve)) in calls.into_iter().enumerate() {
            let tool = TOOLS[tool];
            let mut path: Vec<&str> = match entries.get(entry % entries.len().max(1)) {
                Some((path, _)) => path.iter().map(|&i| NAMES[i]).collect(),
                None => random.iter().map(|&i| NAMES[i]).collect(),
            };
            if let Some(below) = below {
                path.push(NAMES[below]);
            }
            let path = path.join("/");
            let other: Vec<&str> = other.iter().map(|&i| NAMES[i]).collect();
            let other = format!("docs/{}", other.join("/"));
            let args = arguments(tool, &path, &other, n);
            let call = ToolCall::new(tool, args.clone(), loaded.policy.origin_of(tool, None), airlock_broker::SystemClock.now_ms());
            let mode = if approve {
                Mode::ApproveNow { user: "tester".to_owned(), reason: Some("property".to_owned()) }
            } else {
                Mode::Defer
            };
            let envelope = run_with_deadline(&broker, call, mode);
            let shown = envelope.to_string();
            for secret in [OUTSIDE, STATE, ENV, DENIED] {
                prop_assert!(!shown.contains(secret), "{tool} {args} showed {secret}: {shown}");
            }
            let status = envelope["status"].as_str().unwrap_or("?");
            // A read the rules deny under src/ is denied wherever the path
            // leads, and no read reaches outside the root, the state dir or
            // a denied path. (A grep of a directory above src/ searches it:
            // rules decide on the path a call names, as resolved.)
            let reads = matches!(tool, "read_file" | "grep" | "glob" | "list_dir" | "stat");
            if reads && status == "allowed" {
                if tool == "read_file" {
                    prop_assert!(!shown.contains(SOURCE), "{tool} {args} read src/ through a link: {shown}");
                }
                if let Ok(real) = std::fs::canonicalize(world.root.join(&path)) {
                    for forbidden in ["src", ".airlock", ".env", "secrets"] {
                        prop_assert!(
                            !real.starts_with(world.root.join(forbidden)),
                            "{} {} was allowed and reads {}", tool, args, real.display()
                        );
                    }
                    prop_assert!(real.starts_with(&world.root), "{} {} reads {}", tool, args, real.display());
                }
            }
            // Nothing outside, in .git, the state dir's own files or the
            // configuration changed.
            prop_assert_eq!(&files(&world.outside), &outside_before, "{} {} wrote outside", tool, args);
            prop_assert_eq!(&files(&world.root.join(".git")), &git_before, "{} {} wrote .git", tool, args);
            prop_assert_eq!(std::fs::read_to_string(world.root.join("airlock.yaml")).unwrap(), CONFIG);
            // The state dir holds airlock's own records of the calls (the
            // store, the log, journals, blobs); no tool put a file there.
            prop_assert_eq!(
                std::fs::read_to_string(world.root.join(".airlock/state.txt")).unwrap(),
                format!("{STATE}\n")
            );
            for (file, content) in files(&world.root.join(".airlock")) {
                let own = file.strip_prefix(world.root.join(".airlock")).unwrap().to_str().unwrap().to_owned();
                let airlocks = own.starts_with("airlock.db")
                    || own.starts_with("audit.jsonl")
                    || own.starts_with("journal/")
                    || own.starts_with("blobs/")
                    || own == "state.txt";
                prop_assert!(
                    airlocks || !contains(&content, MARK),
                    "{} {} wrote {}", tool, args, file.display()
                );
            }
            // A write let through without asking (the docs/** rule) changed
            // only files really under docs/.
            if !approve && status == "allowed" && matches!(tool, "write_file" | "edit_file") {
                let state = world.root.join(".airlock");
                for (file, content) in files(&world.root) {
                    if !file.starts_with(&state) && contains(&content, &format!("{MARK} {n}\n")) {
                        prop_assert!(
                            file.starts_with(world.root.join("docs")),
                            "{} {} was allowed by the docs rule and wrote {}", tool, args, file.display()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn a_read_through_a_link_into_a_denied_directory_is_denied() {
    let world = world(&[(vec![0], Kind::Symlink(9)), (vec![1], Kind::Symlink(8))]);
    let mut loaded = config::load(CONFIG, "airlock.yaml").unwrap();
    let root_text = world.root.to_str().unwrap().to_owned();
    loaded
        .policy
        .bind_workspace(&root_text, Some(&format!("{root_text}/airlock.yaml")));
    let broker =
        Arc::new(Broker::open(Workspace::new(world.root.clone(), loaded.clone())).unwrap());
    for (tool, args) in [
        ("read_file", json!({"path": "a"})),
        ("read_file", json!({"path": "b/main.rs"})),
        ("grep", json!({"pattern": "SECRET", "path": "b"})),
    ] {
        let call = ToolCall::new(
            tool,
            args.clone(),
            loaded.policy.origin_of(tool, None),
            airlock_broker::SystemClock.now_ms(),
        );
        let envelope = run_with_deadline(&broker, call, Mode::Defer);
        assert_eq!(envelope["status"], "denied", "{tool} {args}: {envelope}");
    }
}
