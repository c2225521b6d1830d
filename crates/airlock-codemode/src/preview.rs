//! The static preview as a run shows it: each call site of the script's
//! text (from `airlock-script`) checked against the tools this run may
//! call, their schemas and the policy in force, as JSON for the audit log
//! and the envelope and as text for the human. Never the gate: every call
//! the script really makes is checked when it is made.

use std::collections::BTreeMap;

use airlock_broker::ListedTool;
use airlock_core::display::safe_line;
use airlock_core::tools::BuiltinTool;
use airlock_core::{Disposition, ToolOrigin};
use airlock_script::{Preview, Reach};
use serde_json::{Value, json};

/// The most call sites the text form lists.
const SHOWN: usize = 40;

/// What the run's preview says of one call site.
struct Checked {
    /// `allow`, `ask` or `deny`, where the arguments are all literal.
    policy: Option<&'static str>,
    /// Why the call will fail, when the text shows it.
    flag: Option<String>,
    /// A file write, staged and shown in the run's one diff.
    staged: bool,
}

/// What a run needs to check its preview.
pub(crate) struct Checker<'a> {
    pub broker: &'a airlock_broker::Broker,
    pub profile: Option<&'a str>,
    pub narrowed_to: Option<&'a str>,
    pub tools: &'a BTreeMap<String, ListedTool>,
    pub discovery: &'a [String],
    /// The call a literal call site would be, for the policy to decide.
    pub call_of: &'a dyn Fn(&str, Value) -> airlock_core::ToolCall,
}

/// A preview checked against the run's tools and policy.
pub(crate) struct RunPreview {
    pub json: Value,
    pub text: String,
}

pub(crate) fn check(preview: &Preview, language: &str, checker: &Checker<'_>) -> RunPreview {
    let checked: Vec<Checked> = preview
        .calls
        .iter()
        .map(|site| check_site(site, checker))
        .collect();
    let calls: Vec<Value> = preview
        .calls
        .iter()
        .zip(&checked)
        .map(|(site, checked)| {
            let mut value = serde_json::to_value(site).unwrap_or(Value::Null);
            if let Some(policy) = checked.policy {
                value["policy"] = json!(policy);
            }
            if let Some(flag) = &checked.flag {
                value["flag"] = json!(flag);
            }
            if checked.staged {
                value["staged"] = json!(true);
            }
            value
        })
        .collect();
    let mut json = json!({
        "language": language,
        "complete": preview.complete,
        "calls": calls,
        "gaps": preview.gaps,
    });
    if preview.more_calls > 0 {
        json["more_calls"] = json!(preview.more_calls);
    }
    RunPreview {
        json,
        text: text(preview, &checked),
    }
}

fn check_site(site: &airlock_script::CallSite, checker: &Checker<'_>) -> Checked {
    let mut checked = Checked {
        policy: None,
        flag: None,
        staged: false,
    };
    if checker.discovery.iter().any(|name| name == &site.tool) {
        checked.policy = Some("allow");
        return checked;
    }
    let Some(listed) = checker.tools.get(&site.tool) else {
        let offered = checker
            .broker
            .policy()
            .lists_tool(checker.profile, &site.tool)
            && checker.narrowed_to.is_none_or(|narrowed| {
                checker
                    .broker
                    .policy()
                    .lists_tool(Some(narrowed), &site.tool)
            });
        checked.flag = Some(if offered {
            "no such tool".to_owned()
        } else {
            "denied: the profile does not offer this tool".to_owned()
        });
        checked.policy = (!offered).then_some("deny");
        return checked;
    };
    checked.staged = matches!(
        checker.broker.script_tool_origin(&site.tool),
        ToolOrigin::Builtin(
            BuiltinTool::WriteFile
                | BuiltinTool::EditFile
                | BuiltinTool::ApplyPatch
                | BuiltinTool::DeleteFile
                | BuiltinTool::MoveFile
        )
    );
    if let Some(args) = &site.args {
        if let Err((at, message)) = crate::schema::check(&listed.input_schema, args) {
            checked.flag = Some(format!("invalid arguments: {at}: {message}"));
            return checked;
        }
        let decision = checker
            .broker
            .decide_only(&(checker.call_of)(&site.tool, args.clone()));
        checked.policy = Some(match decision.disposition {
            Disposition::Allow => "allow",
            Disposition::Ask => "ask",
            Disposition::Deny => "deny",
        });
        if decision.disposition == Disposition::Deny {
            checked.flag = Some("denied by policy".to_owned());
        }
    } else if let Some(known) = &site.known {
        // Only what the text shows: the rest may still be supplied.
        let mut schema = listed.input_schema.clone();
        if let Some(object) = schema.as_object_mut() {
            object.remove("required");
        }
        if let Err((at, message)) = crate::schema::check(&schema, &Value::Object(known.clone())) {
            checked.flag = Some(format!("invalid arguments: {at}: {message}"));
        }
    }
    checked
}

/// The preview for a person: one line a call site, then what makes it
/// incomplete.
fn text(preview: &Preview, checked: &[Checked]) -> String {
    let mut out = String::new();
    if preview.calls.is_empty() {
        out.push_str("The script's text shows no codemode call.\n");
    } else {
        out.push_str(&format!(
            "The script's text shows {} codemode call{} (a preview: each call is checked when it is made):\n",
            preview.calls.len() + preview.more_calls,
            if preview.calls.len() + preview.more_calls == 1 { "" } else { "s" }
        ));
    }
    for (site, checked) in preview.calls.iter().zip(checked).take(SHOWN) {
        let args = match (&site.args, &site.known) {
            (Some(args), _) => compact(args),
            (None, Some(known)) => {
                let shown = compact(&Value::Object(known.clone()));
                format!("{}, …}}", shown.strip_suffix('}').unwrap_or(&shown))
            }
            (None, None) if site.spread => "(spread arguments)".to_owned(),
            (None, None) => "(computed arguments)".to_owned(),
        };
        let reach = match site.reach {
            Reach::Once => "",
            Reach::Maybe => " · if reached",
            Reach::Repeated => " · in a loop",
            Reach::InFunction => " · in a function",
        };
        let mut notes = String::new();
        if checked.staged {
            notes.push_str(" · staged");
        }
        match checked.policy {
            Some("ask") if !checked.staged => notes.push_str(" · asks"),
            _ => {}
        }
        if let Some(flag) = &checked.flag {
            notes.push_str(&format!(" · {flag}"));
        }
        out.push_str(&format!(
            "  {}:{}  {} {}{}{}\n",
            site.line,
            site.column,
            safe_line(&site.tool),
            safe_line(&args),
            reach,
            notes
        ));
    }
    let hidden = preview.calls.len().saturating_sub(SHOWN) + preview.more_calls;
    if hidden > 0 {
        out.push_str(&format!("  … and {hidden} more\n"));
    }
    if !preview.complete {
        out.push_str("The preview is incomplete, so the script may make calls not listed here:\n");
        for gap in &preview.gaps {
            out.push_str(&format!("  {}:{}  {}\n", gap.line, gap.column, gap.reason));
        }
        if preview.gaps.is_empty() {
            out.push_str("  a call's arguments are spread\n");
        }
    }
    out
}

/// A value as one line of JSON, at most 200 characters.
fn compact(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= 200 {
        return text;
    }
    let mut short: String = text.chars().take(199).collect();
    short.push('…');
    short
}
