//! `airlock stats`: approval analytics (spec 002) over the audit chain.

use anyhow::anyhow;
use clap::Args;

use airlock_broker::{Broker, Figures, Stats, StatsBy};

use crate::{Failure, print, print_json};

#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    /// Only records from this time (2026-11-28T09:00:00Z) or this last
    /// while (30m, 24h, 7d) on.
    #[arg(long, value_name = "T")]
    since: Option<String>,
    /// Figures per tool, risk, approver or session.
    #[arg(long, value_name = "tool|risk|approver|session")]
    by: Option<String>,
    /// One JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(broker: &Broker, args: &StatsArgs) -> Result<u8, Failure> {
    let since = args
        .since
        .as_deref()
        .map(|text| airlock_broker::since_time(text, crate::now_ms()))
        .transpose()
        .map_err(|error| Failure::usage(anyhow!(error)))?;
    let by = args
        .by
        .as_deref()
        .map(str::parse::<StatsBy>)
        .transpose()
        .map_err(|error| Failure::usage(anyhow!("--by {error}")))?;
    let stats = broker
        .stats(since.as_deref(), by)
        .map_err(|error| Failure::internal(anyhow!("{error}")))?;
    if args.json {
        print_json(&serde_json::to_string_pretty(&stats).map_err(Failure::internal)?);
    } else {
        print(&describe(&stats));
    }
    Ok(0)
}

fn ms(value: Option<u64>) -> String {
    match value {
        None => "-".to_owned(),
        Some(ms) if ms < 10_000 => format!("{ms} ms"),
        Some(ms) if ms < 600_000 => format!("{:.1} s", ms as f64 / 1000.0),
        Some(ms) => format!("{:.1} min", ms as f64 / 60_000.0),
    }
}

fn summary(figures: &Figures) -> String {
    format!(
        "calls {} · allowed {} · denied by policy {} · asked {}\n\
         decisions: approved {} ({} edited) · denied {} · timed out {} · cancelled {} · undone {}\n\
         time to decision ({} decided): p50 {} · p90 {} · p99 {} · max {}",
        figures.calls,
        figures.allowed,
        figures.denied_by_policy,
        figures.asks,
        figures.approved,
        figures.edited,
        figures.denied,
        figures.timeouts,
        figures.cancelled,
        figures.undone,
        figures.decision_ms.count,
        ms(figures.decision_ms.p50),
        ms(figures.decision_ms.p90),
        ms(figures.decision_ms.p99),
        ms(figures.decision_ms.max),
    )
}

/// The human table (every key made safe by `print`; long ones cut).
fn describe(stats: &Stats) -> String {
    let mut text = match &stats.since {
        Some(since) => format!("since {since}\n"),
        None => "all records\n".to_owned(),
    };
    text.push_str(&summary(&stats.total));
    text.push_str(&format!("\ngrants in force: {}", stats.grants_in_force));
    if let Some(by) = stats.by {
        let name = serde_json::to_value(by)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        text.push_str(&format!(
            "\n\n{:<28} {:>6} {:>7} {:>6} {:>5} {:>8} {:>6} {:>8} {:>9} {:>9}",
            format!("by {name}"),
            "calls",
            "allowed",
            "policy",
            "asks",
            "approved",
            "denied",
            "timeouts",
            "p50",
            "p90"
        ));
        for group in &stats.groups {
            let key = group.key.as_deref().unwrap_or("(none)");
            let key: String = if key.chars().count() > 28 {
                key.chars().take(27).chain(['…']).collect()
            } else {
                key.to_owned()
            };
            let f = &group.figures;
            text.push_str(&format!(
                "\n{:<28} {:>6} {:>7} {:>6} {:>5} {:>8} {:>6} {:>8} {:>9} {:>9}",
                airlock_core::display::safe_line(&key),
                f.calls,
                f.allowed,
                f.denied_by_policy,
                f.asks,
                f.approved,
                f.denied,
                f.timeouts,
                ms(f.decision_ms.p50),
                ms(f.decision_ms.p90)
            ));
        }
    }
    text
}
