//! Table-driven exec decisions: every `*.case` file under
//! `tests/exec-decisions/` is one command with its expected decision and
//! the decision on each of its parts, under that directory's `airlock.yaml`.
//!
//! A case file:
//!
//! ```text
//! $ git status && rm -rf /
//! deny
//!   allow git status
//!   deny rm -rf /
//! ```
//!
//! The first line is the command (`\n` in it is a newline), the second the
//! decision, then one line per part in order: its decision and the command
//! decided (wrappers removed), or `!` and the reason it cannot be judged.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use airlock_core::config::ExecDecision;
use airlock_core::exec::{Because, ExecPolicy, Verdict};

fn name(decision: ExecDecision) -> &'static str {
    match decision {
        ExecDecision::Allow => "allow",
        ExecDecision::Ask => "ask",
        ExecDecision::Deny => "deny",
    }
}

/// A verdict in the case format (without the command line).
fn render(verdict: &Verdict) -> String {
    let mut out = format!("{}\n", name(verdict.decision));
    for segment in &verdict.segments {
        let what = match (&segment.command, &segment.because) {
            (_, Because::Hazard { hazard }) => format!("! {hazard}"),
            (Some(command), _) => command.clone(),
            (None, because) => format!("! {because}"),
        };
        out.push_str(&format!("  {} {what}\n", name(segment.decision)));
    }
    out
}

#[test]
fn every_case_gets_its_decision_part_by_part() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/exec-decisions");
    let config = std::fs::read_to_string(dir.join("airlock.yaml")).unwrap();
    let loaded = airlock_core::config::load(&config, "airlock.yaml").unwrap();
    let policy = ExecPolicy::compile(&loaded.config.exec);
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "case"))
        .collect();
    cases.sort();
    assert!(cases.len() >= 150, "only {} cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let text = std::fs::read_to_string(case).unwrap();
        let (first, expected) = text.split_once('\n').unwrap();
        let command = first
            .strip_prefix("$ ")
            .unwrap_or_else(|| panic!("{}: no `$ ` line", case.display()))
            .replace("\\n", "\n");
        let verdict = policy.decide_command(&command);
        let actual = render(&verdict);
        if actual.trim_end() != expected.trim_end() {
            failures.push(format!(
                "{}\n$ {first}\nexpected:\n{expected}\nactual:\n{actual}",
                case.display()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

mod properties {
    use airlock_core::config::{ExecConfig, ExecDecision, ExecRuleConfig, ExecToken};
    use airlock_core::exec::ExecPolicy;
    use proptest::prelude::*;

    fn policy() -> ExecPolicy {
        ExecPolicy::compile(&ExecConfig {
            rules: vec![ExecRuleConfig {
                prefix: vec![ExecToken::Word("shutdown".to_owned())],
                decision: ExecDecision::Deny,
                risk: None,
                network: false,
                matches: Vec::new(),
                not_match: Vec::new(),
            }],
            ..ExecConfig::default()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Any text is decided without a panic, and a denied command
        /// anywhere in a list denies the whole line.
        #[test]
        fn any_text_is_decided_and_a_denied_part_denies(text in "[ -~\n]{0,80}") {
            let policy = policy();
            let _ = policy.decide_command(&text);
            for line in [format!("shutdown now; {text}"), format!("shutdown now && {text}")] {
                prop_assert_eq!(policy.decide_command(&line).decision, ExecDecision::Deny, "{}", line);
            }
        }

        /// Shell punctuation around an allowed command never makes a line
        /// that runs something else allowed without naming it.
        #[test]
        fn allowed_lines_name_only_allowed_commands(
            words in proptest::collection::vec("[a-z$;|&()`'\"<>*{},.~-]{1,6}", 1..6)
        ) {
            let line = format!("ls {}", words.join(" "));
            let verdict = policy().decide_command(&line);
            if verdict.decision == ExecDecision::Allow {
                for segment in &verdict.segments {
                    prop_assert_eq!(segment.decision, ExecDecision::Allow);
                    prop_assert!(segment.command.is_some(), "{}", line);
                }
            }
        }
    }
}
