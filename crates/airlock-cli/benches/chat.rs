//! Chat approvals end to end (DESIGN §7.1): `airlock serve --http` runs the
//! Telegram channel against the Bot API stand-in on a real socket, and
//! agents are `airlock call write_file` processes waiting for a decision,
//! each in a session of its own (so each is shown at once).
//! - approval created -> message received: the approval's creation time
//!   (from the event feed) to the stand-in's receipt of `sendMessage`;
//! - button pressed -> agent's call resumed: from the press (the callback
//!   query handed to the bot's long poll) to the `airlock call` process
//!   exiting with the applied result.
//!
//! It fails unless every call ends applied with its content written and
//! every message is edited to say so. `cargo bench -p airlock-cli --bench
//! chat` prints p50/p99 over 200 approvals (release build); under `cargo
//! test --benches` it runs 5 to prove it works.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use airlock_store::EventKind;
use airlock_testkit::Workspace;
use airlock_testkit::telegram::{TOKEN, TelegramStandIn};
use serde_json::json;

const CHAT: i64 = -100_777;
const APPROVER: i64 = 42;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn line(what: &str, samples: &mut [Duration]) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{what:<40} n={:<4} p50 {:>8.2} ms   p99 {:>8.2} ms   max {:>8.2} ms",
        samples.len(),
        ms(percentile(samples, 0.50)),
        ms(percentile(samples, 0.99)),
        ms(*samples.last().unwrap())
    );
}

fn main() {
    let full = std::env::args().any(|arg| arg == "--bench");
    let n = if full { 200 } else { 5 };
    let tg = TelegramStandIn::start(&[CHAT]);
    let ws = Workspace::new(&format!(
        "security:\n  hitl:\n    max_pending: 100000\n    max_pending_per_session: 100000\n\
         channels:\n  telegram:\n    api_url: {}\n    chats: [{CHAT}]\n    users: {{\"{APPROVER}\": alice}}\n",
        tg.url
    ))
    .with_env("AIRLOCK_TELEGRAM_TOKEN", TOKEN);
    let _server = airlock_testkit::http::Serving::start(&ws, &[]);
    tg.wait_for("the bot polling", |view| {
        (view.calls_of("getUpdates") > 0).then_some(())
    });
    let mut feed = ws.feed();
    let mut shown = Vec::new();
    let mut resumed = Vec::new();
    for i in 0..n {
        let path = format!("src/f{i}.txt");
        let args = json!({"path": path, "content": format!("{i}\n")}).to_string();
        let session = format!("s{i}");
        let call = ws
            .command(&["call", "write_file", "--args", &args, "--session", &session])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let created = feed.wait_for(EventKind::ApprovalCreated);
        let message = tg.message(CHAT, i);
        shown.push(Duration::from_millis(
            message.received_ms.saturating_sub(created.at_ms),
        ));
        let data = message.button("Approve");
        let pressed = Instant::now();
        tg.press(CHAT, message.id, APPROVER, &data);
        let output = call.wait_with_output().unwrap();
        resumed.push(pressed.elapsed());
        let answer: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(answer["status"], "allowed", "{answer}");
        assert_eq!(ws.read(&path), Some(format!("{i}\n")));
        tg.message_once(CHAT, message.id, "the outcome", |m| {
            m.text.contains("applied")
        });
    }
    println!("chat approvals through Telegram's stand-in ({n} approvals, one session each)");
    line("approval created -> message received", &mut shown);
    line("button pressed -> agent's call resumed", &mut resumed);
}
