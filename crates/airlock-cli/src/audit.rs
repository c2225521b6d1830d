//! `airlock audit verify | query | tail | export`: reading the audit chain,
//! from the JSONL file or, with a shared store (`store.url`), from the
//! database. These commands never write to the chain, so verifying cannot
//! repair what it should report.

use std::io::Write as _;
use std::time::Duration;

use airlock_audit::Query;
use airlock_broker::AuditSource;
use anyhow::anyhow;
use clap::Subcommand;
use serde_json::Value;

use crate::workspace::Workspace;
use crate::{Failure, print, print_json};

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
    /// Every record as JSON lines, oldest first: the JSONL file, or the
    /// chain a shared store keeps, byte for byte as the file would be (so
    /// `airlock audit verify` of a copy checks it anywhere).
    Export {
        /// Where to write it (default: standard output).
        #[arg(value_name = "FILE")]
        file: Option<std::path::PathBuf>,
    },
}

pub(crate) fn run(workspace: &Workspace, command: &AuditCommand) -> Result<u8, Failure> {
    let config = &workspace.loaded.config;
    let store = crate::store::shared_store(config, &workspace.root)?;
    let source = AuditSource::of(&workspace.root, config, store.as_deref());
    let failed = |error: airlock_broker::BrokerError| Failure::internal(anyhow!("{error}"));
    match command {
        AuditCommand::Verify { json } => {
            let check = airlock_broker::check_audit(&workspace.root, config, store.as_deref())
                .map_err(|error| Failure::internal(anyhow!("{error}")))?;
            if check.missing {
                print(&format!("{}: no audit log yet", source.describe()));
                return Ok(0);
            }
            let last = check.last_seq;
            let text = match &check.problem {
                Some((seq, line, offset, problem)) => {
                    format!("broken: seq {seq} (line {line}, byte {offset}): {problem}")
                }
                // A log that had to be repaired (a torn line, a cut-off tail)
                // stays reported: the chain verifies again, but the records
                // say what was lost.
                None if !check.repairs.is_empty() => format!(
                    "chain intact through seq {last}, but the log was repaired: {}",
                    check.repairs.join("; ")
                ),
                None => format!(
                    "ok: {} records, chain intact through seq {last}",
                    check.records
                ),
            };
            if *json {
                print_json(&check.to_json().to_string());
            } else {
                print(&text);
            }
            Ok(if check.ok() { 0 } else { 6 })
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
            let records = source.query(&query).map_err(failed)?;
            if *json {
                let list: Vec<Value> = records.into_iter().map(Value::Object).collect();
                print_json(&serde_json::to_string_pretty(&list).map_err(Failure::internal)?);
            } else {
                for record in records {
                    print_json(&Value::Object(record).to_string());
                }
            }
            Ok(0)
        }
        AuditCommand::Tail { follow, lines } => {
            if !source.exists() && !follow {
                return Ok(0);
            }
            let (last, mut follower) = source.tail(*lines).map_err(failed)?;
            // Lines as the chain holds them: a tampered one may carry raw
            // control characters, shown escaped.
            for line in last {
                print_json(&line);
            }
            if !follow {
                return Ok(0);
            }
            loop {
                for line in follower.poll().map_err(failed)? {
                    print_json(&line);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        AuditCommand::Export { file } => {
            let written = match file {
                Some(path) => {
                    let mut out =
                        std::io::BufWriter::new(std::fs::File::create(path).map_err(|error| {
                            Failure::usage(anyhow!("cannot write {}: {error}", path.display()))
                        })?);
                    let count = source.export(&mut out).map_err(failed)?;
                    out.flush().map_err(|error| {
                        Failure::internal(anyhow!("writing {}: {error}", path.display()))
                    })?;
                    count
                }
                None => {
                    let stdout = std::io::stdout();
                    let mut out = std::io::BufWriter::new(stdout.lock());
                    let count = source.export(&mut out).map_err(failed)?;
                    out.flush().map_err(Failure::internal)?;
                    count
                }
            };
            if file.is_some() {
                eprintln!("airlock: exported {written} records");
            }
            Ok(0)
        }
    }
}
