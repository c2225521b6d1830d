//! The hook entries `airlock hook install` merges into an agent's settings
//! (and `uninstall` takes out), as JSON values: other keys and other hooks
//! are kept as they are, and installing twice is installing once.
//!
//! Each agent reads the same three levels, `hooks` → event → matcher
//! groups `{matcher, hooks: [{type: "command", command, timeout}]}`
//! (Claude Code: `.claude/settings.json`; Codex: `.codex/hooks.json`;
//! Gemini CLI: `.gemini/settings.json`, whose `timeout` is in
//! milliseconds and whose hooks carry a `name`).

use serde_json::{Map, Value, json};

use super::Agent;

/// The events airlock's hook answers for `agent`, with the tools each is
/// matched on (an anchored regular expression, as every agent reads one).
pub fn events(agent: Agent) -> &'static [(&'static str, &'static str)] {
    match agent {
        Agent::ClaudeCode => &[
            (
                "PreToolUse",
                "^(Edit|MultiEdit|Write|NotebookEdit|Bash|Read|Grep|Glob|LS|mcp__.*)$",
            ),
            ("PostToolUse", "^(Edit|MultiEdit|Write|NotebookEdit)$"),
        ],
        Agent::Codex => &[
            ("PreToolUse", "^(Bash|apply_patch|mcp__.*)$"),
            ("PostToolUse", "^apply_patch$"),
        ],
        Agent::Gemini => &[
            (
                "BeforeTool",
                "^(replace|write_file|run_shell_command|read_file|glob|grep_search|search_file_content|list_directory|mcp_.*)$",
            ),
            ("AfterTool", "^(replace|write_file)$"),
        ],
    }
}

/// The name airlock's entries carry in Gemini CLI's settings.
const NAME: &str = "airlock";

/// Whether `hook` (one handler) is airlock's for `agent`: its command runs
/// `… hook <agent>` of a program named `airlock`.
fn is_ours(agent: Agent, hook: &Value) -> bool {
    let Some(command) = hook.get("command").and_then(Value::as_str) else {
        return false;
    };
    let words: Vec<&str> = command.split_whitespace().collect();
    words.windows(3).any(|window| {
        let program = window[0].trim_matches(|c| c == '"' || c == '\'');
        (program == "airlock" || program.ends_with("/airlock"))
            && window[1] == "hook"
            && window[2] == agent.name()
    })
}

/// One change made, for the person who ran the command.
pub type Changes = Vec<String>;

/// `settings` with airlock's hook for `agent` running `command` (which
/// must end in `hook <agent>`), waited on for up to `timeout_seconds`;
/// airlock's earlier entries for `agent` are replaced. `settings` must be
/// a JSON object (an empty file is `{}`).
pub fn install(
    agent: Agent,
    settings: &Value,
    command: &str,
    timeout_seconds: u64,
) -> Result<(Value, Changes), String> {
    let (mut settings, mut changes) = uninstall(agent, settings)?;
    changes.clear();
    let object = settings
        .as_object_mut()
        .ok_or_else(|| "the settings are not a JSON object".to_owned())?;
    let hooks = object
        .entry("hooks")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(hooks) = hooks else {
        return Err("`hooks` in the settings is not an object".to_owned());
    };
    for (event, matcher) in events(agent) {
        let mut handler = json!({"type": "command", "command": command});
        match agent {
            Agent::Gemini => {
                handler["name"] = json!(NAME);
                handler["timeout"] = json!(timeout_seconds.saturating_mul(1000));
            }
            Agent::ClaudeCode | Agent::Codex => handler["timeout"] = json!(timeout_seconds),
        }
        let group = json!({"matcher": matcher, "hooks": [handler]});
        let list = hooks
            .entry(*event)
            .or_insert_with(|| Value::Array(Vec::new()));
        let Value::Array(list) = list else {
            return Err(format!("`hooks.{event}` in the settings is not a list"));
        };
        list.push(group);
        changes.push(format!("hooks.{event}: added airlock's hook for {matcher}"));
    }
    Ok((settings, changes))
}

/// `settings` without airlock's hook for `agent`: its handlers removed,
/// and a matcher group, an event or `hooks` left empty by that removed
/// too. Everything else stays.
pub fn uninstall(agent: Agent, settings: &Value) -> Result<(Value, Changes), String> {
    let mut settings = settings.clone();
    let mut changes = Vec::new();
    let Some(object) = settings.as_object_mut() else {
        return Err("the settings are not a JSON object".to_owned());
    };
    let Some(hooks) = object.get_mut("hooks") else {
        return Ok((settings, changes));
    };
    let Value::Object(events) = hooks else {
        return Err("`hooks` in the settings is not an object".to_owned());
    };
    let mut emptied = Vec::new();
    for (event, groups) in events.iter_mut() {
        let Value::Array(groups) = groups else {
            continue;
        };
        let before = groups.len();
        let mut removed = 0;
        groups.retain_mut(|group| {
            let Some(Value::Array(handlers)) = group.get_mut("hooks") else {
                return true;
            };
            let count = handlers.len();
            handlers.retain(|handler| !is_ours(agent, handler));
            removed += count - handlers.len();
            !(handlers.is_empty() && count > 0)
        });
        if removed > 0 {
            changes.push(format!("hooks.{event}: removed airlock's hook"));
        }
        if groups.is_empty() && before > 0 {
            emptied.push(event.clone());
        }
    }
    for event in emptied {
        events.remove(&event);
    }
    if events.is_empty() && !changes.is_empty() {
        object.remove("hooks");
    }
    Ok((settings, changes))
}

/// Whether `settings` hold airlock's hook for `agent` on every event it
/// answers.
pub fn installed(agent: Agent, settings: &Value) -> bool {
    events(agent).iter().all(|(event, _)| {
        settings
            .get("hooks")
            .and_then(|hooks| hooks.get(*event))
            .and_then(Value::as_array)
            .is_some_and(|groups| {
                groups.iter().any(|group| {
                    group
                        .get("hooks")
                        .and_then(Value::as_array)
                        .is_some_and(|handlers| handlers.iter().any(|hook| is_ours(agent, hook)))
                })
            })
    })
}
