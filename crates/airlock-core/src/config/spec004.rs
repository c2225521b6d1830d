//! Spec 004's configuration form, loaded as written: a JSON (or YAML) file
//! with `servers` (VS Code's `mcp.json` entries: `type`, `command`, `args`,
//! `env`, `cwd`, `url`, `headers`) and `evaluation` (`profiles` with
//! `allowlist`, `denylist`, `asklist`, `elicitationFallback`;
//! `defaultProfile`), beside airlock's own keys or alone.
//!
//! It becomes airlock's model before anything else reads it: each server an
//! upstream whose tools pass unless a profile asks or denies (spec 004's
//! "otherwise allow": a rule after the file's own), each profile a profile (one without `elicitationFallback`
//! falls back to `deny`, as the spec says) also offered as
//! `codemode_eval_<profile>`. Every issue found later names the key as the
//! file spells it (`servers.fs.command`, `evaluation.profiles.safe`).

use serde_json::{Map, Value};

use super::ConfigIssue;

/// Where a key of airlock's model came from in the file, so that an issue
/// about it names the file's key (and finds its line).
#[derive(Debug, Default, Clone)]
pub(crate) struct Origins(Vec<(String, String)>);

impl Origins {
    /// `path` as the file spells it.
    pub(crate) fn original(&self, path: &str) -> String {
        for (ours, theirs) in &self.0 {
            if let Some(rest) = path.strip_prefix(ours.as_str())
                && (rest.is_empty() || rest.starts_with(['.', '[']))
            {
                return format!("{theirs}{rest}");
            }
        }
        path.to_owned()
    }
}

const SERVER_KEYS: [&str; 7] = ["type", "command", "args", "env", "cwd", "url", "headers"];
const PROFILE_KEYS: [&str; 4] = ["allowlist", "denylist", "asklist", "elicitationFallback"];
const EVALUATION_KEYS: [&str; 2] = ["profiles", "defaultProfile"];

/// Rewrites a document that uses spec 004's keys into airlock's form.
/// A document without them is returned as it is.
pub(crate) fn translate(
    mut document: Map<String, Value>,
) -> Result<(Map<String, Value>, Origins), Vec<ConfigIssue>> {
    let mut origins = Origins::default();
    let servers = document.remove("servers");
    let evaluation = document.remove("evaluation");
    if servers.is_none() && evaluation.is_none() {
        return Ok((document, origins));
    }
    let mut issues = Vec::new();
    if let Some(servers) = servers {
        upstreams(&mut document, servers, &mut origins, &mut issues);
    }
    if let Some(evaluation) = evaluation {
        profiles(&mut document, evaluation, &mut origins, &mut issues);
    }
    if issues.is_empty() {
        Ok((document, origins))
    } else {
        Err(issues)
    }
}

fn upstreams(
    document: &mut Map<String, Value>,
    servers: Value,
    origins: &mut Origins,
    issues: &mut Vec<ConfigIssue>,
) {
    let Value::Object(servers) = servers else {
        issues.push(ConfigIssue::new(
            "servers",
            "must be a mapping of server names to servers",
        ));
        return;
    };
    let list = document
        .entry("upstreams")
        .or_insert_with(|| Value::Array(Vec::new()));
    let Value::Array(list) = list else {
        issues.push(ConfigIssue::new("upstreams", "must be a list"));
        return;
    };
    let mut passed = Vec::new();
    for (name, server) in servers {
        let here = format!("servers.{name}");
        let Value::Object(mut server) = server else {
            issues.push(ConfigIssue::new(
                here,
                "must be a mapping (command, args, env, cwd; or url, headers)",
            ));
            continue;
        };
        if let Some(key) = server
            .keys()
            .find(|key| !SERVER_KEYS.contains(&key.as_str()))
        {
            issues.push(ConfigIssue::new(
                format!("{here}.{key}"),
                format!(
                    "unknown field `{key}`, expected one of {}",
                    quoted(&SERVER_KEYS)
                ),
            ));
            continue;
        }
        let needs = match server.remove("type") {
            None => None,
            Some(Value::String(kind)) if kind == "stdio" => {
                Some(("command", "a stdio server needs `command`"))
            }
            Some(Value::String(kind))
                if ["http", "streamable-http", "streamableHttp"].contains(&kind.as_str()) =>
            {
                Some(("url", "an http server needs `url`"))
            }
            Some(_) => {
                issues.push(ConfigIssue::new(
                    format!("{here}.type"),
                    "must be stdio or http (airlock speaks streamable HTTP, not the old SSE transport)",
                ));
                continue;
            }
        };
        if let Some((key, message)) = needs
            && !server.contains_key(key)
        {
            issues.push(ConfigIssue::new(here.clone(), message));
        }
        origins.0.push((format!("upstreams[{}]", list.len()), here));
        server.insert("name".to_owned(), Value::String(name.clone()));
        list.push(Value::Object(server));
        passed.push(name);
    }
    // Spec 004: a server's tools pass unless a profile asks or denies.
    // Rules the file writes itself come first.
    let rules = document
        .entry("security")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(hitl) = rules.as_object_mut().map(|security| {
        security
            .entry("hitl")
            .or_insert_with(|| Value::Object(Map::new()))
    }) else {
        return;
    };
    let Some(rules) = hitl.as_object_mut().map(|hitl| {
        hitl.entry("rules")
            .or_insert_with(|| Value::Array(Vec::new()))
    }) else {
        return;
    };
    if let Value::Array(rules) = rules {
        for name in passed {
            origins.0.push((
                format!("security.hitl.rules[{}]", rules.len()),
                format!("servers.{name}"),
            ));
            rules.push(
                serde_json::json!({"tools": [format!("{name}__*")], "require_approval": false}),
            );
        }
    }
}

fn profiles(
    document: &mut Map<String, Value>,
    evaluation: Value,
    origins: &mut Origins,
    issues: &mut Vec<ConfigIssue>,
) {
    let Value::Object(mut evaluation) = evaluation else {
        issues.push(ConfigIssue::new(
            "evaluation",
            "must be a mapping (profiles, defaultProfile)",
        ));
        return;
    };
    if let Some(key) = evaluation
        .keys()
        .find(|key| !EVALUATION_KEYS.contains(&key.as_str()))
    {
        issues.push(ConfigIssue::new(
            format!("evaluation.{key}"),
            format!(
                "unknown field `{key}`, expected one of {}",
                quoted(&EVALUATION_KEYS)
            ),
        ));
        return;
    }
    if let Some(default) = evaluation.remove("defaultProfile") {
        if document.contains_key("default_profile") {
            issues.push(ConfigIssue::new(
                "evaluation.defaultProfile",
                "the file also sets default_profile; keep one",
            ));
        } else {
            origins.0.push((
                "default_profile".to_owned(),
                "evaluation.defaultProfile".to_owned(),
            ));
            document.insert("default_profile".to_owned(), default);
        }
    }
    let Some(given) = evaluation.remove("profiles") else {
        return;
    };
    let Value::Object(given) = given else {
        issues.push(ConfigIssue::new(
            "evaluation.profiles",
            "must be a mapping of profile names to profiles",
        ));
        return;
    };
    let names: Vec<Value> = given.keys().cloned().map(Value::String).collect();
    let profiles = document
        .entry("profiles")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(profiles) = profiles else {
        issues.push(ConfigIssue::new("profiles", "must be a mapping"));
        return;
    };
    for (name, profile) in given {
        let here = format!("evaluation.profiles.{name}");
        let Value::Object(mut profile) = profile else {
            issues.push(ConfigIssue::new(
                here,
                "must be a mapping (allowlist, denylist, asklist, elicitationFallback)",
            ));
            continue;
        };
        if let Some(key) = profile
            .keys()
            .find(|key| !PROFILE_KEYS.contains(&key.as_str()))
        {
            issues.push(ConfigIssue::new(
                format!("{here}.{key}"),
                format!(
                    "unknown field `{key}`, expected one of {}",
                    quoted(&PROFILE_KEYS)
                ),
            ));
            continue;
        }
        if profiles.contains_key(&name) {
            issues.push(ConfigIssue::new(
                here,
                "the file also defines this profile under `profiles`; keep one",
            ));
            continue;
        }
        // The spec: a profile without `elicitationFallback` denies what it
        // would ask when the client cannot be asked.
        let fallback = profile
            .remove("elicitationFallback")
            .unwrap_or_else(|| Value::String("deny".to_owned()));
        profile.insert("elicitation_fallback".to_owned(), fallback);
        origins.0.push((
            format!("profiles.{name}.elicitation_fallback"),
            format!("{here}.elicitationFallback"),
        ));
        origins.0.push((format!("profiles.{name}"), here));
        profiles.insert(name, Value::Object(profile));
    }
    // Spec 004: every profile is offered as its own eval tool.
    let codemode = document
        .entry("codemode")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(codemode) = codemode {
        let tools = codemode
            .entry("profile_tools")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(tools) = tools {
            for name in names {
                if !tools.contains(&name) {
                    tools.push(name);
                }
            }
        }
    }
}

fn quoted(keys: &[&str]) -> String {
    keys.iter()
        .map(|key| format!("`{key}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
