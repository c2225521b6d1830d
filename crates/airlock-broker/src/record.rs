//! Building audit records (DESIGN §8): one object per event, redacted params.

use airlock_core::{Decision, ToolCall};
use airlock_store::Approval;
use serde_json::{Map, Value};

use airlock_audit::Durability;
use airlock_core::envelope::Envelope;

use crate::broker::Broker;
use crate::envelopes::audit_unwritable;

/// An audit record under construction. Absent values are left out.
#[derive(Debug, Clone, Default)]
pub struct Record {
    fields: Map<String, Value>,
}

impl Record {
    /// A record of `event` with nothing else.
    pub fn new(event: &str) -> Record {
        Record::default().text("event", event)
    }

    /// The fields every record about a call carries.
    pub fn for_call(call: &ToolCall, decision: &Decision) -> Record {
        Record::default()
            .text("tool", &call.tool)
            .value(
                "path",
                call.args.get("path").filter(|p| p.is_string()).cloned(),
            )
            .value("session", call.session.clone().map(Value::String))
            .value("user", call.principal.user.clone().map(Value::String))
            .value("agent", call.principal.agent.clone().map(Value::String))
            .value("tool_call_id", call.tool_call_id.clone().map(Value::String))
            .value("context_id", call.context_id.clone().map(Value::String))
            .value(
                "via",
                call.via
                    .as_ref()
                    .and_then(|via| serde_json::to_value(via).ok()),
            )
            .value(
                "profile",
                decision
                    .profile
                    .as_deref()
                    .map(|p| Value::String(p.to_owned())),
            )
            .text("risk", decision.risk.as_str())
            .value(
                "params",
                Some(airlock_core::redact::redact_params(&call.args)),
            )
    }

    /// The fields every record about an approval carries.
    pub fn for_approval(approval: &Approval) -> Record {
        let params = serde_json::from_str::<Value>(&approval.args_display).ok();
        Record::default()
            .text("tool", &approval.tool)
            .value("path", approval.path.clone().map(Value::String))
            .value("session", approval.session.clone().map(Value::String))
            .value("agent", approval.agent.clone().map(Value::String))
            .value(
                "tool_call_id",
                approval.tool_call_id.clone().map(Value::String),
            )
            .value("context_id", approval.context_id.clone().map(Value::String))
            .text("hitl_id", &approval.id)
            .text("risk", approval.risk.as_str())
            .value("params", params)
    }

    /// Sets the event type.
    pub fn event(self, event: &str) -> Record {
        self.text("event", event)
    }

    pub fn text(mut self, key: &str, value: &str) -> Record {
        self.fields
            .insert(key.to_owned(), Value::String(value.to_owned()));
        self
    }

    /// An integer (hashed exactly, however large: see `airlock_core::canonical`).
    pub fn number(mut self, key: &str, value: u64) -> Record {
        self.fields.insert(key.to_owned(), Value::from(value));
        self
    }

    pub fn flag(mut self, key: &str, value: bool) -> Record {
        self.fields.insert(key.to_owned(), Value::Bool(value));
        self
    }

    /// Sets `key` when `value` is `Some` and not null.
    pub fn value(mut self, key: &str, value: Option<Value>) -> Record {
        match value {
            Some(Value::Null) | None => {
                self.fields.remove(key);
            }
            Some(value) => {
                self.fields.insert(key.to_owned(), value);
            }
        }
        self
    }

    pub fn into_map(self) -> Map<String, Value> {
        self.fields
    }
}

impl Broker {
    /// Appends a record a face made (`airlock token`'s changes, say) to the
    /// audit log; `false` when it could not be written.
    pub fn note(&self, record: Record) -> bool {
        self.log(record).is_some()
    }

    /// Appends an audit record; a failure to audit is reported on stderr-free
    /// terms by returning `None` (callers turn that into an error envelope).
    pub(crate) fn log(&self, record: Record) -> Option<airlock_core::envelope::AuditRef> {
        self.log_with(record, Durability::Now)
    }

    /// Records of calls that needed no decision (reads, denials, upstream
    /// calls the policy allows) are written before the answer and synced
    /// within `SYNC_WITHIN`; records a change waits on (proposals,
    /// decisions, applies) are synced before it goes ahead.
    pub(crate) fn log_with(
        &self,
        record: Record,
        durability: Durability,
    ) -> Option<airlock_core::envelope::AuditRef> {
        self.append_record(record, durability).ok()
    }

    /// Appends `record` to the audit chain.
    pub(crate) fn append_record(
        &self,
        record: Record,
        durability: Durability,
    ) -> Result<airlock_core::envelope::AuditRef, airlock_audit::AuditError> {
        let mut record = record.into_map();
        crate::telemetry::stamp_record(&mut record);
        let observed = crate::metrics::Observed::of(&record);
        let started = std::time::Instant::now();
        let appended = self.audit.append_with(record, durability)?;
        crate::metrics::observe_append(started.elapsed().as_secs_f64());
        observed.count();
        self.after_append(appended.seq, durability);
        Ok(airlock_core::envelope::AuditRef {
            prev_hash: appended.prev_hash,
            event_hash: appended.event_hash,
        })
    }

    /// Audits `record` and stamps the envelope with it. If the audit log cannot
    /// be written, the result is an error: nothing goes unaudited.
    pub(crate) fn audited(&self, envelope: Envelope, record: Record) -> Envelope {
        self.audited_with(envelope, record, Durability::Now)
    }

    /// [`Broker::audited`] for a call that needed no decision (a read, a
    /// denial, an upstream call the policy allows): nothing waits on its
    /// record, which is written before the answer and synced soon after (see
    /// [`Broker::log_with`]).
    pub(crate) fn observed(&self, envelope: Envelope, record: Record) -> Envelope {
        self.audited_with(envelope, record, Durability::Soon)
    }

    pub(crate) fn audited_with(
        &self,
        mut envelope: Envelope,
        record: Record,
        durability: Durability,
    ) -> Envelope {
        match self.append_record(record, durability) {
            Ok(audit) => {
                envelope.audit = Some(audit);
                envelope
            }
            Err(error) => audit_unwritable(
                &envelope.op.method,
                &envelope.op.tool,
                envelope.op.path.as_deref(),
                &error,
            ),
        }
    }
}
