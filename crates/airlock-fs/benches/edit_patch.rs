//! apply_patch of a 1 MB file with 100 chunks (target <= 5 ms) and edit_file on
//! a 1 MB file (target <= 2 ms), DESIGN §12 / issue 4.
//!
//! Each figure is the whole plan as the broker makes it: resolve the path
//! through the sandbox, read the file, parse, locate and apply every chunk (or
//! the edit's match), and render the unified diff a human approves. The
//! apply that follows an approval adds the commit (hash check, atomic rename,
//! fsync), reported separately because it is mostly the disk's fsync.
//!
//! Run: `cargo bench -p airlock-fs --bench edit_patch`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use airlock_fs::{
    CommitOptions, EditParams, PatchParams, Sandbox, commit, prepare_edit, prepare_patch,
};

const LINES: usize = 16_500;

fn text() -> String {
    let text: String = (0..LINES)
        .map(|i| {
            format!(
                "    let value_{i:05} = compute({i}, &mut state) + offset_{};\n",
                i % 97
            )
        })
        .collect();
    assert!(text.len() >= 1_000_000, "{} bytes", text.len());
    text
}

/// 100 V4A chunks, evenly spread, each 3 lines of context, one line removed
/// and one added, then 3 lines of context.
fn patch(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut patch = String::from("*** Begin Patch\n*** Update File: src/big.rs\n");
    for chunk in 0..100 {
        let at = 50 + chunk * (LINES - 100) / 100;
        patch.push_str("@@\n");
        for line in &lines[at - 3..at] {
            patch.push_str(&format!(" {line}\n"));
        }
        patch.push_str(&format!("-{}\n", lines[at]));
        patch.push_str(&format!("+{} // changed\n", lines[at]));
        for line in &lines[at + 1..at + 4] {
            patch.push_str(&format!(" {line}\n"));
        }
    }
    patch.push_str("*** End Patch\n");
    patch
}

fn percentiles(label: &str, target_ms: Option<f64>, mut times: Vec<f64>) {
    times.sort_by(f64::total_cmp);
    let pct = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
    let target = target_ms.map_or_else(String::new, |t| format!("  (target <= {t} ms)"));
    println!(
        "{label:<44} p50 {:>7.3} ms  p99 {:>7.3} ms  n={}{target}",
        pct(0.5),
        pct(0.99),
        times.len()
    );
}

fn time(runs: usize, mut f: impl FnMut()) -> Vec<f64> {
    f();
    (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect()
}

fn main() {
    let benching = std::env::args().any(|arg| arg == "--bench");
    let runs = if benching { 200 } else { 3 };
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    let original = text();
    std::fs::write(root.join("src/big.rs"), &original).unwrap();
    let config = "file_broker:\n  max_write_bytes_hard: 8388608\n  max_read_bytes_hard: 8388608\n";
    let mut loaded = airlock_core::config::load(config, "airlock.yaml").unwrap();
    loaded
        .policy
        .bind_workspace(root.to_str().unwrap(), Some("airlock.yaml"));
    let sandbox =
        Sandbox::open(&root, &loaded.config.file_broker, Arc::new(loaded.policy)).unwrap();
    let journal = root.join(".airlock/journal");

    println!(
        "\n1 MB file: {} bytes, {LINES} lines; patch: 100 chunks, {} bytes",
        original.len(),
        patch(&original).len()
    );
    let params = PatchParams {
        patch: patch(&original),
        patch_format: Default::default(),
        dry_run: false,
    };
    let plan = prepare_patch(&sandbox, &params).unwrap();
    assert_eq!(plan.changes.len(), 1);
    assert_eq!(
        String::from_utf8(plan.changes[0].after.clone().unwrap())
            .unwrap()
            .matches(" // changed")
            .count(),
        100
    );
    percentiles(
        "apply_patch plan (parse+locate+apply+diff)",
        Some(5.0),
        time(runs, || {
            black_box(prepare_patch(&sandbox, &params).unwrap());
        }),
    );
    let pure_patch = airlock_core::patch::parse(&params.patch, Default::default()).unwrap();
    let airlock_core::patch::PatchOp::Update { chunks, .. } = &pure_patch.ops[0] else {
        panic!("not an update");
    };
    percentiles(
        "  of which locate+apply (airlock-core)",
        None,
        time(runs, || {
            black_box(airlock_core::patch::apply_chunks("src/big.rs", &original, chunks).unwrap());
        }),
    );
    let changes = plan.changes.clone();
    percentiles(
        "  of which the diff over the file",
        None,
        time(runs, || {
            black_box(airlock_fs::new_plan(
                "apply_patch",
                String::new(),
                changes.clone(),
                &[Some(original.as_bytes())],
                serde_json::Map::new(),
            ));
        }),
    );
    percentiles(
        "  of which sha256 of the file",
        None,
        time(runs, || {
            black_box(airlock_fs::sha256_hex(&original));
        }),
    );
    percentiles(
        "apply_patch commit (hash check, rename, fsync)",
        None,
        time(runs.min(50), || {
            std::fs::write(root.join("src/big.rs"), &original).unwrap();
            let options = CommitOptions {
                journal_dir: Some(&journal),
                ..CommitOptions::default()
            };
            commit(&sandbox, &plan, options).unwrap();
        }),
    );

    std::fs::write(root.join("src/big.rs"), &original).unwrap();
    let edit = EditParams {
        path: "src/big.rs".to_owned(),
        old_string: format!("let value_{:05} = compute({}", LINES - 10, LINES - 10),
        new_string: "let renamed = compute(0".to_owned(),
        replace_all: false,
    };
    let plan = prepare_edit(&sandbox, &edit).unwrap();
    assert_eq!(plan.report["replacements"], 1);
    percentiles(
        "edit_file plan (exact match near the end)",
        Some(2.0),
        time(runs, || {
            black_box(prepare_edit(&sandbox, &edit).unwrap());
        }),
    );
    let fuzzy = EditParams {
        old_string: format!("let   value_{:05}  =  compute({},", LINES - 10, LINES - 10),
        ..edit.clone()
    };
    let plan = prepare_edit(&sandbox, &fuzzy).unwrap();
    assert_eq!(plan.report["fuzzy"], true);
    percentiles(
        "edit_file plan (fuzzy match near the end)",
        Some(2.0),
        time(runs, || {
            black_box(prepare_edit(&sandbox, &fuzzy).unwrap());
        }),
    );
    percentiles(
        "  of which the match (airlock-core, exact)",
        None,
        time(runs, || {
            black_box(
                airlock_core::edit::apply_edit(
                    &original,
                    &edit.old_string,
                    &edit.new_string,
                    false,
                )
                .unwrap(),
            );
        }),
    );
}
