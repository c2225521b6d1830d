//! Process metrics in the Prometheus text exposition format (0.0.4), for
//! `/metrics` (DESIGN §8.1, §10): calls by tool, decision and risk;
//! approvals pending; time to decision; apply failures; upstream call and
//! audit append latency; checkpoints signed.
//!
//! One registry per process (a configuration reload keeps the counts). The
//! figures are recorded where the events happen — every call's first audit
//! record, every decision, every apply, every upstream call, every append —
//! so no face has its own count. Label values come from agents and
//! upstreams (tool names): each family keeps at most [`MAX_SERIES`] label
//! sets, and further ones are counted under `other`, so a caller cannot
//! grow the registry without bound.
//!
//! The text format is written here rather than with a client library:
//! the maintained Rust client (prometheus-client) writes OpenMetrics only,
//! and the format needed is a few lines of escaping.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock, PoisonError};

use serde_json::{Map, Value};

/// Label sets per family beyond which values are counted as `other`.
pub const MAX_SERIES: usize = 500;
/// Characters of a label value kept.
const MAX_LABEL_CHARS: usize = 128;

/// Bucket bounds (seconds) of a human's time to decision.
const DECISION_BUCKETS: &[f64] = &[
    1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];
/// Bucket bounds (seconds) of machine latencies (upstream calls, appends).
const LATENCY_BUCKETS: &[f64] = &[
    0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0,
];

type Labels = Vec<(&'static str, String)>;

#[derive(Default)]
struct Histogram {
    /// Count per bucket (not cumulative), then the sum and the count.
    buckets: Vec<u64>,
    sum: f64,
    count: u64,
}

struct Family<T> {
    series: BTreeMap<Labels, T>,
}

impl<T: Default> Family<T> {
    fn new() -> Family<T> {
        Family {
            series: BTreeMap::new(),
        }
    }

    /// The series of `labels`, or of every label `other` when the family is
    /// full.
    fn get(&mut self, mut labels: Labels) -> &mut T {
        // Values come from agents: a long one is cut (it still counts).
        for (_, value) in &mut labels {
            if value.chars().count() > MAX_LABEL_CHARS {
                *value = value.chars().take(MAX_LABEL_CHARS).chain(['…']).collect();
            }
        }
        if !self.series.contains_key(&labels) && self.series.len() >= MAX_SERIES {
            let other: Labels = labels
                .iter()
                .map(|(name, _)| (*name, "other".to_owned()))
                .collect();
            return self.series.entry(other).or_default();
        }
        self.series.entry(labels).or_default()
    }
}

struct Registry {
    calls: Family<u64>,
    decisions: Family<Histogram>,
    apply_failures: Family<u64>,
    upstream: Family<Histogram>,
    append: Histogram,
    checkpoints: u64,
}

fn registry() -> &'static Mutex<Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        Mutex::new(Registry {
            calls: Family::new(),
            decisions: Family::new(),
            apply_failures: Family::new(),
            upstream: Family::new(),
            append: Histogram::default(),
            checkpoints: 0,
        })
    })
}

fn with<T>(work: impl FnOnce(&mut Registry) -> T) -> T {
    let mut registry = registry().lock().unwrap_or_else(PoisonError::into_inner);
    work(&mut registry)
}

impl Histogram {
    fn observe(&mut self, bounds: &[f64], value: f64) {
        if self.buckets.len() != bounds.len() {
            self.buckets = vec![0; bounds.len()];
        }
        if let Some(at) = bounds.iter().position(|bound| value <= *bound) {
            self.buckets[at] += 1;
        }
        self.sum += value;
        self.count += 1;
    }
}

/// What an audit record says happened, taken from it before it is
/// appended (cheaply: a few strings, only for records that count) and
/// counted once it is.
pub(crate) enum Observed {
    Call {
        tool: String,
        decision: &'static str,
        risk: String,
    },
    Decision {
        risk: String,
        outcome: &'static str,
        seconds: f64,
    },
    ApplyFailed {
        tool: String,
    },
    Nothing,
}

impl Observed {
    pub(crate) fn of(record: &Map<String, Value>) -> Observed {
        let text = |key: &str| record.get(key).and_then(Value::as_str).unwrap_or("");
        let event = text("event");
        match event {
            "read_file" | "tool_call" | "hook" => Observed::Call {
                tool: text("tool").to_owned(),
                decision: match text("status") {
                    "allowed" => "allow",
                    "denied" => "deny",
                    _ => "error",
                },
                risk: text("risk").to_owned(),
            },
            event if event.ends_with("_propose") => Observed::Call {
                tool: text("tool").to_owned(),
                decision: "ask",
                risk: text("risk").to_owned(),
            },
            "hitl_decision" | "hitl_timeout" => Observed::Decision {
                risk: text("risk").to_owned(),
                outcome: match (event, text("decision")) {
                    ("hitl_timeout", _) => "timeout",
                    (_, "approve") => "approve",
                    (_, "deny") => "deny",
                    _ => "other",
                },
                seconds: record
                    .get("duration_ms")
                    .and_then(Value::as_u64)
                    .map_or(0.0, |ms| ms as f64 / 1000.0),
            },
            event if event.ends_with("_apply") && text("status") != "allowed" => {
                Observed::ApplyFailed {
                    tool: text("tool").to_owned(),
                }
            }
            _ => Observed::Nothing,
        }
    }

    /// Counts it (the record is in the log).
    pub(crate) fn count(self) {
        if matches!(self, Observed::Nothing) {
            return;
        }
        with(|registry| match self {
            Observed::Call {
                tool,
                decision,
                risk,
            } => {
                *registry.calls.get(vec![
                    ("tool", tool),
                    ("decision", decision.to_owned()),
                    ("risk", risk),
                ]) += 1;
            }
            Observed::Decision {
                risk,
                outcome,
                seconds,
            } => registry
                .decisions
                .get(vec![("risk", risk), ("outcome", outcome.to_owned())])
                .observe(DECISION_BUCKETS, seconds),
            Observed::ApplyFailed { tool } => {
                *registry.apply_failures.get(vec![("tool", tool)]) += 1;
            }
            Observed::Nothing => {}
        });
    }
}

/// One upstream call's latency.
pub(crate) fn observe_upstream(upstream: &str, seconds: f64) {
    with(|registry| {
        registry
            .upstream
            .get(vec![("upstream", upstream.to_owned())])
            .observe(LATENCY_BUCKETS, seconds);
    });
}

/// One audit append's latency (until it was as durable as asked).
pub(crate) fn observe_append(seconds: f64) {
    with(|registry| registry.append.observe(LATENCY_BUCKETS, seconds));
}

/// A checkpoint signed by this process.
pub(crate) fn observe_checkpoint() {
    with(|registry| registry.checkpoints += 1);
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn labels_text(labels: &Labels, extra: Option<(&str, &str)>) -> String {
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(name, value)| format!("{name}=\"{}\"", escape(value)))
        .collect();
    if let Some((name, value)) = extra {
        parts.push(format!("{name}=\"{value}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

fn number(value: f64) -> String {
    if value.is_finite() && value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

fn histogram(out: &mut String, name: &str, bounds: &[f64], labels: &Labels, h: &Histogram) {
    let mut cumulative = 0u64;
    for (at, bound) in bounds.iter().enumerate() {
        cumulative += h.buckets.get(at).copied().unwrap_or(0);
        let le = number(*bound);
        let _ = writeln!(
            out,
            "{name}_bucket{} {cumulative}",
            labels_text(labels, Some(("le", &le)))
        );
    }
    let _ = writeln!(
        out,
        "{name}_bucket{} {}",
        labels_text(labels, Some(("le", "+Inf"))),
        h.count
    );
    let _ = writeln!(
        out,
        "{name}_sum{} {}",
        labels_text(labels, None),
        number(h.sum)
    );
    let _ = writeln!(out, "{name}_count{} {}", labels_text(labels, None), h.count);
}

/// What a scrape reads that is not counted as it happens.
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    pub approvals_pending: u64,
    pub audit_records: u64,
    pub grants_in_force: u64,
}

/// The exposition: `# HELP`, `# TYPE` and the samples of every family.
pub fn render(gauges: &Gauges) -> String {
    let mut out = String::with_capacity(4096);
    let _ = writeln!(
        out,
        "# HELP airlock_build_info The airlock build serving these metrics.\n# TYPE airlock_build_info gauge\nairlock_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    for (name, help, value) in [
        (
            "airlock_approvals_pending",
            "Approvals waiting for a decision now.",
            gauges.approvals_pending,
        ),
        (
            "airlock_audit_records",
            "Records in the audit chain now.",
            gauges.audit_records,
        ),
        (
            "airlock_grants_in_force",
            "Always-allow grants in force now.",
            gauges.grants_in_force,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    }
    with(|registry| {
        let _ = writeln!(
            out,
            "# HELP airlock_calls_total Calls by tool, decision (allow, ask, deny, error) and risk.\n# TYPE airlock_calls_total counter"
        );
        for (labels, count) in &registry.calls.series {
            let _ = writeln!(
                out,
                "airlock_calls_total{} {count}",
                labels_text(labels, None)
            );
        }
        let _ = writeln!(
            out,
            "# HELP airlock_decision_seconds Time from an ask to its decision (approve, deny, timeout), by risk.\n# TYPE airlock_decision_seconds histogram"
        );
        for (labels, h) in &registry.decisions.series {
            histogram(
                &mut out,
                "airlock_decision_seconds",
                DECISION_BUCKETS,
                labels,
                h,
            );
        }
        let _ = writeln!(
            out,
            "# HELP airlock_apply_failures_total Approved changes that failed or went stale when applied.\n# TYPE airlock_apply_failures_total counter"
        );
        for (labels, count) in &registry.apply_failures.series {
            let _ = writeln!(
                out,
                "airlock_apply_failures_total{} {count}",
                labels_text(labels, None)
            );
        }
        let _ = writeln!(
            out,
            "# HELP airlock_upstream_seconds Latency of calls forwarded to upstream MCP servers.\n# TYPE airlock_upstream_seconds histogram"
        );
        for (labels, h) in &registry.upstream.series {
            histogram(
                &mut out,
                "airlock_upstream_seconds",
                LATENCY_BUCKETS,
                labels,
                h,
            );
        }
        let _ = writeln!(
            out,
            "# HELP airlock_audit_append_seconds Latency of an audit append until it is as durable as asked.\n# TYPE airlock_audit_append_seconds histogram"
        );
        histogram(
            &mut out,
            "airlock_audit_append_seconds",
            LATENCY_BUCKETS,
            &Vec::new(),
            &registry.append,
        );
        let _ = writeln!(
            out,
            "# HELP airlock_checkpoints_total Audit checkpoints this process signed.\n# TYPE airlock_checkpoints_total counter\nairlock_checkpoints_total {}",
            registry.checkpoints
        );
    });
    out
}

impl crate::Broker {
    /// The metrics text, with the gauges read from the store now.
    pub fn metrics_text(&self) -> Result<String, crate::BrokerError> {
        let gauges = Gauges {
            approvals_pending: self.store.pending_count(self.now_ms())?,
            audit_records: self.audit_records()?,
            grants_in_force: self.store.grants(self.now_ms())?.len() as u64,
        };
        Ok(render(&gauges))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped_and_families_are_bounded() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        let mut family: Family<u64> = Family::new();
        for n in 0..MAX_SERIES + 10 {
            *family.get(vec![("tool", format!("t{n}"))]) += 1;
        }
        assert_eq!(family.series.len(), MAX_SERIES + 1);
        assert_eq!(family.series[&vec![("tool", "other".to_owned())]], 10);
    }
}
