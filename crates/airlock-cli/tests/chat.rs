//! Chat approvals (DESIGN §7.1, spec 001) through the `airlock` binary
//! against a stand-in of Telegram's Bot API on a real socket: airlock's
//! own channel code long-polls it, posts, edits and answers exactly as it
//! would with Telegram.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Child, Stdio};

use airlock_store::EventKind;
use airlock_testkit::Workspace;
use airlock_testkit::telegram::{TOKEN, TelegramStandIn};
use serde_json::{Value, json};

const CHAT: i64 = -100_123;
const OTHER_CHAT: i64 = -100_456;
const ALICE: i64 = 42;
const BOB: i64 = 43;
const STRANGER: i64 = 7;

/// A workspace whose approvals wait in defer mode and go to Telegram.
fn config(api_url: &str, extra: &str) -> String {
    format!(
        "security:\n  hitl:\n    approval_mode: defer\n{extra}\
         channels:\n  telegram:\n    api_url: {api_url}\n    chats: [{CHAT}]\n    \
         users: {{\"{ALICE}\": alice, \"{BOB}\": bob}}\n"
    )
}

/// A workspace on `config` whose processes have the bot's token.
fn workspace(config: &str) -> Workspace {
    Workspace::new(config).with_env("AIRLOCK_TELEGRAM_TOKEN", TOKEN)
}

/// `airlock ARGS`, running until dropped.
struct Running(Child);

impl Running {
    fn start(ws: &Workspace, args: &[&str]) -> Running {
        let child = ws
            .command(args)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        Running(child)
    }

    fn channels(ws: &Workspace) -> Running {
        Running::start(ws, &["channels", "run"])
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn events<'a>(audit: &'a [Value], name: &str) -> Vec<&'a Value> {
    audit.iter().filter(|e| e["event"] == name).collect()
}

#[test]
fn a_mapped_user_approves_with_a_button_and_a_stranger_is_refused() {
    let tg = TelegramStandIn::start(&[CHAT]);
    let ws = workspace(&config(&tg.url, ""));
    let _channels = Running::channels(&ws);
    let id = ws.propose("a.txt", "new <b>&amp; text\n");

    let message = tg.message(CHAT, 0);
    for shown in [
        "⚠️ Approval needed · medium risk",
        "Tool: write_file",
        "Path: a.txt",
        "Session: s1",
        "Expires: ",
        "+new <b>&amp; text",
        "Press a button, or reply \"yes\" to approve or \"no\" to deny.",
    ] {
        assert!(
            message.text.contains(shown),
            "{shown:?} not in {}",
            message.text
        );
    }
    // The file's text is shown as text, never as markup.
    assert!(
        message.html.contains("+new &lt;b&gt;&amp;amp; text"),
        "{}",
        message.html
    );
    let labels: Vec<String> = message.buttons().into_iter().map(|(l, _)| l).collect();
    assert_eq!(
        labels,
        ["✅ Approve", "❌ Deny", "♾ Always allow (this session)"]
    );
    assert_eq!(message.button("Approve"), format!("a|{id}"));

    // Someone not mapped to an airlock user: refused, visibly, audited.
    let query = tg.press(CHAT, message.id, STRANGER, &message.button("Approve"));
    let (words, alert) = tg.answer_to(&query);
    assert!(alert, "{words}");
    assert!(
        words.starts_with("You (telegram user 7) are not an approver here"),
        "{words}"
    );
    assert_eq!(ws.read("a.txt"), None);

    // alice approves: applied, the message edited to say so.
    let query = tg.press(CHAT, message.id, ALICE, &message.button("Approve"));
    assert_eq!(
        tg.answer_to(&query),
        ("Approved: applied.".to_owned(), false)
    );
    assert_eq!(ws.read("a.txt").as_deref(), Some("new <b>&amp; text\n"));
    let edited = tg.message_once(CHAT, message.id, "the outcome", |m| {
        m.text.contains("applied")
    });
    assert!(
        edited
            .text
            .starts_with("✅ Approved by alice via telegram at "),
        "{}",
        edited.text
    );
    assert!(edited.buttons().is_empty(), "{:?}", edited.buttons());

    let audit = ws.audit();
    let refused = events(&audit, "hitl_refused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(
        (
            &refused[0]["channel"],
            &refused[0]["platform_user"],
            &refused[0]["hitl_id"]
        ),
        (&json!("telegram"), &json!("7"), &json!(id))
    );
    let decided = events(&audit, "hitl_decision");
    assert_eq!(decided.len(), 1, "{decided:?}");
    assert_eq!(
        (
            &decided[0]["decision"],
            &decided[0]["channel"],
            &decided[0]["platform_user"],
            &decided[0]["user"]
        ),
        (
            &json!("approve"),
            &json!("telegram"),
            &json!("42"),
            &json!("alice")
        )
    );
}

/// `airlock call write_file` in defer mode with `extra` flags: the
/// approval's id.
fn ask(ws: &Workspace, path: &str, content: &str, extra: &[&str]) -> String {
    let mut flags = vec!["--defer"];
    flags.extend_from_slice(extra);
    let run = ws.call(
        "write_file",
        &json!({"path": path, "content": content}),
        &flags,
    );
    assert_eq!(run.code, 3, "{}{}", run.stdout, run.stderr);
    run.json["hitl"]["hitl_id"].as_str().unwrap().to_owned()
}

#[test]
fn with_same_user_only_the_requester_decides_in_their_chat_and_yes_replies_decide() {
    let tg = TelegramStandIn::start(&[CHAT, OTHER_CHAT]);
    let ws = workspace(&config(&tg.url, "approvals:\n  same_user: true\n"));
    let _channels = Running::channels(&ws);
    let requester = format!("telegram:{OTHER_CHAT}:{ALICE}");
    let alice = [
        "--session",
        "s1",
        "--user",
        "alice",
        "--requester",
        requester.as_str(),
    ];

    // Asked in the chat alice asked in, not the configured one.
    let first = ask(&ws, "one.txt", "1\n", &alice);
    let message = tg.message(OTHER_CHAT, 0);
    assert!(
        message
            .text
            .contains("Requested by: alice (telegram user 42 in chat -100456)"),
        "{}",
        message.text
    );
    assert!(tg.messages(CHAT).is_empty());

    // bob is an approver, but not the user who asked: refused, by button
    // and by reply.
    let query = tg.press(OTHER_CHAT, message.id, BOB, &message.button("Approve"));
    let (words, alert) = tg.answer_to(&query);
    assert!(alert);
    assert_eq!(
        words,
        "Not decided: forbidden: only the user who made the call (alice) may decide it."
    );
    tg.reply(OTHER_CHAT, message.id, BOB, "yes");
    let refusal = tg.wait_for("the answer to bob's reply", |view| {
        view.messages_in(OTHER_CHAT).get(1).cloned()
    });
    assert_eq!(
        refusal.text,
        "Not decided: forbidden: only the user who made the call (alice) may decide it."
    );
    // A press on this message arriving from another chat is not an answer.
    let query = tg.press(CHAT, message.id, ALICE, &message.button("Approve"));
    assert_eq!(
        tg.answer_to(&query),
        ("This is not a confirmation airlock knows.".to_owned(), true)
    );
    assert_eq!(ws.read("one.txt"), None);

    // alice's "Yes" approves.
    tg.reply(OTHER_CHAT, message.id, ALICE, "Yes");
    tg.message_once(OTHER_CHAT, message.id, "approved", |m| {
        m.text.starts_with("✅ Approved by alice via telegram") && m.text.contains("; applied")
    });
    assert_eq!(ws.read("one.txt").as_deref(), Some("1\n"));

    // "no", and anything else, deny.
    for (n, answer) in [(2usize, "no: wrong file"), (3, "hmm, later")] {
        let path = format!("denied{n}.txt");
        let id = ask(&ws, &path, "x\n", &alice);
        let message = tg.wait_for("the next confirmation", |view| {
            view.messages_in(OTHER_CHAT)
                .into_iter()
                .find(|m| m.html.contains(&path))
        });
        tg.reply(OTHER_CHAT, message.id, ALICE, answer);
        let denied = tg.message_once(OTHER_CHAT, message.id, "denied", |m| {
            m.text.starts_with("❌ Denied by alice via telegram")
        });
        assert_eq!(
            denied.text.contains("(reason: wrong file)"),
            answer.starts_with("no:"),
            "{}",
            denied.text
        );
        assert_eq!(ws.read(&path), None);
        assert_eq!(
            ws.run(&["show", &id, "--json"]).json["status"],
            json!("denied")
        );
    }

    let audit = ws.audit();
    let refused = events(&audit, "hitl_refused");
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(
        refused
            .iter()
            .all(|e| e["platform_user"] == "43" && e["user"] == "bob")
    );
    let decisions: Vec<(&Value, &Value)> = events(&audit, "hitl_decision")
        .into_iter()
        .map(|e| (&e["decision"], &e["hitl_id"]))
        .collect();
    assert_eq!(decisions[0], (&json!("approve"), &json!(first)));
    assert_eq!(decisions.len(), 3);
}

#[test]
fn an_unanswered_confirmation_expires_at_the_chat_timeout_and_says_so() {
    let tg = TelegramStandIn::start(&[CHAT]);
    // medium risk waits 120 s; the chat's timeout is 30 s.
    let ws = workspace(&config(&tg.url, "").replace("users:", "timeout: 30\n    users:"));
    let _channels = Running::channels(&ws);
    let id = ws.propose("late.txt", "late\n");
    let message = tg.message(CHAT, 0);
    // The chat's expiry, shown from the start.
    ws.feed().wait_for(EventKind::ApprovalExpiryChanged);
    let shown = ws.run(&["show", &id, "--json"]).json;
    let waits = shown["expires_ms"].as_u64().unwrap() - shown["created_ms"].as_u64().unwrap();
    assert!((30_000..31_000).contains(&waits), "{waits}");
    ws.advance(31_000);
    let expired = tg.message_once(CHAT, message.id, "expired", |m| {
        m.text.starts_with("⌛ Expired: no decision by ")
    });
    assert!(expired.text.ends_with_denied(), "{}", expired.text);
    assert!(expired.buttons().is_empty());
    assert_eq!(
        ws.run(&["show", &id, "--json"]).json["status"],
        json!("expired")
    );
    assert_eq!(ws.read("late.txt"), None);
}

trait EndsWithDenied {
    fn ends_with_denied(&self) -> bool;
}

impl EndsWithDenied for String {
    fn ends_with_denied(&self) -> bool {
        self.lines()
            .next()
            .is_some_and(|line| line.ends_with("; denied"))
    }
}

#[test]
fn a_decision_taken_elsewhere_edits_the_chat_message() {
    let tg = TelegramStandIn::start(&[CHAT]);
    let ws = workspace(&config(&tg.url, ""));
    let _channels = Running::channels(&ws);
    let id = ws.propose("t.txt", "t\n");
    let message = tg.message(CHAT, 0);
    let run = ws.run(&["deny", &id, "--reason", "not now"]);
    assert_eq!(run.code, 4, "{}{}", run.stdout, run.stderr);
    let edited = tg.message_once(CHAT, message.id, "denied at the terminal", |m| {
        m.text.starts_with("❌ Denied by tester via terminal")
    });
    assert!(edited.text.contains("(reason: not now)"), "{}", edited.text);
    // Pressing the old button now changes nothing.
    let query = tg.press(CHAT, message.id, ALICE, &message.button("Approve"));
    let (words, alert) = tg.answer_to(&query);
    assert!(alert && words.starts_with("Not decided: "), "{words}");
    assert_eq!(ws.read("t.txt"), None);
}

#[test]
fn each_session_sees_one_confirmation_at_a_time_and_approve_all_decides_the_rest() {
    let tg = TelegramStandIn::start(&[CHAT]);
    let ws = workspace(&config(&tg.url, ""));
    let _channels = Running::channels(&ws);
    let a1 = ask(&ws, "a1.txt", "a1\n", &["--session", "a"]);
    let head = tg.message(CHAT, 0);
    assert!(head.html.contains("a1.txt"));
    let a2 = ask(&ws, "a2.txt", "a2\n", &["--session", "a"]);
    let _b1 = ask(&ws, "b1.txt", "b1\n", &["--session", "b"]);
    // Session b gets its own message; a's counts the one waiting.
    let b = tg.message(CHAT, 1);
    assert!(b.html.contains("b1.txt"), "{}", b.text);
    let counted = tg.message_once(CHAT, head.id, "a counter of 1", |m| {
        m.text
            .contains("1 more waiting in this session after this one.")
    });
    let stale = counted.button("Approve all 2");
    assert!(stale.starts_with(&format!("b|{a1}|2|")), "{stale}");
    // Another two: a2 is denied at the terminal and a4 arrives. The old
    // button still counts two, but not these two: it decides nothing.
    let a4 = ask(&ws, "a4.txt", "a4\n", &["--session", "a"]);
    let deny = ws.run(&["deny", &a2]);
    assert_eq!(deny.code, 4, "{}", deny.stderr);
    let swapped = tg.message_once(CHAT, head.id, "a button for a1 and a4", |m| {
        m.buttons()
            .iter()
            .any(|(label, data)| label == "✅ Approve all 2" && *data != stale)
    });
    let query = tg.press(CHAT, head.id, ALICE, &stale);
    let (words, _) = tg.answer_to(&query);
    assert!(words.starts_with("The waiting calls changed"), "{words}");
    assert_eq!((ws.read("a1.txt"), ws.read("a4.txt")), (None, None));
    let stale = swapped.button("Approve all 2");
    let _a3 = ask(&ws, "a3.txt", "a3\n", &["--session", "a"]);
    let recounted = tg.message_once(CHAT, head.id, "a counter of 2", |m| {
        m.text.contains("2 more waiting")
    });
    // The button drawn for two does not decide three.
    let query = tg.press(CHAT, head.id, ALICE, &stale);
    let (words, _) = tg.answer_to(&query);
    assert!(words.starts_with("The waiting calls changed"), "{words}");
    assert_eq!(ws.read("a1.txt"), None);
    // The updated one decides all three, each its own decision.
    let query = tg.press(CHAT, head.id, ALICE, &recounted.button("Approve all 3"));
    assert_eq!(tg.answer_to(&query).0, "Approved all 3: applied.");
    for n in [1, 3, 4] {
        assert_eq!(ws.read(&format!("a{n}.txt")), Some(format!("a{n}\n")));
    }
    assert_eq!((ws.read("a2.txt"), ws.read("b1.txt")), (None, None));
    assert_eq!(tg.messages(CHAT).len(), 2, "no message for a3 or a4");
    let decided: Vec<String> = events(&ws.audit(), "hitl_decision")
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["decision"].as_str().unwrap(),
                e["hitl_id"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(decided.len(), 4, "{decided:?}");
    assert!(decided.contains(&format!("approve {a4}")), "{decided:?}");
}

#[test]
fn a_stranger_cannot_flood_the_audit_log_or_the_bot() {
    let tg = TelegramStandIn::start(&[CHAT]);
    let ws = workspace(&config(&tg.url, ""));
    let _channels = Running::channels(&ws);
    ws.propose("f.txt", "f\n");
    let message = tg.message(CHAT, 0);
    for _ in 0..8 {
        tg.reply(CHAT, message.id, STRANGER, "yes");
    }
    // alice's answer comes after the stranger's eight replies.
    tg.reply(CHAT, message.id, ALICE, "yes");
    tg.message_once(CHAT, message.id, "applied", |m| {
        m.text.contains("; applied")
    });
    // Five answered and audited a minute; the rest dropped.
    tg.wait_for("five answers", |view| {
        (view.messages_in(CHAT).len() == 1 + 5).then_some(())
    });
    assert_eq!(events(&ws.audit(), "hitl_refused").len(), 5);
}

#[test]
fn rate_limits_and_outages_are_retried_and_nothing_is_decided_meanwhile() {
    let tg = TelegramStandIn::start(&[CHAT]);
    let ws = workspace(&config(&tg.url, ""));
    tg.fail("sendMessage", 429, Some(1), 1);
    tg.fail("sendMessage", 500, None, 2);
    tg.fail("getUpdates", 502, None, 2);
    let _channels = Running::channels(&ws);
    let id = ws.propose("r.txt", "r\n");
    let message = tg.message(CHAT, 0);
    assert_eq!(tg.messages(CHAT).len(), 1, "posted once");
    assert_eq!(
        ws.run(&["show", &id, "--json"]).json["status"],
        json!("pending")
    );
    tg.fail("editMessageText", 429, Some(1), 1);
    tg.fail("editMessageText", 503, None, 1);
    let query = tg.press(CHAT, message.id, ALICE, &message.button("Approve"));
    assert_eq!(tg.answer_to(&query).0, "Approved: applied.");
    tg.message_once(CHAT, message.id, "the outcome after the outage", |m| {
        m.text.contains("applied")
    });
    assert_eq!(tg.failures_served(), 7);
    assert_eq!(tg.conflicts(), 0, "one poller");
}

#[test]
fn a_restart_neither_posts_again_nor_loses_the_message() {
    let tg = TelegramStandIn::start(&[CHAT]);
    let ws = workspace(&config(&tg.url, ""));
    let channels = Running::channels(&ws);
    let _id = ws.propose("s.txt", "s\n");
    let message = tg.message(CHAT, 0);
    // Recorded (its expiry is set after its id was kept), then stopped.
    ws.feed().wait_for(EventKind::ApprovalExpiryChanged);
    drop(channels);
    let _again = Running::channels(&ws);
    // The new process answers the press on the old message.
    let query = tg.press(CHAT, message.id, ALICE, &message.button("Approve"));
    assert_eq!(tg.answer_to(&query).0, "Approved: applied.");
    tg.message_once(CHAT, message.id, "the outcome", |m| {
        m.text.contains("applied")
    });
    assert_eq!(tg.messages(CHAT).len(), 1, "not posted again");
    assert_eq!(ws.read("s.txt").as_deref(), Some("s\n"));
}

const AGENT_TOKEN: &str = "agent-token-1";
const WEB_TOKEN: &str = "phone-token-1";

fn tokens() -> String {
    format!(
        "auth:\n  tokens:\n    - {{name: claude, sha256: \"{}\", roles: [agent], user: alice}}\n    \
         - {{name: phone, sha256: \"{}\", roles: [approver], user: bob}}\n",
        airlock_testkit::token_sha256(AGENT_TOKEN),
        airlock_testkit::token_sha256(WEB_TOKEN)
    )
}

#[test]
fn over_http_the_requester_routes_the_confirmation_and_a_web_decision_edits_it() {
    let tg = TelegramStandIn::start(&[CHAT, OTHER_CHAT]);
    let ws = workspace(&config(&tg.url, &tokens()));
    let server =
        airlock_testkit::http::Server::start_in(ws, &["--public-url", "https://airlock.example"]);
    let call = |requester: Value| {
        json!({"tool": "write_file", "arguments": {"path": "h.txt", "content": "h\n"},
               "session": "h1", "requester": requester})
    };
    // Bad requesters are refused before anything happens.
    for (bad, words) in [
        (
            json!({"channel": "irc", "chat": "1", "user": "2"}),
            "requester.channel must be one of telegram, slack, discord",
        ),
        (
            json!({"channel": "telegram", "chat": "a b", "user": "2"}),
            "requester.chat must be 1 to 64 letters, digits, - or _",
        ),
        (
            json!({"channel": "telegram", "chat": "1"}),
            "requester.user is missing",
        ),
        (
            json!("telegram:1:2"),
            "requester must be an object {channel, chat, user}",
        ),
        (
            json!({"channel": "telegram", "chat": "1", "user": "2", "admin": true}),
            "requester: unknown field \"admin\"",
        ),
    ] {
        let (status, body) = server.post("/v1/tools/call", Some(AGENT_TOKEN), &call(bad));
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["code"], "invalid_input", "{body}");
        assert_eq!(body["error"]["message"], words, "{body}");
    }
    let (status, pending) = server.post(
        "/v1/tools/call",
        Some(AGENT_TOKEN),
        &call(json!({"channel": "telegram", "chat": OTHER_CHAT, "user": ALICE.to_string()})),
    );
    assert_eq!(status, 202, "{pending}");
    let id = pending["approval_id"].as_str().unwrap().to_owned();
    let (_, shown) = server.get(&format!("/hitl/pending/{id}"), Some(WEB_TOKEN));
    assert_eq!(
        shown["requester"],
        json!({"channel": "telegram", "chat": OTHER_CHAT.to_string(), "user": "42"})
    );

    // Asked in the requester's chat, with a link to the web UI.
    let message = tg.message(OTHER_CHAT, 0);
    assert_eq!(message.button("Open in web UI"), "https://airlock.example/");
    assert!(tg.messages(CHAT).is_empty());

    // Decided in the web UI: the chat message says so.
    let (status, decided) = server.post(
        &format!("/hitl/decide/{id}"),
        Some(WEB_TOKEN),
        &json!({"decision": "approve"}),
    );
    assert_eq!(status, 200, "{decided}");
    let edited = tg.message_once(OTHER_CHAT, message.id, "decided via http", |m| {
        m.text.contains("applied")
    });
    assert!(
        edited.text.starts_with("✅ Approved by bob via http at "),
        "{}",
        edited.text
    );
    assert_eq!(server.ws.read("h.txt").as_deref(), Some("h\n"));
}

#[test]
fn a_link_button_telegram_refuses_is_left_out() {
    let tg = TelegramStandIn::start(&[CHAT]);
    let ws = workspace(&config(&tg.url, ""));
    // Telegram opens no link to this machine's own address.
    let _channels = Running::start(
        &ws,
        &["channels", "run", "--public-url", "http://127.0.0.1:7420"],
    );
    ws.propose("l.txt", "l\n");
    let message = tg.message(CHAT, 0);
    let labels: Vec<String> = message.buttons().into_iter().map(|(l, _)| l).collect();
    assert_eq!(
        labels,
        ["✅ Approve", "❌ Deny", "♾ Always allow (this session)"]
    );
    assert_eq!(
        tg.calls_of("sendMessage"),
        2,
        "tried with the link, then without"
    );
}

#[test]
fn a_risks_approvers_and_required_reason_hold_in_chat() {
    let tg = TelegramStandIn::start(&[CHAT]);
    let rules =
        "security:\n  hitl:\n    rules:\n      - tools: [write_file]\n        risk: critical\n";
    let ws = workspace(
        &config(&tg.url, "")
            .replacen("security:\n  hitl:\n", rules, 1)
            .replace(
                &format!("\"{BOB}\": bob"),
                &format!("\"{BOB}\": {{user: bob, roles: [approver, admin]}}"),
            ),
    );
    let config_check = ws.run(&["config", "check"]);
    assert_eq!(config_check.code, 0, "{}", config_check.stderr);
    let _channels = Running::channels(&ws);
    let id = ws.propose("c.txt", "c\n");
    let message = tg.message(CHAT, 0);
    assert!(message.text.contains("critical risk"), "{}", message.text);
    assert!(
        message
            .text
            .contains("A reason is required: reply yes: <reason> to approve"),
        "{}",
        message.text
    );
    // No approving button where a reason is required.
    let labels: Vec<String> = message.buttons().into_iter().map(|(l, _)| l).collect();
    assert_eq!(labels, ["❌ Deny"]);
    // alice is an approver, not an admin.
    tg.reply(CHAT, message.id, ALICE, "yes: looks right");
    let refused = tg.wait_for("alice refused", |view| {
        view.messages_in(CHAT).get(1).cloned()
    });
    assert_eq!(
        refused.text,
        "Not decided: forbidden: critical risk is decided only by admin."
    );
    // bob holds admin: a bare yes is not enough, a reason is.
    tg.reply(CHAT, message.id, BOB, "yes");
    let asked = tg.wait_for("a reason asked for", |view| {
        view.messages_in(CHAT).get(2).cloned()
    });
    assert_eq!(
        asked.text,
        "A reason is required to approve this: reply \"yes: <reason>\"."
    );
    assert_eq!(ws.read("c.txt"), None);
    tg.reply(CHAT, message.id, BOB, "yes: read the diff");
    let edited = tg.message_once(CHAT, message.id, "approved with a reason", |m| {
        m.text.contains("applied")
    });
    assert!(
        edited.text.contains("(reason: read the diff)"),
        "{}",
        edited.text
    );
    assert_eq!(ws.read("c.txt").as_deref(), Some("c\n"));
    let audit = ws.audit();
    let decided = events(&audit, "hitl_decision");
    assert_eq!(
        (
            &decided[0]["user"],
            &decided[0]["reason"],
            &decided[0]["hitl_id"]
        ),
        (&json!("bob"), &json!("read the diff"), &json!(id))
    );
}

#[test]
fn a_user_removed_from_the_configuration_decides_nothing_from_then_on() {
    let tg = TelegramStandIn::start(&[CHAT]);
    let ws = workspace(&config(&tg.url, &tokens()));
    let server = airlock_testkit::http::Server::start_in(ws, &[]);
    server.ws.propose("u.txt", "u\n");
    let message = tg.message(CHAT, 0);
    // bob is taken out of the users; the server reloads.
    let mut feed = server.ws.feed();
    let text = server.ws.read("airlock.yaml").unwrap();
    server.ws.write(
        "airlock.yaml",
        text.replace(&format!(", \"{BOB}\": bob"), ""),
    );
    feed.wait_for(EventKind::ConfigReloaded);
    let query = tg.press(CHAT, message.id, BOB, &message.button("Approve"));
    let (words, alert) = tg.answer_to(&query);
    assert!(alert);
    assert!(
        words.starts_with("You (telegram user 43) are not an approver here"),
        "{words}"
    );
    assert_eq!(server.ws.read("u.txt"), None);
}

#[test]
fn the_channels_run_in_one_process_and_another_takes_over_when_it_ends() {
    let tg = TelegramStandIn::start(&[CHAT]);
    let ws = workspace(&config(&tg.url, &tokens()));
    let first = airlock_testkit::http::Serving::start(&ws, &[]);
    let _second = airlock_testkit::http::Serving::start(&ws, &[]);
    ws.propose("one.txt", "1\n");
    let message = tg.message(CHAT, 0);
    let query = tg.press(CHAT, message.id, ALICE, &message.button("Approve"));
    assert_eq!(tg.answer_to(&query).0, "Approved: applied.");
    assert_eq!(tg.messages(CHAT).len(), 1, "posted by one process");
    drop(first);
    // The other takes over.
    ws.propose("two.txt", "2\n");
    let message = tg.message(CHAT, 1);
    let query = tg.press(CHAT, message.id, ALICE, &message.button("Approve"));
    assert_eq!(tg.answer_to(&query).0, "Approved: applied.");
    assert_eq!(ws.read("two.txt").as_deref(), Some("2\n"));
    assert_eq!(tg.conflicts(), 0, "never two pollers at once");
}

#[test]
fn channels_test_reports_what_the_platform_answered_over_tls() {
    let tg = TelegramStandIn::start(&[CHAT]);
    let ca = airlock_testkit::tls::TestCa::new();
    let addr: std::net::SocketAddr = tg.url.trim_start_matches("http://").parse().unwrap();
    let proxy = ca.proxy(addr);
    let https = format!("https://localhost:{}", proxy.port);
    let ws = workspace(&format!(
        "{}tls:\n  ca_file: certs/ca.pem\n",
        config(&https, "").replace(
            &format!("chats: [{CHAT}]"),
            &format!("chats: [{CHAT}, {OTHER_CHAT}]")
        )
    ));
    ws.write("certs/ca.pem", ca.pem());
    let run = ws.run(&["channels", "test", "telegram"]);
    // The bot is not in OTHER_CHAT: Telegram's refusal is reported, exit 1.
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert_eq!(
        run.stdout,
        format!(
            "telegram: connected as @airlock_test_bot (bot id 123456)\n\
             telegram: chat {CHAT}: test message sent (message id 100)\n\
             telegram: chat {OTHER_CHAT}: refused: 400 Bad Request: chat not found\n"
        )
    );
    assert_eq!(
        tg.message(CHAT, 0).text,
        "airlock: this chat receives approval requests."
    );

    // Without the CA the server is not trusted, and the token never shows.
    let text = ws.read("airlock.yaml").unwrap();
    ws.write(
        "airlock.yaml",
        text.replace("tls:\n  ca_file: certs/ca.pem\n", ""),
    );
    let run = ws.run(&["channels", "test", "telegram"]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("UnknownIssuer"), "{}", run.stderr);
    assert!(
        !run.stderr.contains(TOKEN) && !run.stdout.contains(TOKEN),
        "{}",
        run.stderr
    );

    // Without the token it says which variable to set.
    let bare = Workspace::new(&config(&tg.url, ""));
    let run = bare.run(&["channels", "test", "telegram"]);
    assert_eq!(run.code, 1);
    assert_eq!(
        run.stderr.trim_end(),
        "error: the environment variable AIRLOCK_TELEGRAM_TOKEN (its token) is not set"
    );
}

#[test]
fn the_stand_in_refuses_what_telegram_refuses() {
    let tg = TelegramStandIn::start(&[CHAT]);
    let json = "application/json";
    let send = format!("/bot{TOKEN}/sendMessage");
    let cases: Vec<(String, &str, String, u16, &str)> = vec![
        ("/bot123:wrong/getMe".to_owned(), json, "{}".to_owned(), 401, "Unauthorized"),
        (format!("/bot{TOKEN}/sendMesage"), json, "{}".to_owned(), 404, "Not Found"),
        (send.clone(), "text/plain", "chat_id=1".to_owned(), 400, "Bad Request: unsupported content type; send application/json"),
        (send.clone(), json, "{not json".to_owned(), 400, "Bad Request: can't parse JSON object"),
        (send.clone(), json, json!({"chat_id": CHAT}).to_string(), 400, "Bad Request: message text is empty"),
        (send.clone(), json, json!({"chat_id": 5, "text": "hi"}).to_string(), 400, "Bad Request: chat not found"),
        (send.clone(), json, json!({"chat_id": CHAT, "text": "<b>open", "parse_mode": "HTML"}).to_string(), 400,
         "Bad Request: can't parse entities: can't find end tag corresponding to start tag \"b\""),
        (send.clone(), json, json!({"chat_id": CHAT, "text": "<script>x</script>", "parse_mode": "HTML"}).to_string(), 400,
         "Bad Request: can't parse entities: unsupported start tag \"script\""),
        (send.clone(), json, json!({"chat_id": CHAT, "text": "a & b", "parse_mode": "HTML"}).to_string(), 400,
         "Bad Request: can't parse entities: character entity expected"),
        (send.clone(), json, json!({"chat_id": CHAT, "text": "x".repeat(4097)}).to_string(), 400, "Bad Request: message is too long"),
        (send.clone(), json, json!({"chat_id": CHAT, "text": "x", "reply_markup": {"inline_keyboard": [[{"text": "a", "callback_data": "d".repeat(65)}]]}}).to_string(), 400,
         "Bad Request: BUTTON_DATA_INVALID"),
        (send.clone(), json, json!({"chat_id": CHAT, "text": "x", "reply_markup": {"inline_keyboard": [[{"text": "a", "url": "http://localhost/"}]]}}).to_string(), 400,
         "Bad Request: BUTTON_URL_INVALID"),
        (format!("/bot{TOKEN}/editMessageText"), json, json!({"chat_id": CHAT, "message_id": 99, "text": "x"}).to_string(), 400,
         "Bad Request: message to edit not found"),
        (format!("/bot{TOKEN}/answerCallbackQuery"), json, json!({"callback_query_id": "nope"}).to_string(), 400,
         "Bad Request: query is too old and response timeout expired or query ID is invalid"),
    ];
    for (path, content_type, body, status, description) in cases {
        let (got, answer) = tg.raw(&path, content_type, &body);
        assert_eq!(
            (got, answer["ok"].clone()),
            (status, json!(false)),
            "{path} {body}: {answer}"
        );
        assert_eq!(answer["description"], description, "{path} {body}");
    }
    // An edit that changes nothing is refused too.
    let sent = json!({"chat_id": CHAT, "text": "<b>same</b>", "parse_mode": "HTML"}).to_string();
    let (status, answer) = tg.raw(&send, json, &sent);
    assert_eq!(status, 200, "{answer}");
    let id = answer["result"]["message_id"].as_i64().unwrap();
    let edit =
        json!({"chat_id": CHAT, "message_id": id, "text": "<b>same</b>", "parse_mode": "HTML"})
            .to_string();
    let (status, answer) = tg.raw(&format!("/bot{TOKEN}/editMessageText"), json, &edit);
    assert_eq!(status, 400);
    assert!(
        answer["description"]
            .as_str()
            .unwrap()
            .starts_with("Bad Request: message is not modified")
    );
}

#[test]
fn over_mcp_the_requester_comes_in_meta_and_a_call_waits_for_the_chat() {
    let tg = TelegramStandIn::start(&[CHAT, OTHER_CHAT]);
    // Wait mode; the client cannot be asked, so `auto` waits for a live
    // approver channel: the chat.
    let ws = workspace(&config(&tg.url, "").replace("approval_mode: defer", "approval_mode: wait"));
    let mut mcp = airlock_testkit::mcp::RawStdio::start(&ws, &[]);
    tg.wait_for("the bot polling", |view| {
        (view.calls_of("getUpdates") > 0).then_some(())
    });
    let call = |id: u64, requester: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "write_file", "arguments": {"path": "m.txt", "content": "m\n"},
            "_meta": {"airlock/requester": requester}}})
    };
    let refused = mcp.request(call(
        2,
        json!({"channel": "telegram", "chat": "x y", "user": "1"}),
    ));
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(
        refused["error"]["message"],
        "_meta[\"airlock/requester\"]: requester.chat must be 1 to 64 letters, digits, - or _"
    );
    // The stdio session's user is this machine's (tester), not alice's: an
    // agent cannot send the confirmation to a chat of its choosing, so it
    // goes to the configured chat, saying who asked.
    mcp.send(&call(
        3,
        json!({"channel": "telegram", "chat": OTHER_CHAT.to_string(), "user": ALICE.to_string()}),
    ));
    let message = tg.message(CHAT, 0);
    assert!(
        message
            .text
            .contains("Requested by: tester (telegram user 42 in chat -100456)"),
        "{}",
        message.text
    );
    assert!(tg.messages(OTHER_CHAT).is_empty());
    let query = tg.press(CHAT, message.id, ALICE, &message.button("Approve"));
    assert_eq!(tg.answer_to(&query).0, "Approved: applied.");
    let answer = loop {
        let answer = mcp.receive();
        if answer["id"] == 3 {
            break answer;
        }
    };
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    assert_eq!(ws.read("m.txt").as_deref(), Some("m\n"));
}

mod slack {
    use airlock_testkit::Workspace;
    use airlock_testkit::slack::{APP_TOKEN, BOT_TOKEN, SlackStandIn};
    use serde_json::json;

    use super::{Running, events};

    const CHANNEL: &str = "C0APPROVE";
    const ALICE: &str = "U0ALICE";
    const STRANGER: &str = "U0STRANGER";

    fn workspace(api_url: &str) -> Workspace {
        Workspace::new(&format!(
            "security:\n  hitl:\n    approval_mode: defer\n\
             channels:\n  slack:\n    api_url: {api_url}\n    channels: [{CHANNEL}]\n    users: {{{ALICE}: alice}}\n"
        ))
        .with_env("AIRLOCK_SLACK_BOT_TOKEN", BOT_TOKEN)
        .with_env("AIRLOCK_SLACK_APP_TOKEN", APP_TOKEN)
    }

    #[test]
    fn a_button_press_is_acknowledged_at_once_and_decides() {
        let slack = SlackStandIn::start(&[CHANNEL]);
        let ws = workspace(&slack.url);
        let _channels = Running::channels(&ws);
        slack.connected(1);
        let id = ws.propose("s.txt", "<@U0ALL> *bold* <https://evil.example|click>\n");
        let message = slack.message(CHANNEL, 0);
        let shown = message.shown();
        for part in [
            "⚠️ Approval needed · medium risk",
            "Tool: write_file\nPath: s.txt",
            "+<@U0ALL> *bold* <https://evil.example|click>",
        ] {
            assert!(shown.contains(part), "{part:?} not in {shown}");
        }
        assert!(!message.text.contains('<'), "{}", message.text);
        let labels: Vec<String> = message.buttons().into_iter().map(|(l, _)| l).collect();
        assert_eq!(labels, ["Approve", "Deny", "Always allow (this session)"]);

        // A stranger: acknowledged at once, refused with an ephemeral
        // message only they see, audited.
        let envelope = slack.press(CHANNEL, &message.ts, STRANGER, &message.button("Approve"));
        assert!(slack.acked(&envelope) < std::time::Duration::from_secs(3));
        let (channel, user, text, _) = slack.ephemeral(0);
        assert_eq!((channel.as_str(), user.as_str()), (CHANNEL, STRANGER));
        assert!(
            text.starts_with("You (slack user U0STRANGER) are not an approver here"),
            "{text}"
        );
        assert_eq!(ws.read("s.txt"), None);

        let envelope = slack.press(CHANNEL, &message.ts, ALICE, &message.button("Approve"));
        assert!(slack.acked(&envelope) < std::time::Duration::from_secs(3));
        let edited = slack.message_once(CHANNEL, &message.ts, "applied", |m| {
            m.shown().contains("applied")
        });
        assert!(
            edited
                .shown()
                .starts_with("✅ Approved by alice via slack at "),
            "{}",
            edited.shown()
        );
        assert!(edited.buttons().is_empty());
        assert_eq!(slack.ephemeral(1).2, "Approved: applied.");
        assert!(ws.read("s.txt").is_some());
        let audit = ws.audit();
        assert_eq!(
            events(&audit, "hitl_refused")[0]["platform_user"],
            json!(STRANGER)
        );
        let decided = events(&audit, "hitl_decision");
        assert_eq!(
            (
                &decided[0]["channel"],
                &decided[0]["platform_user"],
                &decided[0]["user"],
                &decided[0]["hitl_id"]
            ),
            (&json!("slack"), &json!(ALICE), &json!("alice"), &json!(id))
        );
    }

    #[test]
    fn a_thread_reply_decides_and_the_socket_reconnects_when_asked() {
        let slack = SlackStandIn::start(&[CHANNEL]);
        slack.fail("apps.connections.open", 500, None, 1);
        let ws = workspace(&slack.url);
        let _channels = Running::channels(&ws);
        slack.connected(1);
        slack.disconnect();
        slack.connected(2);
        ws.propose("t.txt", "t\n");
        let message = slack.message(CHANNEL, 0);
        slack.reply(CHANNEL, &message.ts, ALICE, "yes");
        slack.message_once(CHANNEL, &message.ts, "applied", |m| {
            m.shown().contains("applied")
        });
        assert_eq!(ws.read("t.txt").as_deref(), Some("t\n"));
        assert_eq!(slack.failures_served(), 1);
    }

    #[test]
    fn rate_limits_and_outages_of_the_web_api_are_retried() {
        let slack = SlackStandIn::start(&[CHANNEL]);
        slack.fail("chat.postMessage", 429, Some(1), 1);
        slack.fail("chat.postMessage", 503, None, 1);
        let ws = workspace(&slack.url);
        let _channels = Running::channels(&ws);
        slack.connected(1);
        ws.propose("r.txt", "r\n");
        let message = slack.message(CHANNEL, 0);
        assert_eq!(slack.messages(CHANNEL).len(), 1);
        slack.press(CHANNEL, &message.ts, ALICE, &message.button("Deny"));
        let denied = slack.message_once(CHANNEL, &message.ts, "denied", |m| {
            m.shown().starts_with("❌ Denied")
        });
        assert!(denied.shown().starts_with("❌ Denied by alice via slack"));
        assert_eq!(slack.failures_served(), 2);
    }

    #[test]
    fn channels_test_and_the_stand_ins_refusals() {
        let slack = SlackStandIn::start(&[CHANNEL]);
        let ws = workspace(&slack.url);
        let run = ws.run(&["channels", "test", "slack"]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert_eq!(
            run.stdout,
            format!(
                "slack: connected as airlock (user U0BOT) in airlock test\n\
                 slack: channel {CHANNEL}: test message sent (ts 1700000001.000200)\n"
            )
        );
        let json = "application/json";
        let post = |body: serde_json::Value| {
            slack.raw("chat.postMessage", Some(BOT_TOKEN), json, &body.to_string())
        };
        let button = |label: &str| {
            json!([{"type": "actions", "elements": [{"type": "button",
            "text": {"type": "plain_text", "text": label}, "action_id": "a", "value": "v"}]}])
        };
        let cases = [
            (slack.raw("auth.test", None, json, "{}"), "not_authed"),
            (
                slack.raw("auth.test", Some("xoxb-wrong"), json, "{}"),
                "invalid_auth",
            ),
            (
                slack.raw("apps.connections.open", Some(BOT_TOKEN), json, "{}"),
                "invalid_auth",
            ),
            (
                slack.raw("chat.postMessage", Some(BOT_TOKEN), "text/plain", "x"),
                "invalid_form_data",
            ),
            (
                slack.raw("chat.postMessage", Some(BOT_TOKEN), json, "{nope"),
                "invalid_json",
            ),
            (
                post(json!({"channel": "C0NOWHERE", "text": "x"})),
                "channel_not_found",
            ),
            (post(json!({"channel": CHANNEL})), "no_text"),
            (
                post(
                    json!({"channel": CHANNEL, "text": "x", "blocks": [{"type": "section", "text": {"type": "plain_text", "text": "y".repeat(3001)}}]}),
                ),
                "invalid_blocks",
            ),
            (
                post(json!({"channel": CHANNEL, "text": "x", "blocks": button(&"z".repeat(76))})),
                "invalid_blocks",
            ),
            (
                post(json!({"channel": CHANNEL, "text": "x", "blocks": [{"type": "marquee"}]})),
                "invalid_blocks",
            ),
            (
                slack.raw(
                    "chat.update",
                    Some(BOT_TOKEN),
                    json,
                    &json!({"channel": CHANNEL, "ts": "1.1", "text": "x"}).to_string(),
                ),
                "message_not_found",
            ),
        ];
        for ((status, answer), error) in cases {
            assert_eq!(
                (status, &answer["ok"], &answer["error"]),
                (200, &json!(false), &json!(error)),
                "{answer}"
            );
        }
        assert_eq!(
            slack
                .raw("chat.deleteEverything", Some(BOT_TOKEN), json, "{}")
                .0,
            404
        );
        // A Socket Mode ticket works once.
        assert!(!slack.raw_socket("ticket-forged"));
    }
}

mod discord {
    use airlock_testkit::Workspace;
    use airlock_testkit::discord::{DiscordStandIn, TOKEN};
    use serde_json::json;

    use super::{Running, events};

    const CHANNEL: &str = "112233445566778899";
    const ALICE: &str = "998877665544332211";
    const STRANGER: &str = "123123123123123123";

    fn workspace(api_url: &str) -> Workspace {
        Workspace::new(&format!(
            "security:\n  hitl:\n    approval_mode: defer\n\
             channels:\n  discord:\n    api_url: {api_url}\n    channels: [\"{CHANNEL}\"]\n    users: {{\"{ALICE}\": alice}}\n"
        ))
        .with_env("AIRLOCK_DISCORD_TOKEN", TOKEN)
    }

    #[test]
    fn presses_are_deferred_at_once_and_answered_and_code_blocks_hold() {
        let discord = DiscordStandIn::start(&[CHANNEL], 45_000);
        let ws = workspace(&discord.url);
        let _channels = Running::channels(&ws);
        discord.ready(1, 0);
        let id = ws.propose(
            "d.txt",
            "```\n@everyone **bold** [x](https://evil.example)\n",
        );
        let message = discord.message(CHANNEL, 0);
        assert!(
            message.content.starts_with(
                "**⚠️ Approval needed** · `` medium `` risk\n**Tool:** `` write_file ``"
            ),
            "{}",
            message.content
        );
        // The file's backticks cannot close airlock's code block.
        assert!(
            message
                .content
                .contains("+`\u{200b}`\u{200b}`\u{200b}\n+@everyone **bold**"),
            "{}",
            message.content
        );
        let labels: Vec<String> = message.buttons().into_iter().map(|(l, _)| l).collect();
        assert_eq!(labels, ["Approve", "Deny", "Always allow (this session)"]);

        let refused = discord.press(CHANNEL, &message.id, STRANGER, &message.button("Approve"));
        assert!(
            discord
                .followup(&refused)
                .contains("are not an approver here")
        );
        assert_eq!(
            discord.answered(&refused),
            Some(5),
            "a deferred answer first"
        );
        assert_eq!(ws.read("d.txt"), None);
        let approved = discord.press(CHANNEL, &message.id, ALICE, &message.button("Approve"));
        assert_eq!(discord.followup(&approved), "`` Approved: applied. ``");
        let edited = discord.message_once(CHANNEL, &message.id, "applied", |m| {
            m.content.contains("applied")
        });
        assert!(
            edited
                .content
                .starts_with("**Outcome:** `` ✅ Approved by alice via discord at "),
            "{}",
            edited.content
        );
        assert!(edited.buttons().is_empty());
        let audit = ws.audit();
        assert_eq!(
            events(&audit, "hitl_refused")[0]["platform_user"],
            json!(STRANGER)
        );
        let decided = events(&audit, "hitl_decision");
        assert_eq!(
            (
                &decided[0]["channel"],
                &decided[0]["platform_user"],
                &decided[0]["hitl_id"]
            ),
            (&json!("discord"), &json!(ALICE), &json!(id))
        );
    }

    #[test]
    fn replies_decide_pins_do_not_and_the_gateway_resumes_after_every_kind_of_drop() {
        // Heartbeats every 200 ms, so missed ACKs show quickly.
        let discord = DiscordStandIn::start(&[CHANNEL], 200);
        let ws = workspace(&discord.url);
        let _channels = Running::channels(&ws);
        discord.ready(1, 0);
        discord.heartbeats(2);
        // A dropped connection: resumed, and what was missed is replayed.
        ws.propose("one.txt", "1\n");
        let first = discord.message(CHANNEL, 0);
        discord.drop_connection();
        discord.reply(CHANNEL, &first.id, ALICE, "pinned", 6);
        discord.reply(CHANNEL, &first.id, ALICE, "no", 19);
        discord.ready(1, 1);
        discord.message_once(CHANNEL, &first.id, "denied", |m| {
            m.content.contains("Denied by alice")
        });
        // RECONNECT: resumed.
        discord.ask_reconnect();
        discord.ready(1, 2);
        // Heartbeats without ACKs: a zombie connection, closed and resumed.
        discord.acks(false);
        let beats = discord.heartbeats_now();
        discord.heartbeats(beats + 2);
        discord.acks(true);
        discord.ready(1, 3);
        ws.propose("two.txt", "2\n");
        let second = discord.message(CHANNEL, 1);
        discord.reply(CHANNEL, &second.id, ALICE, "yes", 19);
        discord.message_once(CHANNEL, &second.id, "applied", |m| {
            m.content.contains("applied")
        });
        assert_eq!(ws.read("two.txt").as_deref(), Some("2\n"));
        assert_eq!(ws.read("one.txt"), None);
    }

    #[test]
    fn rate_limits_and_outages_are_retried() {
        let discord = DiscordStandIn::start(&[CHANNEL], 45_000);
        discord.fail("/channels", 429, Some(0.5), 1);
        discord.fail("/channels", 500, None, 1);
        let ws = workspace(&discord.url);
        let _channels = Running::channels(&ws);
        discord.ready(1, 0);
        ws.propose("r.txt", "r\n");
        let message = discord.message(CHANNEL, 0);
        assert_eq!(discord.messages(CHANNEL).len(), 1);
        assert_eq!(discord.failures_served(), 2);
        let pressed = discord.press(CHANNEL, &message.id, ALICE, &message.button("Deny"));
        assert_eq!(discord.followup(&pressed), "`` Denied. ``");
    }

    #[test]
    fn channels_test_and_the_stand_ins_refusals() {
        let discord = DiscordStandIn::start(&[CHANNEL], 45_000);
        let ws = workspace(&discord.url);
        let run = ws.run(&["channels", "test", "discord"]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert!(
            run.stdout
                .starts_with("discord: connected as airlock-test (user 777000000000000001)\n"),
            "{}",
            run.stdout
        );
        assert!(
            run.stdout
                .contains(&format!("discord: channel {CHANNEL}: test message sent")),
            "{}",
            run.stdout
        );
        // A wrong token: exit 1 with what Discord said.
        let wrong = Workspace::new(&ws.read("airlock.yaml").unwrap())
            .with_env("AIRLOCK_DISCORD_TOKEN", "wrong");
        let run = wrong.run(&["channels", "test", "discord"]);
        assert_eq!(run.code, 1);
        assert_eq!(
            run.stderr.trim_end(),
            "error: discord: GET /users/@me: refused: 401 Unauthorized: 401: Unauthorized (code 0)"
        );

        let post = |body: serde_json::Value| {
            discord.raw(
                "POST",
                &format!("/channels/{CHANNEL}/messages"),
                Some(TOKEN),
                &body.to_string(),
            )
        };
        let button = |b: serde_json::Value| json!({"content": "x", "components": [{"type": 1, "components": [b]}]});
        let cases = [
            (discord.raw("GET", "/users/@me", None, ""), 401, 0),
            (discord.raw("GET", "/users/@me", Some("wrong"), ""), 401, 0),
            (
                discord.raw(
                    "POST",
                    &format!("/channels/{CHANNEL}/messages"),
                    Some(TOKEN),
                    "{nope",
                ),
                400,
                50109,
            ),
            (
                discord.raw(
                    "POST",
                    "/channels/1/messages",
                    Some(TOKEN),
                    "{\"content\": \"x\"}",
                ),
                404,
                10003,
            ),
            (post(json!({"content": "x".repeat(2001)})), 400, 50035),
            (post(json!({})), 400, 50006),
            (
                post(button(json!({"type": 2, "style": 1, "label": "a"}))),
                400,
                50035,
            ),
            (
                post(button(
                    json!({"type": 2, "style": 5, "label": "a", "custom_id": "x"}),
                )),
                400,
                50035,
            ),
            (
                post(button(
                    json!({"type": 2, "style": 1, "label": "l".repeat(81), "custom_id": "x"}),
                )),
                400,
                50035,
            ),
            (
                discord.raw(
                    "PATCH",
                    &format!("/channels/{CHANNEL}/messages/5"),
                    Some(TOKEN),
                    "{\"content\": \"x\"}",
                ),
                404,
                10008,
            ),
            (
                discord.raw(
                    "POST",
                    "/interactions/5/itoken-5/callback",
                    None,
                    "{\"type\": 5}",
                ),
                404,
                10062,
            ),
        ];
        for ((status, answer), want_status, code) in cases {
            assert_eq!(
                (status, &answer["code"]),
                (want_status, &json!(code)),
                "{answer}"
            );
        }
        // The Gateway: a wrong version, a wrong token.
        let identify = json!({"op": 2, "d": {"token": "wrong", "intents": 0, "properties": {}}});
        assert_eq!(
            discord.raw_gateway("?v=9&encoding=json", identify.clone()),
            Some(4012)
        );
        assert_eq!(
            discord.raw_gateway("?v=10&encoding=json", identify),
            Some(4004)
        );
    }
}
