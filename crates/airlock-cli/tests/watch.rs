//! `airlock watch` driven through a real pseudo-terminal, as a person would use it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::fs::File;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
use serde_json::{Value, json};

struct Terminal {
    writer: File,
    output: Receiver<Vec<u8>>,
    seen: String,
}

impl Terminal {
    /// Waits until the terminal shows `needle` after what was already consumed.
    fn expect(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(at) = self.seen.find(needle) {
                let upto = at + needle.len();
                let consumed: String = self.seen[..upto].to_owned();
                self.seen.drain(..upto);
                return consumed;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "timed out waiting for {needle:?}; terminal shows:\n{}",
                self.seen
            );
            if let Ok(chunk) = self.output.recv_timeout(left) {
                self.seen.push_str(&String::from_utf8_lossy(&chunk));
            }
        }
    }

    fn send(&mut self, text: &str) {
        self.writer.write_all(text.as_bytes()).unwrap();
        self.writer.flush().unwrap();
    }
}

/// Starts `airlock watch` in `dir` on a fresh pseudo-terminal.
fn start_watch(dir: &std::path::Path) -> (std::process::Child, Terminal) {
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).unwrap();
    grantpt(&master).unwrap();
    unlockpt(&master).unwrap();
    let slave_name = ptsname(&master, Vec::new()).unwrap();
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(slave_name.to_str().unwrap())
        .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .arg("watch")
        .current_dir(dir)
        .env("AIRLOCK_USER", "tester")
        .env("AIRLOCK_TEST_CLOCK", clock_file(dir))
        .stdin(slave.try_clone().unwrap())
        .stdout(slave.try_clone().unwrap())
        .stderr(slave)
        .spawn()
        .unwrap();
    let master = File::from(master);
    let mut reader = master.try_clone().unwrap();
    let (sender, output) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        while let Ok(read) = reader.read(&mut buffer) {
            if read == 0 || sender.send(buffer[..read].to_vec()).is_err() {
                break;
            }
        }
    });
    (
        child,
        Terminal {
            writer: master,
            output,
            seen: String::new(),
        },
    )
}

/// The file of the clock every process of the workspace `dir` reads
/// (`AIRLOCK_TEST_CLOCK`), in its state dir, which no tool reaches.
fn clock_file(dir: &std::path::Path) -> std::path::PathBuf {
    dir.join(".airlock").join("test-clock")
}

/// Moves the clock of the processes of workspace `dir` `ms` forward.
fn advance(dir: &std::path::Path, ms: u64) {
    support::advance_clock(&clock_file(dir), ms);
}

fn airlock(dir: &std::path::Path, args: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(args)
        .current_dir(dir)
        .env("AIRLOCK_USER", "tester")
        .env("AIRLOCK_TEST_CLOCK", clock_file(dir))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    serde_json::from_slice(&output.stdout).unwrap_or(Value::Null)
}

fn propose(dir: &std::path::Path, path: &str, content: &str) -> String {
    let args = json!({"path": path, "content": content}).to_string();
    let envelope = airlock(dir, &["call", "write_file", "--args", &args, "--defer"]);
    envelope["hitl"]["hitl_id"].as_str().unwrap().to_owned()
}

#[test]
fn watch_approves_views_denies_and_asks_for_reasons_at_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("airlock.yaml"),
        "security:\n  hitl:\n    rules:\n      - {tools: [write_file], conditions: [{param: path, glob: \"crit*\"}], risk: critical}\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("a.txt"), "old line\n").unwrap();

    let (mut child, mut terminal) = start_watch(dir.path());
    terminal.expect("watching for approvals");

    // A modification: shown with its diff in colour and a countdown; viewed; approved.
    let first = propose(dir.path(), "a.txt", "new line\n");
    let shown = terminal.expect("[y]es  [n]o  [v]iew  [a]lways  (auto-deny in ");
    assert!(shown.contains("APPROVAL REQUIRED (MEDIUM risk)"), "{shown}");
    assert!(shown.contains(&first), "{shown}");
    assert!(shown.contains("MODIFY a.txt"), "{shown}");
    assert!(
        shown.contains("\x1b[31m-old line\x1b[0m"),
        "the diff is coloured on a terminal: {shown:?}"
    );
    assert!(shown.contains("\x1b[32m+new line\x1b[0m"), "{shown:?}");
    terminal.send("v\n");
    terminal.expect("@@ -1 +1 @@");
    terminal.expect("> ");
    terminal.send("yes\n");
    terminal.expect(&format!("{first}: approved"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "new line\n"
    );

    // Anything that is not a yes denies.
    let second = propose(dir.path(), "b.txt", "nope\n");
    terminal.expect(&second);
    terminal.expect("> ");
    terminal.send("hmm\n");
    terminal.expect(&format!("{second}: denied"));
    assert!(!dir.path().join("b.txt").exists());

    // A critical request offers no always-allow and needs a reason.
    let third = propose(dir.path(), "crit.txt", "careful\n");
    let shown = terminal.expect("[y]es  [n]o  [v]iew  (auto-deny in ");
    assert!(
        shown.contains("APPROVAL REQUIRED (CRITICAL risk)"),
        "{shown}"
    );
    terminal.expect("> ");
    terminal.send("y\n");
    terminal.expect("reason (required) > ");
    terminal.send("reviewed the file\n");
    terminal.expect(&format!("{third}: approved"));
    let show = airlock(dir.path(), &["show", &third, "--json"]);
    assert_eq!(show["reason"], "reviewed the file");
    assert_eq!(show["channel"], "terminal");

    // `a` approves and always allows (medium risk allows skipping).
    let always = propose(dir.path(), "e.txt", "always\n");
    terminal.expect(&always);
    terminal.expect("> ");
    terminal.send("a\n");
    terminal.expect(&format!("{always}: approved"));
    let log = std::fs::read_to_string(dir.path().join(".airlock/audit.jsonl")).unwrap();
    assert!(
        log.contains("\"event\":\"grant_created\""),
        "no grant was recorded"
    );

    // Decided elsewhere while the prompt waits.
    let fourth = propose(dir.path(), "d.txt", "x\n");
    terminal.expect(&fourth);
    terminal.expect("> ");
    airlock(dir.path(), &["deny", &fourth]);
    terminal.expect(&format!("{fourth}: denied elsewhere (via terminal)"));

    // Ctrl-D ends the watch.
    terminal.send("\x04");
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}

#[test]
fn the_countdown_runs_out_and_denies() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("airlock.yaml"),
        "file_broker:\n  hitl_ttl_seconds: 2\n",
    )
    .unwrap();
    let (mut child, mut terminal) = start_watch(dir.path());
    terminal.expect("watching for approvals");
    let id = propose(dir.path(), "late.txt", "x\n");
    terminal.expect(&id);
    // The countdown is redrawn as time runs, then the request is denied.
    terminal.expect("(auto-deny in 2s) > ");
    advance(dir.path(), 1_000);
    terminal.expect("(auto-deny in 1s) > ");
    advance(dir.path(), 1_000);
    terminal.expect(&format!("{id}: timed out, denied"));
    let show = airlock(dir.path(), &["show", &id, "--json"]);
    assert_eq!(show["status"], "expired");
    assert_eq!(show["decided_by"], "timeout");
    assert!(!dir.path().join("late.txt").exists());
    terminal.send("\x04");
    assert!(child.wait().unwrap().success());
}

#[test]
fn watch_shows_hostile_strings_as_visible_escapes_and_keeps_its_own_colours() {
    let dir = tempfile::tempdir().unwrap();
    let name = "e\u{1b}[2K\u{1b}[1Avil\u{9b}31m\u{202e}hs.txt";
    let content = "fine\n\u{1b}[1A\u{1b}[2K+ nothing to see\u{7}approved\u{2066}\n";
    let (mut child, mut terminal) = start_watch(dir.path());
    terminal.expect("watching for approvals");
    let id = propose(dir.path(), name, content);
    let shown = terminal.expect("[y]es  [n]o  [v]iew");
    terminal.send("n\n");
    terminal.expect("denied");
    let _ = child.kill();
    let _ = child.wait();
    assert!(shown.contains(&id), "{shown}");
    assert!(
        shown.contains(r"\x1b[2K\x1b[1Avil\u{9b}31m<U+202E>hs.txt"),
        "{shown}"
    );
    assert!(
        shown.contains(r"\x1b[1A\x1b[2K+ nothing to see\x07approved<U+2066>"),
        "{shown}"
    );
    // What reaches the terminal: airlock's own colours (SGR), the line ends
    // the terminal adds, and nothing else that acts on it.
    let mut rest = shown.as_str();
    while let Some(at) = rest.find(['\u{1b}', '\u{9b}', '\u{7}', '\u{202e}', '\u{2066}']) {
        let tail = &rest[at..];
        let sgr = tail.strip_prefix("\u{1b}[").and_then(|after| {
            let end = after.find(|c: char| !(c.is_ascii_digit() || c == ';'))?;
            (after[end..].starts_with('m')).then_some(2 + end + 1)
        });
        let Some(length) = sgr else {
            panic!("a raw control reached the terminal at {tail:?}");
        };
        rest = &tail[length..];
    }
}

/// An approval created and decided at once elsewhere (`call --yes`: within
/// a millisecond) is told in watch as both events, in order.
#[test]
fn an_approval_created_and_decided_at_once_elsewhere_is_told_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, mut terminal) = start_watch(dir.path());
    terminal.expect("watching for approvals");
    let args = json!({"path": "quick.txt", "content": "x\n"}).to_string();
    let envelope = airlock(
        dir.path(),
        &["call", "write_file", "--args", &args, "--yes"],
    );
    assert_eq!(envelope["status"], "allowed", "{envelope}");
    let id = envelope["hitl"]["hitl_id"].as_str().unwrap().to_owned();
    terminal.expect(&format!("{id}: new: CREATE FILE quick.txt (medium risk)"));
    terminal.expect(&format!("{id}: approved elsewhere (via terminal)"));
    terminal.expect(&format!("{id}: applied"));
    terminal.send("\x04");
    assert!(child.wait().unwrap().success());
}
