//! `airlock audit verify | query | tail`: reading the audit log. These commands
//! never write to the log, so verifying cannot repair what it should report.

use std::time::Duration;

use airlock_audit::{Follower, Head, Query};
use airlock_store::Store;
use anyhow::anyhow;
use clap::Subcommand;
use serde_json::Value;

use crate::workspace::Workspace;
use crate::{Failure, print};

#[derive(Debug, Subcommand)]
pub(crate) enum AuditCommand {
    /// Walk the hash chain; exit 0 when intact, 6 naming the first bad seq.
    Verify {
        /// One JSON object instead of a sentence.
        #[arg(long)]
        json: bool,
    },
    /// Records matching every condition given, oldest first.
    Query {
        /// Only records of this event type (write_file_apply, hitl_decision, …).
        #[arg(long, value_name = "T")]
        event_type: Option<String>,
        /// A top-level field equals a value; repeatable.
        #[arg(long = "filter", value_name = "K=V")]
        filters: Vec<String>,
        /// Only records at or after this RFC 3339 time.
        #[arg(long, value_name = "TS")]
        since: Option<String>,
        /// One JSON array instead of JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// The last records; with -f, keep printing new ones as they are appended.
    Tail {
        /// Follow the log.
        #[arg(short = 'f', long)]
        follow: bool,
        /// How many records to show first.
        #[arg(short = 'n', long, default_value_t = 20)]
        lines: usize,
    },
}

pub(crate) fn run(workspace: &Workspace, command: &AuditCommand) -> Result<u8, Failure> {
    let config = &workspace.loaded.config;
    let path = workspace.root.join(&config.audit.path);
    match command {
        AuditCommand::Verify { json } => {
            if !path.exists() {
                print(&format!("{}: no audit log yet", path.display()));
                return Ok(0);
            }
            let key = config
                .audit
                .hmac_key_env
                .as_deref()
                .and_then(|name| std::env::var(name).ok())
                .filter(|key| !key.is_empty());
            let store = Store::open(&workspace.state_dir().join("airlock.db"))
                .map_err(Failure::internal)?;
            let stored = store
                .audit_head()
                .map_err(Failure::internal)?
                .map(|(seq, event_hash)| Head { seq, event_hash });
            let report =
                airlock_audit::verify(&path, key.as_deref().map(str::as_bytes), stored.as_ref())
                    .map_err(Failure::internal)?;
            let last = report.head.as_ref().map_or(0, |head| head.seq);
            // A log that had to be repaired (a torn line, a cut-off tail) stays
            // reported: the chain verifies again, but the records say what was lost.
            let mut repairs = Vec::new();
            for event in [
                airlock_audit::TORN_LINE_EVENT,
                airlock_audit::TRUNCATED_TAIL_EVENT,
            ] {
                let query = Query {
                    event_type: Some(event.to_owned()),
                    ..Query::default()
                };
                for record in airlock_audit::query(&path, &query).map_err(Failure::internal)? {
                    let seq = record.get("seq").and_then(Value::as_u64).unwrap_or(0);
                    repairs.push(format!("seq {seq}: {event}"));
                }
            }
            match &report.problem {
                None if !repairs.is_empty() => {
                    let text = format!(
                        "chain intact through seq {last}, but the log was repaired: {}",
                        repairs.join("; ")
                    );
                    if *json {
                        print(&serde_json::json!({"ok": false, "records": report.records, "last_seq": last, "repairs": repairs}).to_string());
                    } else {
                        print(&text);
                    }
                    Ok(6)
                }
                None => {
                    if *json {
                        print(&serde_json::json!({"ok": true, "records": report.records, "last_seq": last}).to_string());
                    } else {
                        print(&format!(
                            "ok: {} records, chain intact through seq {last}",
                            report.records
                        ));
                    }
                    Ok(0)
                }
                Some(problem) => {
                    let text = format!("broken: {problem}");
                    if *json {
                        print(&serde_json::json!({"ok": false, "records": report.records, "first_bad_seq": problem.seq, "line": problem.line, "problem": problem.kind.to_string()}).to_string());
                    } else {
                        print(&text);
                    }
                    Ok(6)
                }
            }
        }
        AuditCommand::Query {
            event_type,
            filters,
            since,
            json,
        } => {
            let mut parsed = Vec::new();
            for filter in filters {
                let (key, value) = filter
                    .split_once('=')
                    .ok_or_else(|| Failure::usage(anyhow!("--filter {filter:?} is not K=V")))?;
                parsed.push((key.to_owned(), value.to_owned()));
            }
            let query = Query {
                event_type: event_type.clone(),
                filters: parsed,
                since: since.clone(),
            };
            let records = if path.exists() {
                airlock_audit::query(&path, &query).map_err(Failure::internal)?
            } else {
                Vec::new()
            };
            if *json {
                let list: Vec<Value> = records.into_iter().map(Value::Object).collect();
                print(&serde_json::to_string_pretty(&list).map_err(Failure::internal)?);
            } else {
                for record in records {
                    print(&Value::Object(record).to_string());
                }
            }
            Ok(0)
        }
        AuditCommand::Tail { follow, lines } => {
            if !path.exists() && !follow {
                return Ok(0);
            }
            let (last, offset) = if path.exists() {
                airlock_audit::tail_lines(&path, *lines).map_err(Failure::internal)?
            } else {
                (Vec::new(), 0)
            };
            for line in last {
                print(&line);
            }
            if !follow {
                return Ok(0);
            }
            let mut follower = Follower::open(&path, offset).map_err(Failure::internal)?;
            loop {
                for line in follower.poll().map_err(Failure::internal)? {
                    print(&line);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}
