//! `airlock audit verify | query | tail | export`: reading the audit chain,
//! from the JSONL file or, with a shared store (`store.url`), from the
//! database. These commands never write to the chain, so verifying cannot
//! repair what it should report.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use airlock_audit::Query;
use airlock_broker::AuditSource;
use anyhow::anyhow;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use clap::Subcommand;
use serde_json::{Value, json};

use crate::workspace::Workspace;
use crate::{Failure, print, print_json};

#[derive(Debug, Subcommand)]
pub(crate) enum AuditCommand {
    /// Walk the hash chain; exit 0 when intact, 6 naming the first bad seq.
    /// With --checkpoint and --key, check offline against a signed
    /// checkpoint: a log (--log, or this workspace's), a record's proof
    /// (--proof), or that a newer checkpoint extends it (--consistency).
    Verify {
        /// One JSON object instead of a sentence.
        #[arg(long)]
        json: bool,
        /// A signed checkpoint note kept from before (`airlock audit checkpoint`).
        #[arg(long, value_name = "FILE", requires = "key")]
        checkpoint: Option<PathBuf>,
        /// The log's verifier key (`airlock audit key`), or a file holding it.
        #[arg(long, value_name = "PUB", requires = "checkpoint")]
        key: Option<String>,
        /// An exported log (`airlock audit export`) to check instead of this
        /// workspace's.
        #[arg(long, value_name = "FILE", conflicts_with_all = ["proof", "consistency"])]
        log: Option<PathBuf>,
        /// A record's inclusion proof (`airlock audit prove`).
        #[arg(
            long,
            value_name = "FILE",
            requires = "checkpoint",
            conflicts_with = "consistency"
        )]
        proof: Option<PathBuf>,
        /// The record's line, when the proof does not carry it.
        #[arg(long, value_name = "FILE", requires = "proof")]
        record: Option<PathBuf>,
        /// A consistency proof (`airlock audit consistency`) from the
        /// --checkpoint to a newer one.
        #[arg(long, value_name = "FILE", requires = "checkpoint")]
        consistency: Option<PathBuf>,
    },
    /// The verifier key of this instance's checkpoints
    /// (`<name>+<hex id>+<base64 key>`), for `audit verify --key`.
    Key,
    /// The latest signed checkpoint (a C2SP signed note).
    Checkpoint {
        /// Sign one over every record now.
        #[arg(long)]
        new: bool,
        /// The checkpoint of this many records instead of the latest.
        #[arg(long, value_name = "N", conflicts_with_all = ["new", "list"])]
        size: Option<u64>,
        /// Every checkpoint: size, key, when.
        #[arg(long, conflicts_with = "new")]
        list: bool,
        /// JSON instead of the note.
        #[arg(long)]
        json: bool,
    },
    /// The inclusion proof of a record (its seq) against the latest
    /// checkpoint, as a C2SP tlog-proof carrying the record's line.
    Prove {
        #[arg(value_name = "RECORD")]
        seq: u64,
        #[arg(long)]
        json: bool,
    },
    /// The proof that the checkpoint of NEW records extends the tree of OLD
    /// records (each a size, or a checkpoint note's file).
    Consistency {
        #[arg(value_name = "OLD")]
        old: String,
        #[arg(value_name = "NEW")]
        new: String,
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
        AuditCommand::Verify {
            json,
            checkpoint: Some(checkpoint),
            key: Some(key),
            log,
            proof,
            record,
            consistency,
        } => {
            let check = Offline {
                checkpoint,
                key,
                log: log.as_deref(),
                proof: proof.as_deref(),
                record: record.as_deref(),
                consistency: consistency.as_deref(),
            };
            verify_offline(workspace, &source, &check, *json)
        }
        AuditCommand::Key => {
            let broker = workspace_broker(workspace)?;
            let verifier = broker.checkpoints().verifier().map_err(failed)?;
            print(&verifier.to_string());
            Ok(0)
        }
        AuditCommand::Checkpoint {
            new,
            size,
            list,
            json,
        } => checkpoint(workspace, *new, *size, *list, *json),
        AuditCommand::Prove { seq, json } => {
            let broker = workspace_broker(workspace)?;
            let proof = broker
                .checkpoints()
                .prove(*seq)
                .map_err(|error| Failure::usage(anyhow!("{error}")))?;
            if *json {
                let value = json!({
                    "seq": proof.seq,
                    "index": proof.seq - 1,
                    "tree_size": proof.checkpoint.size,
                    "record": proof.line,
                    "leaf_hash": BASE64.encode(airlock_audit::merkle::leaf_hash(proof.line.as_bytes())),
                    "inclusion_path": proof.path.iter().map(|hash| BASE64.encode(hash)).collect::<Vec<_>>(),
                    "checkpoint": proof.checkpoint.note,
                    "proof": proof.text,
                });
                print_json(&serde_json::to_string_pretty(&value).map_err(Failure::internal)?);
            } else {
                print_raw(&proof.text);
            }
            Ok(0)
        }
        AuditCommand::Consistency { old, new, json } => {
            let broker = workspace_broker(workspace)?;
            let (old, new) = (tree_size(old)?, tree_size(new)?);
            let text = broker
                .checkpoints()
                .consistency(old, new)
                .map_err(|error| Failure::usage(anyhow!("{error}")))?;
            if *json {
                let parsed = airlock_audit::ConsistencyProof::parse(&text)
                    .map_err(|error| Failure::internal(anyhow!("{error}")))?;
                let value = json!({
                    "old": parsed.old,
                    "old_root": BASE64.encode(parsed.old_root),
                    "new": new,
                    "consistency_path": parsed.path.iter().map(|hash| BASE64.encode(hash)).collect::<Vec<_>>(),
                    "checkpoint": parsed.note,
                    "proof": text,
                });
                print_json(&serde_json::to_string_pretty(&value).map_err(Failure::internal)?);
            } else {
                print_raw(&text);
            }
            Ok(0)
        }
        AuditCommand::Verify { json, .. } => {
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

/// The broker of the workspace (checkpoint commands sign and index).
fn workspace_broker(workspace: &Workspace) -> Result<airlock_broker::Broker, Failure> {
    let again = Workspace::load(
        &crate::GlobalArgs {
            workspace: Some(workspace.base.clone()),
            config: Some(workspace.config_path.clone()),
        },
        crate::workspace::Need::Existing,
    )?;
    again.broker()
}

/// A tree size given as a number, or as a checkpoint note's file.
fn tree_size(text: &str) -> Result<u64, Failure> {
    if let Ok(size) = text.parse::<u64>() {
        return Ok(size);
    }
    let note = std::fs::read_to_string(text).map_err(|error| {
        Failure::usage(anyhow!(
            "{text} is neither a tree size nor a readable checkpoint: {error}"
        ))
    })?;
    let parsed = airlock_audit::note::Note::parse(&note)
        .and_then(|note| airlock_audit::note::Checkpoint::parse(&note.text))
        .map_err(|error| Failure::usage(anyhow!("{text}: {error}")))?;
    Ok(parsed.size)
}

/// Prints text that is ours or a note (no control characters but newlines)
/// as it is: a proof or a note must keep its bytes to verify.
fn print_raw(text: &str) {
    let safe = airlock_core::display::safe_text(text);
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(safe.as_bytes());
}

fn checkpoint(
    workspace: &Workspace,
    new: bool,
    size: Option<u64>,
    list: bool,
    json: bool,
) -> Result<u8, Failure> {
    let broker = workspace_broker(workspace)?;
    let checkpoints = broker.checkpoints();
    let failed = |error: airlock_broker::BrokerError| Failure::internal(anyhow!("{error}"));
    if list {
        let all = broker.checkpoint_list().map_err(failed)?;
        if json {
            let rows: Vec<Value> = all.iter().map(row_json).collect();
            print_json(&serde_json::to_string_pretty(&rows).map_err(Failure::internal)?);
        } else if all.is_empty() {
            print("no checkpoint yet (airlock audit checkpoint --new makes one)");
        } else {
            for row in &all {
                print(&format!(
                    "{:>10} records  {}  {}  {}",
                    row.size,
                    row.root,
                    row.key_id,
                    airlock_audit::rfc3339_millis(row.created_ms)
                ));
            }
        }
        return Ok(0);
    }
    if new {
        broker.checkpoint_now().map_err(|error| match error {
            airlock_broker::BrokerError::Audit(airlock_audit::AuditError::CheckpointConflict {
                ..
            }) => Failure::with_code(6, error.to_string()),
            error => failed(error),
        })?;
    }
    let row = match size {
        Some(size) => checkpoints.of_size(size).map_err(failed)?.ok_or_else(|| {
            Failure::usage(anyhow!(
                "no checkpoint of {size} records (airlock audit checkpoint --list shows them)"
            ))
        })?,
        None => checkpoints.latest().map_err(failed)?.ok_or_else(|| {
            Failure::usage(anyhow!(
                "no checkpoint yet: the log is empty, or airlock audit checkpoint --new makes one"
            ))
        })?,
    };
    if json {
        print_json(&serde_json::to_string_pretty(&row_json(&row)).map_err(Failure::internal)?);
    } else {
        print_raw(&row.note);
    }
    Ok(0)
}

fn row_json(row: &airlock_store::CheckpointRow) -> Value {
    json!({
        "size": row.size,
        "root": row.root,
        "key": row.key_id,
        "created": airlock_audit::rfc3339_millis(row.created_ms),
        "note": row.note,
    })
}

/// What `audit verify --checkpoint` checks.
struct Offline<'a> {
    checkpoint: &'a Path,
    key: &'a str,
    log: Option<&'a Path>,
    proof: Option<&'a Path>,
    record: Option<&'a Path>,
    consistency: Option<&'a Path>,
}

fn read_text(path: &Path) -> Result<String, Failure> {
    let bytes = std::fs::read(path)
        .map_err(|error| Failure::usage(anyhow!("cannot read {}: {error}", path.display())))?;
    if bytes.len() > airlock_audit::note::MAX_NOTE_BYTES {
        return Err(Failure::usage(anyhow!(
            "{} is larger than 1 MiB",
            path.display()
        )));
    }
    String::from_utf8(bytes)
        .map_err(|_| Failure::usage(anyhow!("{} is not UTF-8 text", path.display())))
}

/// Checks against a signed checkpoint with only the public key: exit 0
/// when it holds, 6 when it does not, 2 when the inputs cannot be read.
fn verify_offline(
    workspace: &Workspace,
    source: &AuditSource<'_>,
    check: &Offline<'_>,
    json: bool,
) -> Result<u8, Failure> {
    use airlock_audit::note::Verifier;
    let key_text = if Path::new(check.key).is_file() {
        read_text(Path::new(check.key))?
    } else {
        check.key.to_owned()
    };
    let verifier: Verifier = key_text
        .trim()
        .parse()
        .map_err(|error| Failure::usage(anyhow!("--key: {error}")))?;
    let trusted = read_text(check.checkpoint)?;
    let outcome: Result<(String, Value), airlock_audit::CheckError> = if let Some(proof) =
        check.proof
    {
        let proof = airlock_audit::InclusionProof::parse(&read_text(proof)?)
            .map_err(|error| Failure::usage(anyhow!("--proof: {error}")))?;
        let record = match check.record {
            Some(path) => Some(std::fs::read(path).map_err(|error| {
                Failure::usage(anyhow!("cannot read {}: {error}", path.display()))
            })?),
            None => None,
        };
        proof
            .check(record.as_deref(), Some(&trusted), &verifier)
            .map(|checkpoint| {
                (
                    format!(
                        "ok: record {} is in {} as of its checkpoint of {} records",
                        proof.index + 1,
                        checkpoint.origin,
                        checkpoint.size
                    ),
                    json!({"ok": true, "seq": proof.index + 1, "origin": checkpoint.origin, "size": checkpoint.size}),
                )
            })
    } else if let Some(consistency) = check.consistency {
        let proof = airlock_audit::ConsistencyProof::parse(&read_text(consistency)?)
            .map_err(|error| Failure::usage(anyhow!("--consistency: {error}")))?;
        proof.check(&trusted, &verifier).map(|new| {
            (
                format!(
                    "ok: the checkpoint of {} records of {} extends the one of {}",
                    new.size, new.origin, proof.old
                ),
                json!({"ok": true, "origin": new.origin, "old": proof.old, "new": new.size}),
            )
        })
    } else {
        // The log: the file given, or this workspace's chain (a database
        // chain checked as its export).
        let mut export = None;
        let path = match (check.log, source) {
            (Some(path), _) => path.to_path_buf(),
            (None, AuditSource::File(path)) => path.clone(),
            (None, AuditSource::Store(_)) => {
                let mut file = tempfile::NamedTempFile::new().map_err(Failure::internal)?;
                {
                    let mut writer = std::io::BufWriter::new(file.as_file_mut());
                    source
                        .export(&mut writer)
                        .map_err(|error| Failure::internal(anyhow!("{error}")))?;
                    writer.flush().map_err(Failure::internal)?;
                }
                let path = file.path().to_path_buf();
                export = Some(file);
                path
            }
        };
        let hmac_key = workspace
            .loaded
            .config
            .audit
            .hmac_key_env
            .as_deref()
            .and_then(|name| std::env::var(name).ok())
            .filter(|key| !key.is_empty());
        let checked = airlock_audit::check_log(
            &mut airlock_audit::FileLeaves { path: path.clone() },
            &trusted,
            &verifier,
        );
        // The hash chain too: a record changed after the checkpoint, or a
        // bad line, is named by seq.
        // A keyed chain is linked only for whoever holds its HMAC key; the
        // checkpoint covers its bytes either way.
        let report =
            airlock_audit::verify(&path, hmac_key.as_deref().map(str::as_bytes), None).ok();
        let keyed_unchecked = report.as_ref().is_some_and(|report| {
            report
                .problem
                .as_ref()
                .is_some_and(|problem| problem.kind == airlock_audit::ProblemKind::KeyRequired)
        });
        let chain = report
            .and_then(|report| report.problem)
            .filter(|problem| problem.kind != airlock_audit::ProblemKind::KeyRequired)
            .map(|problem| problem.to_string());
        drop(export);
        checked.map(|(checkpoint, after)| {
            let text = match &chain {
                None if keyed_unchecked => format!(
                    "ok: the log's first {} records match the checkpoint of {}; {after} records after it, whose links were not checked (the chain is keyed: set its HMAC key to check them)",
                    checkpoint.size, checkpoint.origin
                ),
                None => format!(
                    "ok: the log's first {} records match the checkpoint of {}; {after} records after it",
                    checkpoint.size, checkpoint.origin
                ),
                Some(problem) => format!(
                    "the log's first {} records match the checkpoint of {}, but the chain is broken: {problem}",
                    checkpoint.size, checkpoint.origin
                ),
            };
            (
                text,
                json!({"ok": chain.is_none(), "origin": checkpoint.origin, "size": checkpoint.size, "records_after": after, "chain_problem": chain}),
            )
        })
    };
    match outcome {
        Ok((text, value)) => {
            let ok = value["ok"] == true;
            if json {
                print_json(&value.to_string());
            } else {
                print(&text);
            }
            Ok(if ok { 0 } else { 6 })
        }
        Err(error) => {
            if json {
                print_json(&json!({"ok": false, "problem": error.to_string()}).to_string());
            } else {
                print(&format!("broken: {error}"));
            }
            Ok(6)
        }
    }
}
