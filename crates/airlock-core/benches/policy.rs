//! Policy evaluation speed with 10, 1,000 and 10,000 rules of mixed tool globs and
//! conditions. Criterion measures the mean; afterwards each decision is timed on its
//! own and the p50 and p99 are printed, against the target p50 <= 2 us at 1,000
//! rules (DESIGN §12).
//!
//! Run: `cargo bench -p airlock-core --bench policy`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Instant;

use airlock_core::config::{self, Config, ProfileConfig};
use airlock_core::{Policy, ToolCall, policy};
use criterion::{BenchmarkId, Criterion};
use serde_json::json;

const SIZES: [usize; 3] = [10, 1_000, 10_000];

/// `count` rules cycling through five shapes: prefix globs with a regex condition,
/// literal names, suffix globs with an `in` condition, deny rules, and general globs
/// with a path-glob condition; the last rule catches every `write_file` under src/.
fn rules_yaml(count: usize) -> String {
    let mut out = String::from("security:\n  hitl:\n    rules:\n");
    for i in 0..count.saturating_sub(1) {
        let rule = match i % 5 {
            0 => format!(
                "      - {{tools: [\"svc{i}__*\"], conditions: [{{param: path, matches: \"/srv/{i}/\"}}], risk: high}}\n"
            ),
            1 => format!("      - {{tools: [tool_{i}, alias_{i}], risk: medium, timeout: 30}}\n"),
            2 => format!(
                "      - {{tools: [\"*_{i}\"], conditions: [{{param: mode, in: [a, b]}}], risk: low}}\n"
            ),
            3 => format!("      - {{tools: [\"svc{i}__delete_*\"], decision: deny}}\n"),
            _ => format!(
                "      - {{tools: [\"*__op{i}\"], conditions: [{{param: path, glob: \"src/**\"}}], require_approval: false}}\n"
            ),
        };
        out.push_str(&rule);
    }
    out.push_str("      - {tools: [write_file], conditions: [{param: path, matches: \"src/\"}], risk: medium}\n");
    out
}

fn policy_with(count: usize) -> Policy {
    let text = rules_yaml(count);
    let mut loaded = config::load(&text, "bench").unwrap();
    assert_eq!(loaded.config.security.hitl.rules.len(), count);
    let mut config: Config = loaded.config.clone();
    config.profiles.insert(
        "supervised".to_owned(),
        ProfileConfig {
            denylist: vec!["*__delete_*".to_owned()],
            asklist: vec![
                "write_file".to_owned(),
                "edit_file".to_owned(),
                "*__*".to_owned(),
            ],
            ..ProfileConfig::default()
        },
    );
    config.default_profile = Some("supervised".to_owned());
    config.upstreams = Vec::new();
    loaded.policy = Policy::compile(&config).unwrap();
    loaded.policy.bind_workspace("/work/repo", None);
    loaded.policy
}

/// A mix: a write matched by the last rule, a delete matched by a deny rule in the
/// middle, an unknown tool no rule names, and an allowed read.
fn calls(policy: &Policy, count: usize) -> Vec<(&'static str, ToolCall)> {
    let mid = (count / 2) / 5 * 5 + 3;
    let make = |tool: String, args| {
        let origin = policy.origin_of(&tool, None);
        ToolCall::new(tool, args, origin, 1_000)
    };
    vec![
        (
            "write_file",
            make(
                "write_file".into(),
                json!({"path": "src/main.rs", "content": "fn main() {}"}),
            ),
        ),
        (
            "deny_rule",
            make(format!("svc{mid}__delete_db"), json!({"path": "/srv/x"})),
        ),
        ("unknown", make("frobnicate".into(), json!({"mode": "c"}))),
        (
            "read_file",
            make("read_file".into(), json!({"path": "docs/guide.md"})),
        ),
    ]
}

fn bench(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("policy_evaluate");
    for size in SIZES {
        let policy = policy_with(size);
        let calls = calls(&policy, size);
        group.bench_with_input(BenchmarkId::new("mix", size), &size, |bencher, _| {
            let mut i = 0;
            bencher.iter(|| {
                let (_, call) = &calls[i % calls.len()];
                i += 1;
                black_box(policy::evaluate(&policy, black_box(call), &[]))
            });
        });
    }
    group.finish();
}

fn percentiles(samples_per_call: usize) {
    println!("\npolicy evaluate, one decision at a time (target: p50 <= 2 us at 1,000 rules)");
    println!(
        "{:>7}  {:<11} {:>9} {:>9}",
        "rules", "call", "p50 us", "p99 us"
    );
    for size in SIZES {
        let policy = policy_with(size);
        let calls = calls(&policy, size);
        let mut all = Vec::new();
        // The mix must take the paths it is meant to, or the figures mean nothing.
        let decided: Vec<&str> = calls
            .iter()
            .map(|(_, call)| policy::evaluate(&policy, call, &[]).disposition.as_str())
            .collect();
        assert_eq!(decided, ["ask", "deny", "ask", "allow"], "{size} rules");
        for (name, call) in &calls {
            // Warm the caches, then time each decision.
            for _ in 0..1_000 {
                black_box(policy::evaluate(&policy, call, &[]));
            }
            let mut times: Vec<f64> = (0..samples_per_call)
                .map(|_| {
                    let start = Instant::now();
                    black_box(policy::evaluate(&policy, black_box(call), &[]));
                    start.elapsed().as_secs_f64() * 1e6
                })
                .collect();
            times.sort_by(f64::total_cmp);
            println!(
                "{size:>7}  {name:<11} {:>9.3} {:>9.3}",
                pct(&times, 0.50),
                pct(&times, 0.99)
            );
            all.extend(times);
        }
        all.sort_by(f64::total_cmp);
        println!(
            "{size:>7}  {:<11} {:>9.3} {:>9.3}",
            "all",
            pct(&all, 0.50),
            pct(&all, 0.99)
        );
    }
}

fn pct(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q) as usize]
}

fn main() {
    let benching = std::env::args().any(|arg| arg == "--bench");
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
    // Under `cargo test --benches` this is a smoke run.
    percentiles(if benching { 50_000 } else { 100 });
}
