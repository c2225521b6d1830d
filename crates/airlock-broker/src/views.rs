//! What the approval channels show: an approval as JSON, and the audit log's
//! verification, read without writing anything (so checking cannot repair
//! what it should report).

use std::path::Path;

use airlock_audit::Query;
use airlock_core::config::Config;
use airlock_store::{Approval, Store};

use crate::error::BrokerError;
use serde_json::{Value, json};

/// An approval as the CLI (`show --json`, `pending --json`) and the HTTP API
/// show it: the redacted parameters, never the exact ones.
pub fn approval_view(approval: &Approval) -> Value {
    let parse = |text: &str| serde_json::from_str::<Value>(text).unwrap_or(Value::Null);
    let decided = approval.decision.as_ref();
    json!({
        "id": approval.id,
        "status": approval.status.as_str(),
        // Applied, then put back by `airlock undo`.
        "undone": approval.undone,
        "tool": approval.tool,
        "path": approval.path,
        "risk": approval.risk.as_str(),
        "summary": approval.summary,
        "user": approval.user,
        "agent": approval.agent,
        "session": approval.session,
        "context_id": approval.context_id,
        "requester": approval.requester,
        "params": parse(&approval.args_display),
        "created_ms": approval.created_ms,
        "expires_ms": approval.expires_ms,
        "decision": serde_json::to_value(&approval.terms).unwrap_or(Value::Null),
        "diff": approval.diff,
        "editable": editable_content(approval, |content| std::str::from_utf8(content).is_ok())
            == Some(true),
        "decided_by": decided.map(|decided| decided.by.as_str()),
        "decided_user": decided.and_then(|decided| decided.user.as_deref()),
        "channel": decided.and_then(|decided| decided.channel).map(|channel| channel.as_str()),
        "reason": decided.and_then(|decided| decided.reason.as_deref()),
        "result": approval.result,
    })
}

/// The new content a pending approval proposes, when an approver may edit
/// it before approving: a write of one file (not a removal, a move or an
/// upstream call) whose content is UTF-8.
pub fn proposed_content(approval: &Approval) -> Option<String> {
    editable_content(approval, |content| String::from_utf8(content.to_vec()).ok()).flatten()
}

/// `look` at the content of an editable approval's one write.
fn editable_content<T>(approval: &Approval, look: impl FnOnce(&[u8]) -> T) -> Option<T> {
    if let airlock_core::plan::Plan::Agent(agent) = &approval.plan
        && !agent.editable()
    {
        return None;
    }
    let change = approval.plan.change()?.editable_change().ok()?;
    change.after.as_deref().map(look)
}

/// The outcome of verifying a workspace's audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditCheck {
    /// No log yet.
    pub missing: bool,
    pub records: u64,
    pub last_seq: u64,
    /// `seq N: <event>` for each repair the log records (a torn line moved
    /// aside, a cut-off tail): the chain verifies again, but records were lost.
    pub repairs: Vec<String>,
    /// The first bad record: its seq, line, byte offset and what is wrong.
    pub problem: Option<(u64, u64, u64, String)>,
}

impl AuditCheck {
    pub fn ok(&self) -> bool {
        self.problem.is_none() && self.repairs.is_empty()
    }

    pub fn to_json(&self) -> Value {
        let mut value = json!({
            "ok": self.ok(),
            "records": self.records,
            "last_seq": self.last_seq,
        });
        if !self.repairs.is_empty() {
            value["repairs"] = json!(self.repairs);
        }
        if let Some((seq, line, offset, problem)) = &self.problem {
            value["first_bad_seq"] = json!(seq);
            value["line"] = json!(line);
            value["offset"] = json!(offset);
            value["problem"] = json!(problem);
        }
        value
    }
}

/// Verifies the audit chain of the workspace at `root` with `config` (its
/// key from the environment): the file against the head kept in the store
/// (`store`, or the SQLite file of the state dir), or, with a shared store,
/// the database's chain against its head row. Writes nothing.
pub fn check_audit(
    root: &Path,
    config: &Config,
    store: Option<&Store>,
) -> Result<AuditCheck, BrokerError> {
    let database = root.join(&config.workspace.state_dir).join("airlock.db");
    if store.is_none() {
        crate::broker::refuse_unopened_shared_store(config)?;
    }
    let source = crate::AuditSource::of(root, config, store);
    let key = config
        .audit
        .hmac_key_env
        .as_deref()
        .and_then(|name| std::env::var(name).ok())
        .filter(|key| !key.is_empty());
    let (stored, report) = source.verify(key.as_deref().map(str::as_bytes), &database, store)?;
    let Some(report) = report else {
        // No log is fine only when none was ever written: the head kept in
        // the store says whether records existed.
        return Ok(AuditCheck {
            missing: stored.is_none(),
            records: 0,
            last_seq: 0,
            repairs: Vec::new(),
            problem: stored.map(|head| {
                (
                    1,
                    1,
                    0,
                    format!("log missing; head says {} records", head.seq),
                )
            }),
        });
    };
    let mut repairs = Vec::new();
    for event in [
        airlock_audit::TORN_LINE_EVENT,
        airlock_audit::TRUNCATED_TAIL_EVENT,
    ] {
        let query = Query {
            event_type: Some(event.to_owned()),
            ..Query::default()
        };
        for record in source.query(&query)? {
            let seq = record.get("seq").and_then(Value::as_u64).unwrap_or(0);
            repairs.push(format!("seq {seq}: {event}"));
        }
    }
    Ok(AuditCheck {
        missing: false,
        records: report.records,
        last_seq: report.head.as_ref().map_or(0, |head| head.seq),
        repairs,
        problem: report.problem.map(|problem| {
            (
                problem.seq,
                problem.line,
                problem.offset,
                problem.kind.to_string(),
            )
        }),
    })
}

/// A query of the audit log (re-exported for the channels).
pub type AuditQuery = Query;

/// The records of the broker's audit chain that match `query`, oldest
/// first.
pub fn query_audit(
    broker: &crate::Broker,
    query: &Query,
) -> Result<Vec<serde_json::Map<String, Value>>, BrokerError> {
    broker.audit_source().query(query)
}

/// A grant as the CLI (`airlock grants --json`) and the API (`GET /hitl/grants`)
/// show it.
pub fn grant_view(grant: &airlock_store::GrantRow) -> Value {
    serde_json::json!({
        "id": grant.id,
        "tool": grant.tool,
        "path_glob": grant.path_glob,
        "scope": if grant.session.is_some() { "session" } else { "persistent" },
        "session": grant.session,
        "user": grant.user,
        "created_ms": grant.created_ms,
        "created_by": grant.created_by,
        "expires_ms": grant.expires_ms,
        "approval_id": grant.approval_id,
    })
}
