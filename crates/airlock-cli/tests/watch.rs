//! `airlock watch` driven through a real pseudo-terminal, as a person would use it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use airlock_testkit::Workspace;
use airlock_testkit::terminal::Terminal;
use serde_json::{Value, json};

/// Starts `airlock watch` in `ws` on a fresh pseudo-terminal.
fn start_watch(ws: &Workspace) -> (std::process::Child, Terminal) {
    Terminal::spawn(ws.command(&["watch"]))
}

fn airlock(ws: &Workspace, args: &[&str]) -> Value {
    ws.run(args).json
}

fn propose(ws: &Workspace, path: &str, content: &str) -> String {
    let envelope = ws
        .call(
            "write_file",
            &json!({"path": path, "content": content}),
            &["--defer"],
        )
        .json;
    envelope["hitl"]["hitl_id"].as_str().unwrap().to_owned()
}

#[test]
fn watch_approves_views_denies_and_asks_for_reasons_at_a_terminal() {
    let ws = Workspace::new(
        "security:\n  hitl:\n    rules:\n      - {tools: [write_file], conditions: [{param: path, glob: \"crit*\"}], risk: critical}\n",
    );
    ws.write("a.txt", "old line\n");

    let (mut child, mut terminal) = start_watch(&ws);
    terminal.expect("watching for approvals");

    // A modification: shown with its diff in colour and a countdown; viewed; approved.
    let first = propose(&ws, "a.txt", "new line\n");
    let shown = terminal.expect("[y]es  [n]o  [v]iew  [a]lways  (auto-deny in ");
    assert!(
        shown.contains("APPROVAL REQUIRED (MEDIUM risk), 1 of 1 waiting"),
        "{shown}"
    );
    assert!(!shown.contains("expires   in"), "two countdowns: {shown}");
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
    assert_eq!(ws.read("a.txt").unwrap(), "new line\n");

    // A typo or a bare Enter asks again; only a no denies.
    let second = propose(&ws, "b.txt", "nope\n");
    terminal.expect(&second);
    terminal.expect("> ");
    terminal.send("hmm\n");
    terminal.expect(
        "not understood: \"hmm\"; y approves, n denies, v shows the whole diff, a approves and always allows",
    );
    terminal.expect("> ");
    terminal.send("\n");
    terminal.expect("not understood: an empty answer;");
    terminal.expect("> ");
    let show = airlock(&ws, &["show", &second, "--json"]);
    assert_eq!(show["status"], "pending");
    terminal.send("no\n");
    terminal.expect(&format!("{second}: denied"));
    assert!(!ws.path("b.txt").exists());

    // A critical request offers no always-allow and needs a reason.
    let third = propose(&ws, "crit.txt", "careful\n");
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
    let show = airlock(&ws, &["show", &third, "--json"]);
    assert_eq!(show["reason"], "reviewed the file");
    assert_eq!(show["channel"], "terminal");

    // `a` approves and always allows (medium risk allows skipping); what it
    // grants is said before and after.
    let always = propose(&ws, "e.txt", "always\n");
    terminal.expect(&always);
    terminal.expect(
        "[a]lways = approve, and allow write_file on e.txt with any content, for calls made for no user, in every session, for 8h, without asking",
    );
    terminal.expect("> ");
    terminal.send("a\n");
    terminal.expect(&format!(
        "{always}: approved; from now on allow write_file on e.txt with any content, for calls made for no user, in every session, for 8h, without asking"
    ));
    let log = ws.read(".airlock/audit.jsonl").unwrap();
    assert!(
        log.contains("\"event\":\"grant_created\""),
        "no grant was recorded"
    );

    // Decided elsewhere while the prompt waits.
    let fourth = propose(&ws, "d.txt", "x\n");
    terminal.expect(&fourth);
    terminal.expect("> ");
    airlock(&ws, &["deny", &fourth]);
    terminal.expect(&format!("{fourth}: denied elsewhere (via terminal)"));

    // Ctrl-D ends the watch.
    terminal.send("\x04");
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}

#[test]
fn the_countdown_runs_out_and_denies() {
    let ws = Workspace::new("file_broker:\n  hitl_ttl_seconds: 2\n");
    let (mut child, mut terminal) = start_watch(&ws);
    terminal.expect("watching for approvals");
    let id = propose(&ws, "late.txt", "x\n");
    terminal.expect(&id);
    // The countdown is redrawn as time runs, then the request is denied.
    terminal.expect("(auto-deny in 2s) > ");
    ws.advance(1_000);
    terminal.expect("(auto-deny in 1s) > ");
    ws.advance(1_000);
    terminal.expect(&format!("{id}: expired (no decision in 2 s): denied"));
    let show = airlock(&ws, &["show", &id, "--json"]);
    assert_eq!(show["status"], "expired");
    assert_eq!(show["decided_by"], "timeout");
    assert!(!ws.path("late.txt").exists());
    terminal.send("\x04");
    assert!(child.wait().unwrap().success());
}

#[test]
fn watch_shows_hostile_strings_as_visible_escapes_and_keeps_its_own_colours() {
    let ws = Workspace::empty();
    let name = "e\u{1b}[2K\u{1b}[1Avil\u{9b}31m\u{202e}hs.txt";
    let content = "fine\n\u{1b}[1A\u{1b}[2K+ nothing to see\u{7}approved\u{2066}\n";
    let (mut child, mut terminal) = start_watch(&ws);
    terminal.expect("watching for approvals");
    let id = propose(&ws, name, content);
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
    let ws = Workspace::empty();
    let (mut child, mut terminal) = start_watch(&ws);
    terminal.expect("watching for approvals");
    let args = json!({"path": "quick.txt", "content": "x\n"}).to_string();
    let envelope = airlock(&ws, &["call", "write_file", "--args", &args, "--yes"]);
    assert_eq!(envelope["status"], "allowed", "{envelope}");
    let id = envelope["hitl"]["hitl_id"].as_str().unwrap().to_owned();
    // Both are told, in order. Watch either read the decision with the
    // creation (one line each, then the apply), or showed the request while
    // it was still pending and then said how it was settled elsewhere.
    let told = format!("{id}: new: CREATE FILE quick.txt (medium risk)");
    let (which, shown) = terminal.expect_any(&[told.as_str(), "APPROVAL REQUIRED (MEDIUM risk)"]);
    if which == 0 {
        terminal.expect(&format!("{id}: approved elsewhere (via terminal)"));
        terminal.expect(&format!("{id}: applied"));
    } else {
        let prompt = terminal.expect("(auto-deny in ");
        assert!(prompt.contains(&id), "{shown}{prompt}");
        assert!(prompt.contains("CREATE FILE quick.txt"), "{prompt}");
        let (_, settled) = terminal.expect_any(&[
            &format!("{id}: approved elsewhere (via terminal)"),
            &format!("{id}: applying elsewhere (via terminal)"),
            &format!("{id}: applied elsewhere (via terminal)"),
        ]);
        assert!(!settled.contains("denied"), "{settled}");
    }
    terminal.send("\x04");
    assert!(child.wait().unwrap().success());
}

/// `watch --session S` shows and tells only that session's approvals: a
/// session's watcher is not asked about another's.
#[test]
fn watch_with_a_session_shows_only_its_approvals() {
    let ws = Workspace::new("");
    let (mut child, mut terminal) = Terminal::spawn(ws.command(&["watch", "--session", "s2"]));
    terminal.expect("watching for approvals");
    let other = ws
        .call(
            "write_file",
            &json!({"path": "one.txt", "content": "1\n"}),
            &["--defer", "--session", "s1"],
        )
        .json["hitl"]["hitl_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mine = ws
        .call(
            "write_file",
            &json!({"path": "two.txt", "content": "2\n"}),
            &["--defer", "--session", "s2"],
        )
        .json["hitl"]["hitl_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let shown = terminal.expect("[y]es  [n]o  [v]iew  [a]lways  (auto-deny in ");
    assert!(shown.contains(&mine), "{shown}");
    assert!(shown.contains("1 of 1 waiting"), "{shown}");
    assert!(!shown.contains(&other), "{shown}");
    terminal.send("yes\n");
    terminal.expect(&format!("{mine}: approved"));
    assert_eq!(ws.read("two.txt").as_deref(), Some("2\n"));
    assert_eq!(
        airlock(&ws, &["show", &other, "--json"])["status"],
        "pending"
    );
    terminal.send("\x04");
    assert!(child.wait().unwrap().success());
}
