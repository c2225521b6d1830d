//! Approval analytics (spec 002, DESIGN §8.1): what happened to the calls
//! and approvals of a period, read from the audit chain itself (so they are
//! the same on every instance and cannot disagree with the record), grouped
//! by tool, risk, approver or session, with time-to-decision percentiles
//! and a timeline of decisions; and the grants in force now.
//!
//! How records count: a call is the first record of it (`read_file`,
//! `tool_call`, `hook`, or a `…_propose`, which is also an ask); `allowed`
//! and `denied_by_policy` are those calls' outcomes without a person;
//! `hitl_decision` is an approval (`edited` when the approver changed the
//! plan) or a denial, and its `duration_ms` a time to decision;
//! `hitl_timeout`, `hitl_cancelled` and `undo` count as themselves. Applies
//! and other follow-ups of a call are not counted again.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::broker::Broker;
use crate::error::BrokerError;

/// What to group figures by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StatsBy {
    Tool,
    Risk,
    /// The person who decided (decisions only).
    Approver,
    Session,
}

impl std::str::FromStr for StatsBy {
    type Err = String;

    fn from_str(text: &str) -> Result<StatsBy, String> {
        match text {
            "tool" => Ok(StatsBy::Tool),
            "risk" => Ok(StatsBy::Risk),
            "approver" => Ok(StatsBy::Approver),
            "session" => Ok(StatsBy::Session),
            other => Err(format!(
                "{other:?} is not one of tool, risk, approver, session"
            )),
        }
    }
}

/// Time to decision, in milliseconds (nearest-rank percentiles).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Percentiles {
    pub count: u64,
    pub p50: Option<u64>,
    pub p90: Option<u64>,
    pub p99: Option<u64>,
    pub max: Option<u64>,
}

impl Percentiles {
    fn of(mut samples: Vec<u64>) -> Percentiles {
        samples.sort_unstable();
        let rank = |p: u64| -> Option<u64> {
            let n = samples.len() as u64;
            if n == 0 {
                return None;
            }
            // The smallest sample with at least p% of them at or below it.
            let index = (p * n).div_ceil(100).max(1) - 1;
            samples.get(index as usize).copied()
        };
        Percentiles {
            count: samples.len() as u64,
            p50: rank(50),
            p90: rank(90),
            p99: rank(99),
            max: samples.last().copied(),
        }
    }
}

/// The figures of one group (or of everything).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Figures {
    pub calls: u64,
    pub allowed: u64,
    pub denied_by_policy: u64,
    pub asks: u64,
    pub approved: u64,
    pub edited: u64,
    pub denied: u64,
    pub timeouts: u64,
    pub cancelled: u64,
    pub undone: u64,
    pub decision_ms: Percentiles,
}

/// One group's key and figures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Group {
    /// `null` for records without one (a call in no session, say).
    pub key: Option<String>,
    #[serde(flatten)]
    pub figures: Figures,
}

/// Decisions in one period of the timeline.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Bucket {
    /// The period's start (RFC 3339).
    pub at: String,
    pub approved: u64,
    pub denied: u64,
    pub timeouts: u64,
}

/// What `airlock stats` and `GET /v1/stats` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Records at or after this time (RFC 3339), or all.
    pub since: Option<String>,
    pub by: Option<StatsBy>,
    pub total: Figures,
    /// By `by`, most calls (then decisions) first.
    pub groups: Vec<Group>,
    /// Always-allow grants in force now.
    pub grants_in_force: u64,
    /// `hour` or `day`.
    pub timeline_unit: &'static str,
    pub timeline: Vec<Bucket>,
}

/// What one record adds.
#[derive(Default)]
struct Tally {
    figures: Figures,
    samples: Vec<u64>,
}

impl Tally {
    fn add(&mut self, record: &AuditRecord) -> Option<DecisionKind> {
        let text = |key: &str| record.get(key).and_then(Value::as_str);
        let event = text("event")?;
        let figures = &mut self.figures;
        let outcome = |figures: &mut Figures| match text("status") {
            Some("allowed") => figures.allowed += 1,
            Some("denied") => figures.denied_by_policy += 1,
            _ => {}
        };
        match event {
            "read_file" | "tool_call" | "hook" => {
                figures.calls += 1;
                outcome(figures);
                None
            }
            event if event.ends_with("_propose") => {
                figures.calls += 1;
                figures.asks += 1;
                None
            }
            "hitl_decision" => {
                if let Some(ms) = record.get("duration_ms").and_then(Value::as_u64) {
                    self.samples.push(ms);
                }
                match text("decision") {
                    Some("approve") => {
                        figures.approved += 1;
                        if record.get("edited") == Some(&Value::Bool(true)) {
                            figures.edited += 1;
                        }
                        Some(DecisionKind::Approved)
                    }
                    Some("deny") => {
                        figures.denied += 1;
                        Some(DecisionKind::Denied)
                    }
                    _ => None,
                }
            }
            "hitl_timeout" => {
                figures.timeouts += 1;
                Some(DecisionKind::Timeout)
            }
            "hitl_cancelled" => {
                figures.cancelled += 1;
                None
            }
            "undo" => {
                figures.undone += 1;
                None
            }
            _ => None,
        }
    }

    fn finish(mut self) -> Figures {
        self.figures.decision_ms = Percentiles::of(std::mem::take(&mut self.samples));
        self.figures
    }
}

#[derive(Clone, Copy)]
enum DecisionKind {
    Approved,
    Denied,
    Timeout,
}

/// An audit record.
type AuditRecord = Map<String, Value>;

/// Something that gives every record to the visitor it is passed.
type Records<'a> = &'a mut dyn FnMut(&mut dyn FnMut(&AuditRecord)) -> Result<(), BrokerError>;

/// What [`tally`] found.
struct Tallied {
    total: Figures,
    groups: Vec<Group>,
    unit: &'static str,
    timeline: Vec<Bucket>,
}

/// Figures of the records `records` gives, from `since` on.
fn tally(
    records: Records<'_>,
    since: Option<&str>,
    by: Option<StatsBy>,
) -> Result<Tallied, BrokerError> {
    let mut total = Tally::default();
    let mut groups: BTreeMap<Option<String>, Tally> = BTreeMap::new();
    // (ts, kind) of every decision, bucketed once the span is known.
    let mut decisions: Vec<(String, DecisionKind)> = Vec::new();
    records(&mut |record| {
        let Some(ts) = record.get("ts").and_then(Value::as_str) else {
            return;
        };
        if since.is_some_and(|since| ts < since) {
            return;
        }
        if let Some(kind) = total.add(record) {
            decisions.push((ts.to_owned(), kind));
        }
        if let Some(by) = by {
            let text = |key: &str| record.get(key).and_then(Value::as_str).map(str::to_owned);
            let is_decision = matches!(
                record.get("event").and_then(Value::as_str),
                Some("hitl_decision" | "hitl_timeout")
            );
            let key = match by {
                StatsBy::Tool => text("tool"),
                StatsBy::Risk => text("risk"),
                StatsBy::Session => text("session"),
                // Only decisions have an approver; a timeout's is "timeout".
                StatsBy::Approver if is_decision => match text("decided_by").as_deref() {
                    Some("timeout") => Some("(timeout)".to_owned()),
                    _ => text("user"),
                },
                StatsBy::Approver => return,
            };
            // Records about nothing a group is about (config_loaded) stay
            // out of the groups.
            if key.is_none() && record.get("tool").is_none() {
                return;
            }
            groups.entry(key).or_default().add(record);
        }
    })?;
    let span_hours = match (decisions.first(), decisions.last()) {
        (Some((first, _)), Some((last, _))) => hours_between(first, last),
        _ => 0,
    };
    let (unit, cut) = if span_hours <= 48 {
        ("hour", 13)
    } else {
        ("day", 10)
    };
    let mut timeline: BTreeMap<String, Bucket> = BTreeMap::new();
    for (ts, kind) in decisions {
        // A record's `ts` is the log's own; one a tampered log holds may
        // be anything (and is bucketed as written).
        let prefix = ts.get(..cut).unwrap_or(ts.as_str());
        let at = match unit {
            "hour" => format!("{prefix}:00:00Z"),
            _ => format!("{prefix}T00:00:00Z"),
        };
        let bucket = timeline.entry(at.clone()).or_insert_with(|| Bucket {
            at,
            ..Bucket::default()
        });
        match kind {
            DecisionKind::Approved => bucket.approved += 1,
            DecisionKind::Denied => bucket.denied += 1,
            DecisionKind::Timeout => bucket.timeouts += 1,
        }
    }
    let mut groups: Vec<Group> = groups
        .into_iter()
        .map(|(key, tally)| Group {
            key,
            figures: tally.finish(),
        })
        .collect();
    groups.sort_by(|a, b| {
        let weight = |g: &Group| {
            (
                g.figures.calls,
                g.figures.approved + g.figures.denied + g.figures.timeouts,
            )
        };
        weight(b).cmp(&weight(a)).then_with(|| a.key.cmp(&b.key))
    });
    Ok(Tallied {
        total: total.finish(),
        groups,
        unit,
        timeline: timeline.into_values().collect(),
    })
}

/// Whole hours from one RFC 3339 time to a later one (by their date and
/// hour fields; enough to choose the timeline's unit).
fn hours_between(first: &str, last: &str) -> u64 {
    let hours = |ts: &str| -> Option<i64> {
        let year: i64 = ts.get(0..4)?.parse().ok()?;
        let month: i64 = ts.get(5..7)?.parse().ok()?;
        let day: i64 = ts.get(8..10)?.parse().ok()?;
        let hour: i64 = ts.get(11..13)?.parse().ok()?;
        // Days from the civil date (proleptic Gregorian).
        let (y, m) = if month <= 2 {
            (year - 1, month + 9)
        } else {
            (year, month - 3)
        };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let doy = (153 * m + 2) / 5 + day - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        Some((era * 146_097 + doe) * 24 + hour)
    };
    match (hours(first), hours(last)) {
        (Some(a), Some(b)) if b >= a => (b - a) as u64,
        _ => 0,
    }
}

/// `--since`: an RFC 3339 time, or a span back from `now_ms` (`30m`, `24h`,
/// `7d`).
pub fn since_time(text: &str, now_ms: u64) -> Result<String, String> {
    let text = text.trim();
    if let Some(seconds) = airlock_core::config::parse_duration_seconds(text) {
        return Ok(airlock_audit::rfc3339_millis(
            now_ms.saturating_sub(seconds.saturating_mul(1000)),
        ));
    }
    let valid = text.len() >= 20
        && text.as_bytes().get(4) == Some(&b'-')
        && text.as_bytes().get(7) == Some(&b'-')
        && text.as_bytes().get(10) == Some(&b'T')
        && text.ends_with('Z')
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || b"-:.TZ".contains(&b));
    if valid {
        // As the log writes times (milliseconds), so they compare as text.
        let (seconds, fraction) = text.trim_end_matches('Z').split_at(19);
        let digits: String = fraction
            .trim_start_matches('.')
            .chars()
            .chain(std::iter::repeat('0'))
            .take(3)
            .collect();
        Ok(format!("{seconds}.{digits}Z"))
    } else {
        Err(format!(
            "--since {text:?}: give a UTC time (2026-11-28T09:00:00Z) or a span back from now (30m, 24h, 7d)"
        ))
    }
}

impl Broker {
    /// The analytics of the records from `since` (RFC 3339) on.
    pub fn stats(&self, since: Option<&str>, by: Option<StatsBy>) -> Result<Stats, BrokerError> {
        let source = self.audit_source();
        let Tallied {
            total,
            groups,
            unit: timeline_unit,
            timeline,
        } = tally(
            &mut |each| {
                source.each_record(&mut |record| {
                    each(record);
                    Ok(())
                })
            },
            since,
            by,
        )?;
        let grants_in_force = self.store.grants(self.now_ms())?.len() as u64;
        Ok(Stats {
            since: since.map(str::to_owned),
            by,
            total,
            groups,
            grants_in_force,
            timeline_unit,
            timeline,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let p = Percentiles::of((1..=10).collect());
        assert_eq!(
            (p.p50, p.p90, p.p99, p.max),
            (Some(5), Some(9), Some(10), Some(10))
        );
        assert_eq!(Percentiles::of(vec![]).p50, None);
        assert_eq!(Percentiles::of(vec![7]).p99, Some(7));
    }

    #[test]
    fn spans_and_since() {
        assert_eq!(
            hours_between("2026-11-27T23:10:00Z", "2026-11-28T01:00:00Z"),
            2
        );
        assert_eq!(
            hours_between("2024-02-28T00:00:00Z", "2024-03-01T00:00:00Z"),
            48
        );
        assert_eq!(
            since_time("1h", 3_600_000 + 500).unwrap(),
            "1970-01-01T00:00:00.500Z"
        );
        assert!(since_time("yesterday", 0).is_err());
        assert_eq!(
            since_time("2026-11-28T09:00:00Z", 0).unwrap(),
            "2026-11-28T09:00:00.000Z"
        );
        assert_eq!(
            since_time("2026-11-28T09:00:00.5Z", 0).unwrap(),
            "2026-11-28T09:00:00.500Z"
        );
    }
}
