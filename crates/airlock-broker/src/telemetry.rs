//! OpenTelemetry traces and logs of calls (DESIGN §8.1), for export over
//! OTLP (`telemetry.otlp.endpoint`; off by default).
//!
//! A call is a trace: the root span `airlock.call` (submit to answer) with
//! children `policy`, `propose` (until the approval is stored), `decide`
//! (the call waiting for a person), `apply` and `upstream` (a forwarded
//! call). A call that asks gets the approval id `hitl-<trace id as a
//! UUID>`, so any process that decides or applies it later (an approver's
//! `airlock approve`, another instance) puts its spans in the same trace
//! under the same root, with nothing more stored. Every audit record of a
//! call carries its `trace_id`; each record this process appends is also a
//! log record of that trace.
//!
//! Spans and log records wait in a bounded queue of this process until an
//! exporter (the CLI's `otlp`) takes them; with no endpoint configured
//! nothing is recorded at all.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

/// Spans and log records kept for the exporter at most; older ones are
/// dropped (and counted) when it falls behind.
const QUEUE: usize = 20_000;

static ENABLED: AtomicBool = AtomicBool::new(false);
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Turns recording on or off for this process (the configuration in force
/// names an endpoint or not).
pub fn enable(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// A trace id (16 bytes) and a span id (8 bytes).
pub type TraceId = [u8; 16];
pub type SpanId = [u8; 8];

/// One finished span.
#[derive(Debug, Clone)]
pub struct Span {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub parent: Option<SpanId>,
    pub name: &'static str,
    pub start_ns: u64,
    pub end_ns: u64,
    pub attributes: Vec<(&'static str, String)>,
    pub error: bool,
}

/// One audit record as a log record.
#[derive(Debug, Clone)]
pub struct LogItem {
    pub time_ns: u64,
    pub trace: Option<(TraceId, SpanId)>,
    pub body: String,
    pub event: String,
    pub warning: bool,
}

#[derive(Default)]
struct Queue {
    spans: std::collections::VecDeque<Span>,
    logs: std::collections::VecDeque<LogItem>,
}

/// Bytes of a record kept as a log record's body (the record itself is in
/// the audit log whole).
const MAX_BODY: usize = 16 * 1024;

fn queue() -> &'static Mutex<Queue> {
    static QUEUE_CELL: OnceLock<Mutex<Queue>> = OnceLock::new();
    QUEUE_CELL.get_or_init(Mutex::default)
}

fn push<T>(list: &mut std::collections::VecDeque<T>, item: T) {
    if list.len() >= QUEUE {
        list.pop_front();
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
    list.push_back(item);
}

/// What waits for the exporter, taken.
pub fn drain() -> (Vec<Span>, Vec<LogItem>) {
    let mut queue = queue().lock().unwrap_or_else(PoisonError::into_inner);
    (
        std::mem::take(&mut queue.spans).into(),
        std::mem::take(&mut queue.logs).into(),
    )
}

/// How many spans and log records were dropped because the exporter fell
/// behind.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos() as u64)
}

fn random_span_id() -> SpanId {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    let mut id = [0u8; 8];
    id.copy_from_slice(&bytes[..8]);
    id
}

/// The root span's id of a trace: its last 8 bytes (random in a v4 UUID).
pub fn root_span_of(trace_id: &TraceId) -> SpanId {
    let mut id = [0u8; 8];
    id.copy_from_slice(&trace_id[8..]);
    id
}

/// The trace of an approval, from its id (`hitl-<uuid>`).
pub fn trace_of_approval(id: &str) -> Option<TraceId> {
    let uuid = id.strip_prefix("hitl-")?;
    uuid::Uuid::parse_str(uuid)
        .ok()
        .map(|uuid| uuid.into_bytes())
}

/// A span's attributes.
pub type Attributes = Vec<(&'static str, String)>;

/// An open span: its id, name, start (0 for a placeholder: the root of a
/// call another process holds, or a child span open by [`child`]) and
/// attributes.
type OpenSpan = (SpanId, &'static str, u64, Attributes);

/// The trace this thread is working for, and its open spans.
struct Current {
    trace_id: TraceId,
    /// Whether an approval already took the trace id as its own.
    approval_made: bool,
    /// Open spans, innermost last: (id, name, start, attributes).
    open: Vec<OpenSpan>,
}

thread_local! {
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
}

/// The trace id of the call this thread is working for.
pub fn current_trace() -> Option<TraceId> {
    CURRENT.with(|current| current.borrow().as_ref().map(|c| c.trace_id))
}

/// The id for the approval a call makes: its trace id, the first time
/// (an approval's trace is then found from its id anywhere).
pub fn approval_trace() -> Option<TraceId> {
    CURRENT.with(|current| {
        let mut current = current.borrow_mut();
        let current = current.as_mut()?;
        if current.approval_made {
            return None;
        }
        current.approval_made = true;
        Some(current.trace_id)
    })
}

/// The innermost open span of this thread's trace.
fn current_span() -> Option<(TraceId, SpanId)> {
    CURRENT.with(|current| {
        current
            .borrow()
            .as_ref()
            .and_then(|c| c.open.last().map(|(id, ..)| (c.trace_id, *id)))
    })
}

/// A call's trace, open while the value lives: the root span ends (and is
/// queued) when it is dropped.
pub struct CallTrace {
    active: bool,
    previous: Option<Current>,
}

impl CallTrace {
    /// Starts the root span of a new trace on this thread (nothing when
    /// recording is off). `trace_id` is kept for an approval's id.
    pub fn start() -> CallTrace {
        if !enabled() {
            return CallTrace {
                active: false,
                previous: None,
            };
        }
        let trace_id = uuid::Uuid::new_v4().into_bytes();
        Self::resume(trace_id, "airlock.call", true)
    }

    /// [`CallTrace::start`] for a call that began at `started`.
    pub fn start_at(started: SystemTime) -> CallTrace {
        let trace = CallTrace::start();
        if trace.active {
            let start_ns = started
                .duration_since(UNIX_EPOCH)
                .map_or(0, |elapsed| elapsed.as_nanos() as u64);
            CURRENT.with(|current| {
                if let Some(current) = current.borrow_mut().as_mut()
                    && let Some(root) = current.open.first_mut()
                {
                    root.2 = start_ns.max(1);
                }
            });
        }
        trace
    }

    /// Opens a span of an existing trace (an approval decided or applied
    /// here): under the call's root span, or as the root when `root`.
    pub fn resume(trace_id: TraceId, name: &'static str, root: bool) -> CallTrace {
        if !enabled() {
            return CallTrace {
                active: false,
                previous: None,
            };
        }
        let span_id = if root {
            root_span_of(&trace_id)
        } else {
            random_span_id()
        };
        let mut open = Vec::new();
        if !root {
            // The root is another process's: only its id is known.
            open.push((root_span_of(&trace_id), "", 0, Vec::new()));
        }
        open.push((span_id, name, now_ns(), Vec::new()));
        let previous = CURRENT.with(|current| {
            current.replace(Some(Current {
                trace_id,
                approval_made: !root,
                open,
            }))
        });
        CallTrace {
            active: true,
            previous,
        }
    }

    /// Sets an attribute of the outermost span this value opened.
    pub fn attribute(&self, key: &'static str, value: impl Into<String>) {
        if !self.active {
            return;
        }
        let value = value.into();
        CURRENT.with(|current| {
            // The span this value opened is the first real one (a root
            // held by another process is only a placeholder).
            if let Some(current) = current.borrow_mut().as_mut()
                && let Some(span) = current
                    .open
                    .iter_mut()
                    .find(|(_, name, start, _)| *start != 0 && !name.is_empty())
            {
                span.3.push((key, value));
            }
        });
    }
}

impl Drop for CallTrace {
    fn drop(&mut self) {
        if !self.active {
            return;
        }
        let previous = self.previous.take();
        let finished = CURRENT.with(|current| current.replace(previous));
        let Some(finished) = finished else {
            return;
        };
        let end = now_ns();
        let trace_id = finished.trace_id;
        let mut queue = queue().lock().unwrap_or_else(PoisonError::into_inner);
        // Spans still open end with the call; the placeholder of a root
        // held elsewhere is no span of this process.
        let mut parent: Option<SpanId> = None;
        for (span_id, name, start, attributes) in finished.open {
            if start != 0 && !name.is_empty() {
                let error = attributes
                    .iter()
                    .any(|(key, value)| *key == "airlock.status" && value == "error");
                push(
                    &mut queue.spans,
                    Span {
                        trace_id,
                        span_id,
                        parent,
                        name,
                        start_ns: start,
                        end_ns: end,
                        attributes,
                        error,
                    },
                );
            }
            parent = Some(span_id);
        }
    }
}

/// A child span of this thread's current span, ended when the value is
/// dropped (nothing when no trace is current).
pub struct ChildSpan {
    open: Option<(TraceId, SpanId, SpanId, &'static str, u64)>,
    attributes: Vec<(&'static str, String)>,
}

/// Opens a child span named `name` under this thread's innermost span.
pub fn child(name: &'static str) -> ChildSpan {
    let open = current_span().map(|(trace_id, parent)| {
        let span_id = random_span_id();
        CURRENT.with(|current| {
            if let Some(current) = current.borrow_mut().as_mut() {
                // Held open so that spans started inside nest under it.
                current.open.push((span_id, "", 0, Vec::new()));
            }
        });
        (trace_id, span_id, parent, name, now_ns())
    });
    ChildSpan {
        open,
        attributes: Vec::new(),
    }
}

/// A finished child span of this thread's current span that started at
/// `start` (a `SystemTime`), for work timed before it was known to be one.
pub fn child_since(
    name: &'static str,
    started: SystemTime,
    attributes: Vec<(&'static str, String)>,
) {
    if let Some((trace_id, parent)) = current_span() {
        let start_ns = started
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos() as u64);
        let mut queue = queue().lock().unwrap_or_else(PoisonError::into_inner);
        push(
            &mut queue.spans,
            Span {
                trace_id,
                span_id: random_span_id(),
                parent: Some(parent),
                name,
                start_ns,
                end_ns: now_ns(),
                attributes,
                error: false,
            },
        );
    }
}

impl ChildSpan {
    pub fn attribute(&mut self, key: &'static str, value: impl Into<String>) {
        if self.open.is_some() {
            self.attributes.push((key, value.into()));
        }
    }
}

impl Drop for ChildSpan {
    fn drop(&mut self) {
        let Some((trace_id, span_id, parent, name, start_ns)) = self.open.take() else {
            return;
        };
        CURRENT.with(|current| {
            if let Some(current) = current.borrow_mut().as_mut()
                && let Some(at) = current.open.iter().rposition(|(id, ..)| *id == span_id)
            {
                current.open.truncate(at);
            }
        });
        let error = self
            .attributes
            .iter()
            .any(|(key, value)| *key == "airlock.status" && value == "error");
        let mut queue = queue().lock().unwrap_or_else(PoisonError::into_inner);
        push(
            &mut queue.spans,
            Span {
                trace_id,
                span_id,
                parent: Some(parent),
                name,
                start_ns,
                end_ns: now_ns(),
                attributes: std::mem::take(&mut self.attributes),
                error,
            },
        );
    }
}

/// The trace an audit record belongs to: the thread's call, or the
/// approval it is about. Sets its `trace_id` (hex) and queues it as a log
/// record (when recording is on).
pub(crate) fn stamp_record(record: &mut Map<String, Value>) {
    if !enabled() {
        return;
    }
    let trace = current_span().or_else(|| {
        record
            .get("hitl_id")
            .and_then(Value::as_str)
            .and_then(trace_of_approval)
            .map(|trace_id| (trace_id, root_span_of(&trace_id)))
    });
    if let Some((trace_id, _)) = trace {
        record.insert("trace_id".into(), hex::encode(trace_id).into());
    }
    let event = record
        .get("event")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let warning = matches!(
        event.as_str(),
        "audit_torn_line" | "audit_truncated_tail" | "audit_checkpoint_refused" | "config_rejected"
    ) || record.get("status").and_then(Value::as_str) == Some("error");
    let item = LogItem {
        time_ns: now_ns(),
        trace,
        body: {
            let mut body = Value::Object(record.clone()).to_string();
            if body.len() > MAX_BODY {
                let mut cut = MAX_BODY;
                while !body.is_char_boundary(cut) {
                    cut -= 1;
                }
                body.truncate(cut);
                body.push('\u{2026}');
            }
            body
        },
        event,
        warning,
    };
    let mut queue = queue().lock().unwrap_or_else(PoisonError::into_inner);
    push(&mut queue.logs, item);
}

fn attribute_json(key: &str, value: &str) -> Value {
    json!({"key": key, "value": {"stringValue": value}})
}

fn resource(host: &str) -> Value {
    json!({"attributes": [
        attribute_json("service.name", "airlock"),
        attribute_json("service.version", env!("CARGO_PKG_VERSION")),
        attribute_json("host.name", host),
        {"key": "process.pid", "value": {"intValue": std::process::id().to_string()}},
    ]})
}

fn scope() -> Value {
    json!({"name": "airlock", "version": env!("CARGO_PKG_VERSION")})
}

/// OTLP/HTTP JSON of spans (`ExportTraceServiceRequest`, POSTed to
/// `/v1/traces`).
pub fn traces_json(spans: &[Span], host: &str) -> String {
    let spans: Vec<Value> = spans
        .iter()
        .map(|span| {
            let mut object = json!({
                "traceId": hex::encode(span.trace_id),
                "spanId": hex::encode(span.span_id),
                "name": span.name,
                // SERVER for the call, INTERNAL for its steps, CLIENT for an
                // upstream call.
                "kind": match (span.parent, span.name) {
                    (None, _) => 2,
                    (_, "upstream") => 3,
                    _ => 1,
                },
                "startTimeUnixNano": span.start_ns.to_string(),
                "endTimeUnixNano": span.end_ns.max(span.start_ns).to_string(),
                "attributes": span.attributes.iter().map(|(k, v)| attribute_json(k, v)).collect::<Vec<_>>(),
                "status": {"code": if span.error { 2 } else { 1 }},
            });
            if let Some(parent) = span.parent {
                object["parentSpanId"] = hex::encode(parent).into();
            }
            object
        })
        .collect();
    json!({"resourceSpans": [{"resource": resource(host), "scopeSpans": [{"scope": scope(), "spans": spans}]}]})
        .to_string()
}

/// OTLP/HTTP JSON of log records (`ExportLogsServiceRequest`, POSTed to
/// `/v1/logs`).
pub fn logs_json(logs: &[LogItem], host: &str) -> String {
    let records: Vec<Value> = logs
        .iter()
        .map(|log| {
            let mut object = json!({
                "timeUnixNano": log.time_ns.to_string(),
                "observedTimeUnixNano": log.time_ns.to_string(),
                "severityNumber": if log.warning { 13 } else { 9 },
                "severityText": if log.warning { "WARN" } else { "INFO" },
                "body": {"stringValue": log.body},
                "attributes": [attribute_json("airlock.event", &log.event)],
            });
            if let Some((trace_id, span_id)) = log.trace {
                object["traceId"] = hex::encode(trace_id).into();
                object["spanId"] = hex::encode(span_id).into();
            }
            object
        })
        .collect();
    json!({"resourceLogs": [{"resource": resource(host), "scopeLogs": [{"scope": scope(), "logRecords": records}]}]})
        .to_string()
}
