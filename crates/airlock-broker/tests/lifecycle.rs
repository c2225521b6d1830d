//! An approval's transitions, through the broker's API without spawning
//! anything: each state it can rest in (pending, applied, denied, expired,
//! cancelled, failed, undone; approved and applying last no longer than one
//! call here, and are covered by the apply and recovery tests) meets each
//! event; for each pair, the state it ends in, what the caller gets, the
//! events the feed records (in order, once each), and what the file holds.
//!
//! The table is the specification; time is a [`ManualClock`] moved past a
//! deadline, never waited for.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use airlock_broker::{Authority, Broker, DecideRequest, EventKind, ManualClock, Mode, Workspace};
use airlock_core::{Channel, ToolCall, config};
use airlock_store::ApprovalStatus;
use pretty_assertions::assert_eq;
use serde_json::json;

const START_MS: u64 = 1_800_000_000_000;
/// How long a deferred approval waits in this configuration.
const TIMEOUT_MS: u64 = 60_000;

const CONFIG: &str = "\
security:
  hitl:
    approval_mode: defer
    default_timeout: 60
    policies:
      medium: {timeout: 60, allow_skip: true}
file_broker:
  hitl_ttl_seconds: 60
";

/// Where an approval is before the event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Pending,
    Applied,
    Denied,
    Expired,
    Cancelled,
    /// Approved, but the file changed underneath: the apply failed (stale).
    Failed,
    Undone,
}

/// What happens to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Approve,
    Deny,
    /// Its time is up and the sweeper runs.
    Timeout,
    /// The call waiting for it went away.
    Cancel,
    Undo,
    /// The file changes, then a human approves.
    ApproveAfterChange,
}

/// What the event leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    status: ApprovalStatus,
    /// The call's answer: an envelope's status and code, or the error's code.
    answer: String,
    /// The feed's events for the approval, in order.
    events: Vec<EventKind>,
    /// What `notes.txt` holds.
    file: String,
}

struct Harness {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    clock: Arc<ManualClock>,
    broker: Broker,
}

impl Harness {
    fn new() -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::write(root.join("airlock.yaml"), CONFIG).unwrap();
        std::fs::write(root.join("notes.txt"), "old\n").unwrap();
        let mut loaded = config::load(CONFIG, "airlock.yaml").unwrap();
        let root_text = root.to_str().unwrap().to_owned();
        loaded
            .policy
            .bind_workspace(&root_text, Some(&format!("{root_text}/airlock.yaml")));
        let clock = Arc::new(ManualClock::at(START_MS));
        let broker =
            Broker::open_with_clock(Workspace::new(root.clone(), loaded), clock.clone()).unwrap();
        Harness {
            _dir: dir,
            root,
            clock,
            broker,
        }
    }

    /// A write of `notes.txt`, deferred: the new approval's id.
    fn propose(&self) -> String {
        let call = ToolCall::new(
            "write_file",
            json!({"path": "notes.txt", "content": "new\n"}),
            self.broker.policy().origin_of("write_file", None),
            START_MS,
        );
        let envelope = self.broker.submit(&call, &Mode::Defer, &|_| {});
        assert_eq!(envelope.status.as_str(), "hitl_required", "{envelope:?}");
        envelope.hitl.unwrap().hitl_id
    }

    fn decide(&self, id: &str, approve: bool) -> String {
        let request = DecideRequest {
            approve,
            reason: None,
            always: None,
            authority: Authority::Terminal,
            user: "alice".to_owned(),
            channel: Channel::Terminal,
            content: None,
        };
        answer(self.broker.decide(id, &request).map(|envelope| {
            (
                envelope.status.as_str().to_owned(),
                envelope.error.map(|error| error.code.as_str().to_owned()),
            )
        }))
    }

    /// Brings a new approval into `state`.
    fn approval_in(&self, state: State) -> String {
        let id = self.propose();
        match state {
            State::Pending => {}
            State::Applied => {
                self.decide(&id, true);
            }
            State::Denied => {
                self.decide(&id, false);
            }
            State::Expired => {
                self.event(&id, Event::Timeout);
            }
            State::Cancelled => {
                self.event(&id, Event::Cancel);
            }
            State::Failed => {
                self.event(&id, Event::ApproveAfterChange);
                // Back to what the next approval is made against.
                std::fs::write(self.root.join("notes.txt"), "old\n").unwrap();
            }
            State::Undone => {
                self.decide(&id, true);
                self.event(&id, Event::Undo);
            }
        }
        id
    }

    /// Lets `event` happen to `id`: the caller's answer.
    fn event(&self, id: &str, event: Event) -> String {
        match event {
            Event::Approve => self.decide(id, true),
            Event::Deny => self.decide(id, false),
            Event::Timeout => {
                self.clock.advance(TIMEOUT_MS + 1);
                answer(
                    self.broker
                        .expire_overdue()
                        .map(|n| (format!("{n} expired"), None)),
                )
            }
            Event::Cancel => match self.broker.cancel(id) {
                Some(envelope) => format!("{} cancelled", envelope.status.as_str()),
                None => "not pending".to_owned(),
            },
            Event::Undo => answer(self.broker.undo(id, "alice").map(|envelope| {
                (
                    envelope.status.as_str().to_owned(),
                    envelope.error.map(|error| error.code.as_str().to_owned()),
                )
            })),
            Event::ApproveAfterChange => {
                std::fs::write(self.root.join("notes.txt"), "changed underneath\n").unwrap();
                self.decide(id, true)
            }
        }
    }

    fn events_of(&self, id: &str) -> Vec<EventKind> {
        self.broker
            .events_after(0, 10_000)
            .unwrap()
            .into_iter()
            .filter(|event| event.subject.as_deref() == Some(id))
            .map(|event| event.kind)
            .collect()
    }
}

fn answer(result: Result<(String, Option<String>), airlock_broker::BrokerError>) -> String {
    match result {
        Ok((status, None)) => status,
        Ok((status, Some(code))) => format!("{status} {code}"),
        Err(error) => format!("refused {}", error.code().as_str()),
    }
}

fn outcome(status: ApprovalStatus, answer: &str, events: &[EventKind], file: &str) -> Outcome {
    Outcome {
        status,
        answer: answer.to_owned(),
        events: events.to_vec(),
        file: file.to_owned(),
    }
}

#[test]
fn every_state_and_event_leads_where_the_table_says() {
    use ApprovalStatus as S;
    use EventKind::*;
    const OLD: &str = "old\n";
    const NEW: &str = "new\n";
    const CHANGED: &str = "changed underneath\n";
    let created = [ApprovalCreated];
    let applied = [ApprovalCreated, ApprovalDecided, ApprovalApplied];
    let denied = [ApprovalCreated, ApprovalDecided];
    let expired = [ApprovalCreated, ApprovalExpired];
    let cancelled = [ApprovalCreated, ApprovalCancelled];
    let failed = [ApprovalCreated, ApprovalDecided, ApprovalFailed];
    let undone = [
        ApprovalCreated,
        ApprovalDecided,
        ApprovalApplied,
        ApprovalUndone,
    ];
    let table: Vec<(State, Event, Outcome)> = vec![
        // From pending, every event decides it once.
        (
            State::Pending,
            Event::Approve,
            outcome(S::Applied, "allowed", &applied, NEW),
        ),
        (
            State::Pending,
            Event::Deny,
            outcome(S::Denied, "denied policy_denied", &denied, OLD),
        ),
        (
            State::Pending,
            Event::Timeout,
            outcome(S::Expired, "1 expired", &expired, OLD),
        ),
        (
            State::Pending,
            Event::Cancel,
            outcome(S::Cancelled, "denied cancelled", &cancelled, OLD),
        ),
        (
            State::Pending,
            Event::Undo,
            outcome(S::Pending, "refused invalid_input", &created, OLD),
        ),
        (
            State::Pending,
            Event::ApproveAfterChange,
            outcome(S::Failed, "error stale", &failed, CHANGED),
        ),
        // Applied: only undo changes anything.
        (
            State::Applied,
            Event::Approve,
            outcome(S::Applied, "refused already_decided", &applied, NEW),
        ),
        (
            State::Applied,
            Event::Deny,
            outcome(S::Applied, "refused already_decided", &applied, NEW),
        ),
        (
            State::Applied,
            Event::Timeout,
            outcome(S::Applied, "0 expired", &applied, NEW),
        ),
        (
            State::Applied,
            Event::Cancel,
            outcome(S::Applied, "not pending", &applied, NEW),
        ),
        (
            State::Applied,
            Event::Undo,
            outcome(S::Applied, "allowed", &undone, OLD),
        ),
        // Denied, expired, cancelled and failed are final.
        (
            State::Denied,
            Event::Approve,
            outcome(S::Denied, "refused already_decided", &denied, OLD),
        ),
        (
            State::Denied,
            Event::Timeout,
            outcome(S::Denied, "0 expired", &denied, OLD),
        ),
        (
            State::Denied,
            Event::Undo,
            outcome(S::Denied, "refused invalid_input", &denied, OLD),
        ),
        (
            State::Expired,
            Event::Approve,
            outcome(S::Expired, "refused already_decided", &expired, OLD),
        ),
        (
            State::Expired,
            Event::Deny,
            outcome(S::Expired, "refused already_decided", &expired, OLD),
        ),
        (
            State::Expired,
            Event::Cancel,
            outcome(S::Expired, "not pending", &expired, OLD),
        ),
        (
            State::Cancelled,
            Event::Approve,
            outcome(S::Cancelled, "refused already_decided", &cancelled, OLD),
        ),
        (
            State::Cancelled,
            Event::Timeout,
            outcome(S::Cancelled, "0 expired", &cancelled, OLD),
        ),
        (
            State::Failed,
            Event::Approve,
            outcome(S::Failed, "refused already_decided", &failed, OLD),
        ),
        (
            State::Failed,
            Event::Undo,
            outcome(S::Failed, "refused invalid_input", &failed, OLD),
        ),
        // Undone once is undone for good.
        (
            State::Undone,
            Event::Undo,
            outcome(S::Applied, "refused already_decided", &undone, OLD),
        ),
        (
            State::Undone,
            Event::Approve,
            outcome(S::Applied, "refused already_decided", &undone, OLD),
        ),
    ];
    // Every other event on a settled approval changes nothing of it (only
    // the file, where the event itself writes it).
    let settled: [(State, S, &[EventKind], &str); 6] = [
        (State::Applied, S::Applied, &applied, NEW),
        (State::Denied, S::Denied, &denied, OLD),
        (State::Expired, S::Expired, &expired, OLD),
        (State::Cancelled, S::Cancelled, &cancelled, OLD),
        (State::Failed, S::Failed, &failed, OLD),
        (State::Undone, S::Applied, &undone, OLD),
    ];
    let mut table = table;
    for (state, status, events, file) in settled {
        for event in [
            Event::Approve,
            Event::Deny,
            Event::Timeout,
            Event::Cancel,
            Event::Undo,
            Event::ApproveAfterChange,
        ] {
            if table.iter().any(|(s, e, _)| (*s, *e) == (state, event)) {
                continue;
            }
            let (answer, file) = match event {
                Event::Approve | Event::Deny => ("refused already_decided", file),
                Event::ApproveAfterChange => ("refused already_decided", CHANGED),
                Event::Timeout => ("0 expired", file),
                Event::Cancel => ("not pending", file),
                Event::Undo => ("refused invalid_input", file),
            };
            table.push((state, event, outcome(status, answer, events, file)));
        }
    }
    assert_eq!(table.len(), 7 * 6, "every state meets every event");
    let mut wrong = Vec::new();
    for (state, event, want) in table {
        let harness = Harness::new();
        let id = harness.approval_in(state);
        let answer = harness.event(&id, event);
        let got = Outcome {
            status: harness.broker.approval(&id).unwrap().status,
            answer,
            events: harness.events_of(&id),
            file: std::fs::read_to_string(harness.root.join("notes.txt")).unwrap(),
        };
        if got != want {
            wrong.push(format!(
                "{state:?} x {event:?}:\n  want {want:?}\n  got  {got:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The audit log records each transition the feed records, and the chain
/// verifies after all of them.
#[test]
fn every_transition_is_audited_and_the_chain_verifies() {
    let harness = Harness::new();
    let applied = harness.approval_in(State::Applied);
    harness.event(&applied, Event::Undo);
    harness.approval_in(State::Denied);
    harness.approval_in(State::Expired);
    harness.approval_in(State::Failed);
    let check = airlock_broker::check_audit(&harness.root, harness.broker.config(), None).unwrap();
    assert!(check.ok(), "{:?}", check.to_json());
    let text = std::fs::read_to_string(harness.broker.audit_path()).unwrap();
    let events: Vec<String> = text
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|record| record["event"] != "config_loaded")
        .map(|record| {
            format!(
                "{} {}",
                record["event"].as_str().unwrap(),
                record["status"].as_str().unwrap_or("-")
            )
        })
        .collect();
    assert_eq!(
        events,
        [
            "write_file_propose hitl_required",
            "hitl_decision -",
            "write_file_apply allowed",
            "undo allowed",
            "write_file_propose hitl_required",
            "hitl_decision -",
            "write_file_propose hitl_required",
            "hitl_timeout denied",
            "write_file_propose hitl_required",
            "hitl_decision -",
            "write_file_apply error",
        ]
    );
}
