//! Configuration: the model of `airlock.yaml`, its loading and validation, the
//! commented template `airlock init` writes, and the JSON Schema.
//!
//! ```
//! let loaded = airlock_core::config::load("security:\n  hitl:\n    default_timeout: 30\n", "airlock.yaml")
//!     .expect("valid");
//! assert_eq!(loaded.config.security.hitl.default_timeout, 30);
//! let error = airlock_core::config::load("securty: {}\n", "airlock.yaml").unwrap_err();
//! assert!(error.to_string().starts_with("airlock.yaml:1: securty: unknown field"));
//! ```

mod model;
mod spec004;
mod template;

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

pub use model::*;
pub use template::TEMPLATE;

use crate::policy::{Policy, Risk};
use crate::yaml;

/// A configuration that parsed, validated and compiled.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub config: Config,
    /// The policy compiled from `config`; bind it to a workspace before use.
    pub policy: Policy,
}

/// One problem in a configuration, with the key path it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    /// Key path such as `security.hitl.rules[1].conditions[0].matches`; empty for
    /// the whole file.
    pub path: String,
    /// 1-based line in the file, when the file has the key.
    pub line: Option<usize>,
    /// Lowercase, no trailing period.
    pub message: String,
}

impl ConfigIssue {
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> ConfigIssue {
        ConfigIssue {
            path: path.into(),
            line: None,
            message: message.into(),
        }
    }
}

/// Every problem found in one configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// How the file is named in messages (usually its path).
    pub source_name: String,
    pub issues: Vec<ConfigIssue>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, issue) in self.issues.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            f.write_str(&self.source_name)?;
            if let Some(line) = issue.line {
                write!(f, ":{line}")?;
            }
            if issue.path.is_empty() {
                write!(f, ": {}", issue.message)?;
            } else {
                write!(f, ": {}: {}", issue.path, issue.message)?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// Parses, validates and compiles a configuration file's text. An empty file (or
/// one holding only comments) is the built-in defaults.
pub fn load(text: &str, source_name: &str) -> Result<LoadedConfig, ConfigError> {
    let fail = |issues: Vec<ConfigIssue>| ConfigError {
        source_name: source_name.to_owned(),
        issues,
    };
    let document = yaml::parse(text).map_err(|error| {
        fail(vec![ConfigIssue {
            path: error.path,
            line: Some(error.line),
            message: error.message,
        }])
    })?;
    let lines = &document.lines;
    let origins = std::cell::RefCell::new(spec004::Origins::default());
    let with_lines = |issues: Vec<ConfigIssue>| {
        let origins = origins.borrow();
        let mut issues: Vec<ConfigIssue> = issues
            .into_iter()
            .map(|issue| {
                let path = origins.original(&issue.path);
                ConfigIssue {
                    line: issue.line.or_else(|| lines.line_of(&path)),
                    path,
                    ..issue
                }
            })
            .collect();
        issues.sort_by_key(|issue| issue.line);
        fail(issues)
    };
    let value = match document.value {
        Value::Null => Value::Object(serde_json::Map::new()),
        Value::Object(map) => {
            // Spec 004's form (`servers`, `evaluation`) becomes airlock's.
            let (map, found) = spec004::translate(map).map_err(&with_lines)?;
            *origins.borrow_mut() = found;
            Value::Object(map)
        }
        _ => {
            return Err(with_lines(vec![ConfigIssue::new(
                "",
                "the file must be a mapping of keys to values",
            )]));
        }
    };
    let config: Config = serde_path_to_error::deserialize(value.clone()).map_err(|error| {
        with_lines(vec![ConfigIssue::new(
            render_path(error.path()),
            error.inner().to_string(),
        )])
    })?;
    let mut issues = validate(&config);
    match Policy::compile(&config) {
        Ok(policy) if issues.is_empty() => Ok(LoadedConfig { config, policy }),
        Ok(_) => Err(with_lines(issues)),
        Err(policy_issues) => {
            issues.extend(policy_issues);
            Err(with_lines(issues))
        }
    }
}

/// The built-in defaults, compiled (what an absent file means).
pub fn defaults() -> Result<LoadedConfig, ConfigError> {
    load("", "built-in defaults")
}

/// The JSON Schema of the configuration file, generated from the model.
pub fn json_schema() -> Value {
    serde_json::to_value(schemars::schema_for!(Config)).unwrap_or(Value::Null)
}

/// Renders a serde path like the rest of airlock does: `a.b[0].c`.
fn render_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Unknown => {}
        }
    }
    out
}

/// Semantic checks that serde cannot express. Patterns (globs, regexes) are checked
/// by compiling the policy.
fn validate(config: &Config) -> Vec<ConfigIssue> {
    let mut issues = Vec::new();
    let mut check = |ok: bool, path: &str, message: &str| {
        if !ok {
            issues.push(ConfigIssue::new(path, message));
        }
    };

    let workspace = &config.workspace;
    check(
        !workspace.root.is_empty(),
        "workspace.root",
        "must not be empty",
    );
    check(
        !workspace.root.contains('\0'),
        "workspace.root",
        "must not contain a nul byte",
    );
    check(
        !crate::policy::normalize_relative(&workspace.state_dir).is_some_and(|p| p.is_empty()),
        "workspace.state_dir",
        "must be a directory below the workspace root, not the root itself",
    );
    check(
        !workspace.state_dir.is_empty() && !workspace.state_dir.contains('\0'),
        "workspace.state_dir",
        "must be a non-empty path without nul bytes",
    );
    // Relative locations that climb out of the root would escape the protection
    // of airlock's own files.
    for (path, value) in [
        ("workspace.state_dir", &workspace.state_dir),
        ("audit.path", &config.audit.path),
    ] {
        check(
            value.starts_with('/') || crate::policy::normalize_relative(value).is_some(),
            path,
            "must stay inside the workspace root (or be an absolute path)",
        );
    }
    check(
        crate::policy::normalize_relative(&config.audit.path).is_none_or(|p| !p.is_empty()),
        "audit.path",
        "must name a file, not the workspace root",
    );

    let broker = &config.file_broker;
    for (name, value) in [
        ("hitl_ttl_seconds", broker.hitl_ttl_seconds),
        ("max_read_bytes_default", broker.max_read_bytes_default),
        ("max_read_bytes_hard", broker.max_read_bytes_hard),
        ("max_write_bytes_hard", broker.max_write_bytes_hard),
        ("max_inline_bytes", broker.max_inline_bytes),
        ("diff_preview_max_chars", broker.diff_preview_max_chars),
        ("max_grep_results", broker.max_grep_results),
        ("max_glob_results", broker.max_glob_results),
        ("max_scan_files", broker.max_scan_files),
        ("max_scan_bytes", broker.max_scan_bytes),
        ("max_changed_files", broker.max_changed_files),
        ("max_edit_replacements", broker.max_edit_replacements),
    ] {
        check(
            value > 0,
            &format!("file_broker.{name}"),
            "must be positive",
        );
    }
    check(
        !broker.allowed_patch_formats.is_empty(),
        "file_broker.allowed_patch_formats",
        "must name at least one format (v4a, unified); to turn apply_patch off, deny it in a profile",
    );
    check(
        broker.audit_log_enabled,
        "file_broker.audit_log_enabled",
        "cannot be false: airlock audits every call (reads, denials and timeouts included) and has no way to turn its audit log off",
    );
    check(
        broker.max_read_bytes_default <= broker.max_read_bytes_hard,
        "file_broker.max_read_bytes_default",
        &format!(
            "must not exceed file_broker.max_read_bytes_hard ({})",
            broker.max_read_bytes_hard
        ),
    );
    for (i, dir) in broker.allowlisted_create_dirs.iter().enumerate() {
        let path = format!("file_broker.allowlisted_create_dirs[{i}]");
        let relative = !dir.starts_with('/') && crate::policy::normalize_relative(dir).is_some();
        check(
            relative && !dir.contains('\0'),
            &path,
            "must be a relative directory inside the workspace",
        );
    }

    check(
        config.approvals.grant_ttl_ms().is_some(),
        "approvals.grant_ttl",
        "must be a duration such as 30m, 8h or 7d",
    );
    check(
        config
            .approvals
            .grant_ttl_ms()
            .is_none_or(|ttl| ttl <= 3650 * 86_400_000),
        "approvals.grant_ttl",
        "must be at most 3650d (10 years)",
    );

    let hitl = &config.security.hitl;
    check(
        hitl.default_timeout > 0,
        "security.hitl.default_timeout",
        "must be positive",
    );
    check(
        hitl.max_pending > 0,
        "security.hitl.max_pending",
        "must be positive",
    );
    check(
        hitl.max_pending_per_session > 0,
        "security.hitl.max_pending_per_session",
        "must be positive",
    );
    check(
        hitl.max_pending_per_session <= hitl.max_pending,
        "security.hitl.max_pending_per_session",
        &format!(
            "must not exceed security.hitl.max_pending ({})",
            hitl.max_pending
        ),
    );
    for (i, rule) in hitl.rules.iter().enumerate() {
        let base = format!("security.hitl.rules[{i}]");
        check(
            !rule.tools.is_empty(),
            &format!("{base}.tools"),
            "must name at least one tool",
        );
        check(
            rule.timeout != Some(0),
            &format!("{base}.timeout"),
            "must be positive",
        );
        for (j, condition) in rule.conditions.iter().enumerate() {
            let path = format!("{base}.conditions[{j}]");
            check(
                !condition.param.is_empty(),
                &format!("{path}.param"),
                "must not be empty",
            );
            let operators = [
                condition.equals.is_some(),
                condition.matches.is_some(),
                condition.glob.is_some(),
                condition.in_.is_some(),
            ];
            check(
                operators.iter().filter(|set| **set).count() == 1,
                &path,
                "needs exactly one of equals, matches, glob, in",
            );
            check(
                condition
                    .in_
                    .as_ref()
                    .is_none_or(|values| !values.is_empty()),
                &format!("{path}.in"),
                "must list at least one value",
            );
        }
    }
    for risk in Risk::ALL {
        let policy = hitl.policies.get(risk);
        let base = format!("security.hitl.policies.{risk}");
        check(
            policy.timeout != Some(0),
            &format!("{base}.timeout"),
            "must be positive",
        );
        for (i, approver) in policy.approvers.iter().flatten().enumerate() {
            check(
                !approver.trim().is_empty(),
                &format!("{base}.approvers[{i}]"),
                "must not be empty",
            );
        }
    }
    if let Some(users) = &config.security.write_tool_allowlist {
        for (i, user) in users.iter().enumerate() {
            check(
                !user.is_empty(),
                &format!("security.write_tool_allowlist[{i}]"),
                "must not be empty",
            );
        }
    }

    for name in config.profiles.keys() {
        check(
            is_profile_name(name),
            &format!("profiles.{name}"),
            "profile names must match ^[A-Za-z0-9_]{1,32}$",
        );
    }
    if let Some(name) = &config.default_profile {
        check(
            config.profiles.contains_key(name),
            "default_profile",
            &format!("names no profile in `profiles` ({name})"),
        );
    }

    for (i, upstream) in config.upstreams.iter().enumerate() {
        let base = format!("upstreams[{i}]");
        check(
            is_upstream_name(&upstream.name),
            &format!("{base}.name"),
            "must match ^[A-Za-z0-9_-]{1,32}$ and not contain `__`",
        );
        check(
            !config.upstreams[..i]
                .iter()
                .any(|other| other.name == upstream.name),
            &format!("{base}.name"),
            &format!("duplicate upstream name {}", upstream.name),
        );
        if !upstream.prefix
            && let Some(first) = config.upstreams[..i].iter().position(|other| !other.prefix)
        {
            check(
                false,
                &format!("{base}.prefix"),
                &format!("only one upstream may be offered unprefixed (upstreams[{first}] is)"),
            );
        }
        if upstream.timeout.is_some() {
            check(
                upstream.timeout_seconds().is_some(),
                &format!("{base}.timeout"),
                "must be a duration such as 30s, 2m or 1h",
            );
        }
        for (name, value) in &upstream.headers {
            // The syntax is checked now; the variables are read when
            // connecting (a secret may be set later).
            if let Err(error) = expand_env(value, |_| Some(String::new())) {
                check(false, &format!("{base}.headers.{name}"), &error);
            }
        }
        match (&upstream.command, &upstream.url) {
            (Some(command), None) => {
                check(
                    !command.is_empty(),
                    &format!("{base}.command"),
                    "must not be empty",
                );
                check(
                    upstream.headers.is_empty(),
                    &format!("{base}.headers"),
                    "only applies to url upstreams",
                );
            }
            (None, Some(url)) => {
                check(is_http_url(url), &format!("{base}.url"), NOT_HTTP_URL);
                for (key, what) in [
                    ("args", upstream.args.is_empty()),
                    ("env", upstream.env.is_empty()),
                    ("cwd", upstream.cwd.is_none()),
                ] {
                    check(
                        what,
                        &format!("{base}.{key}"),
                        "only applies to command upstreams",
                    );
                }
            }
            _ => check(false, &base, "needs exactly one of command, url"),
        }
    }

    for (i, token) in config.auth.tokens.iter().enumerate() {
        let base = format!("auth.tokens[{i}]");
        check(
            !token.name.is_empty(),
            &format!("{base}.name"),
            "must not be empty",
        );
        check(
            !config.auth.tokens[..i]
                .iter()
                .any(|other| other.name == token.name),
            &format!("{base}.name"),
            &format!("duplicate token name {}", token.name),
        );
        let hex = token
            .sha256
            .strip_prefix("sha256:")
            .unwrap_or(&token.sha256);
        check(
            hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
            &format!("{base}.sha256"),
            "must be 64 hex digits (the sha256 of the token)",
        );
        check(
            !token.roles.is_empty(),
            &format!("{base}.roles"),
            "must name at least one role",
        );
    }

    check(
        !config.audit.path.is_empty(),
        "audit.path",
        "must not be empty",
    );
    if let Some(name) = &config.audit.hmac_key_env {
        check(
            is_env_name(name),
            "audit.hmac_key_env",
            "must be an environment variable name",
        );
    }

    if let Some(url) = &config.audit.checkpoints.webhook {
        check(is_http_url(url), "audit.checkpoints.webhook", NOT_HTTP_URL);
    }
    if let Some(url) = &config.telemetry.otlp.endpoint {
        check(is_http_url(url), "telemetry.otlp.endpoint", NOT_HTTP_URL);
    }
    if let Some(url) = &config.audit.ship.http {
        check(is_http_url(url), "audit.ship.http", NOT_HTTP_URL);
    }
    if let Some(url) = &config.audit.ship.syslog {
        check(
            syslog_target(url).is_some(),
            "audit.ship.syslog",
            "must be udp://HOST:PORT, tcp://HOST:PORT or tls://HOST:PORT",
        );
    }
    if let Some(origin) = &config.audit.checkpoints.origin {
        check(
            !origin.is_empty()
                && !origin
                    .chars()
                    .any(|c| c.is_whitespace() || c == '+' || c.is_control()),
            "audit.checkpoints.origin",
            "must be a name without spaces or '+' (a schema-less URL such as example.com/airlock)",
        );
    }
    for (i, hook) in config.notify.webhooks.iter().enumerate() {
        let base = format!("notify.webhooks[{i}]");
        check(is_http_url(&hook.url), &format!("{base}.url"), NOT_HTTP_URL);
        check(
            !hook.events.is_empty(),
            &format!("{base}.events"),
            "must name at least one event",
        );
    }
    for (i, host) in config.http.allowed_hosts.iter().enumerate() {
        if let Err(message) = crate::origin::parse_allowed_host(host) {
            check(
                false,
                &format!("http.allowed_hosts[{i}]"),
                &message.to_string(),
            );
        }
    }
    for (i, origin) in config.http.allowed_origins.iter().enumerate() {
        if origin != "null"
            && let Err(message) = crate::origin::parse_allowed_origin(origin)
        {
            check(
                false,
                &format!("http.allowed_origins[{i}]"),
                &message.to_string(),
            );
        }
    }
    check(
        (1024..=1 << 30).contains(&config.mcp.max_message_bytes),
        "mcp.max_message_bytes",
        "must be between 1024 and 1073741824",
    );
    if let Some(ca_file) = &config.tls.ca_file {
        check(
            !ca_file.is_empty() && !ca_file.contains('\0'),
            "tls.ca_file",
            "must be a file's path (or null)",
        );
    }
    issues.extend(validate_channels(&config.channels));
    issues.extend(validate_exec(&config.exec));
    issues.extend(validate_codemode(config));
    issues.extend(validate_store(&config.store));
    issues.extend(validate_sessions(config));
    issues
}

/// The sessions' keys and the profiles' session templates and allowances
/// (DESIGN §3, §5.3).
fn validate_sessions(config: &Config) -> Vec<ConfigIssue> {
    let sessions = &config.sessions;
    let mut issues = Vec::new();
    let days = 30 * 86_400;
    require(
        &mut issues,
        parse_duration_seconds(&sessions.max_ttl).is_some_and(|s| s <= days),
        "sessions.max_ttl".to_owned(),
        "must be a duration from 1s to 30d",
    );
    require(
        &mut issues,
        parse_duration_seconds(&sessions.idle_ttl).is_some_and(|s| s <= days),
        "sessions.idle_ttl".to_owned(),
        "must be a duration from 1s to 30d",
    );
    require(
        &mut issues,
        (1..=100_000).contains(&sessions.max_open_per_principal),
        "sessions.max_open_per_principal".to_owned(),
        "must be from 1 to 100000",
    );
    for (at, key) in sessions.env_allow.iter().enumerate() {
        require(
            &mut issues,
            !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
            format!("sessions.env_allow[{at}]"),
            "must be a variable name",
        );
    }
    for (name, profile) in &config.profiles {
        if let Some(template) = &profile.session {
            // Paths are checked against the root when the session is made;
            // here, the shape.
            if let Err(error) = crate::session::OpenRequest::parse(template, "/") {
                require(
                    &mut issues,
                    false,
                    format!("profiles.{name}.session"),
                    &error.message,
                );
            }
        }
        if let Some(auto) = &profile.sessions.auto {
            if let Some(network) = &auto.network
                && let Err(error) = crate::session::Network::parse(network)
            {
                require(
                    &mut issues,
                    false,
                    format!("profiles.{name}.sessions.auto.network"),
                    &error,
                );
            }
            if let Some(ttl) = &auto.ttl {
                require(
                    &mut issues,
                    parse_duration_seconds(ttl).is_some(),
                    format!("profiles.{name}.sessions.auto.ttl"),
                    "must be a duration (`2h`)",
                );
            }
        }
    }
    issues
}

/// The store's keys (DESIGN §3, §7.2).
fn validate_store(store: &StoreConfig) -> Vec<ConfigIssue> {
    let mut issues = Vec::new();
    if let Some(url) = &store.url {
        let scheme_ok = url.starts_with("postgres://") || url.starts_with("postgresql://");
        require(
            &mut issues,
            scheme_ok && !url.contains(['\0', '\n', '\r']),
            "store.url".to_owned(),
            "must be a postgres://user@host/database URL (or null for SQLite in the state dir)",
        );
        if let Err(error) = expand_env(url, |_| Some(String::new())) {
            require(&mut issues, false, "store.url".to_owned(), &error);
        }
    }
    require(
        &mut issues,
        (2..=1000).contains(&store.pool_size),
        "store.pool_size".to_owned(),
        "must be from 2 to 1000",
    );
    require(
        &mut issues,
        store
            .lease_seconds()
            .is_some_and(|seconds| (1..=3600).contains(&seconds)),
        "store.lease".to_owned(),
        "must be a duration from 1s to 1h",
    );
    issues
}

/// Code mode's keys (DESIGN §3, §5.2): limits within what the engine and
/// its worker can hold, and `profile_tools` naming configured profiles.
fn validate_codemode(config: &Config) -> Vec<ConfigIssue> {
    let codemode = &config.codemode;
    let mut issues = Vec::new();
    require(
        &mut issues,
        codemode
            .cpu_seconds()
            .is_some_and(|s| (1..=600).contains(&s)),
        "codemode.cpu".to_owned(),
        "must be a duration from 1s to 10m",
    );
    require(
        &mut issues,
        codemode
            .wall_seconds()
            .is_some_and(|s| (1..=86_400).contains(&s)),
        "codemode.wall".to_owned(),
        "must be a duration from 1s to 24h",
    );
    let ranges: [(&str, u64, u64, u64, &str); 8] = [
        (
            "memory_bytes",
            codemode.memory_bytes,
            8 << 20,
            4 << 30,
            "from 8388608 (8 MiB) to 4294967296 (4 GiB)",
        ),
        (
            "stack_bytes",
            codemode.stack_bytes,
            64 << 10,
            4 << 20,
            "from 65536 (64 KiB) to 4194304 (4 MiB)",
        ),
        (
            "max_source_bytes",
            codemode.max_source_bytes,
            1,
            16 << 20,
            "from 1 to 16777216 (16 MiB)",
        ),
        (
            "max_result_bytes",
            codemode.max_result_bytes,
            1,
            32 << 20,
            "from 1 to 33554432 (32 MiB)",
        ),
        (
            "max_console_bytes",
            codemode.max_console_bytes,
            0,
            16 << 20,
            "at most 16777216 (16 MiB)",
        ),
        (
            "max_calls",
            u64::from(codemode.max_calls),
            1,
            100_000,
            "from 1 to 100000",
        ),
        (
            "max_in_flight",
            u64::from(codemode.max_in_flight),
            1,
            64,
            "from 1 to 64",
        ),
        (
            "max_concurrent_runs",
            u64::from(codemode.max_concurrent_runs),
            1,
            64,
            "from 1 to 64",
        ),
    ];
    for (key, value, low, high, words) in ranges {
        require(
            &mut issues,
            (low..=high).contains(&value),
            format!("codemode.{key}"),
            &format!("must be {words}"),
        );
    }
    for (index, name) in codemode.profile_tools.iter().enumerate() {
        require(
            &mut issues,
            config.profiles.contains_key(name),
            format!("codemode.profile_tools[{index}]"),
            &format!(
                "names no profile in `profiles` ({})",
                crate::display::safe_text(name)
            ),
        );
    }
    issues
}

/// The shell tool's keys (DESIGN §3, §5.1); a rule's `match` and
/// `not_match` examples must do what they say.
fn validate_exec(exec: &ExecConfig) -> Vec<ConfigIssue> {
    let mut issues = Vec::new();
    require(
        &mut issues,
        exec.timeout_seconds().is_some(),
        "exec.timeout".to_owned(),
        "must be a duration such as 30s, 2m or 1h",
    );
    require(
        &mut issues,
        exec.max_output_bytes >= 1024,
        "exec.max_output_bytes".to_owned(),
        "must be at least 1024",
    );
    require(
        &mut issues,
        exec.max_processes >= 8,
        "exec.max_processes".to_owned(),
        "must be at least 8",
    );
    require(
        &mut issues,
        exec.max_memory_bytes >= 16 << 20,
        "exec.max_memory_bytes".to_owned(),
        "must be at least 16777216 (16 MiB)",
    );
    for (index, name) in exec.env_allow.iter().enumerate() {
        require(
            &mut issues,
            is_env_name(name),
            format!("exec.env_allow[{index}]"),
            "must be an environment variable name",
        );
    }
    for (index, rule) in exec.rules.iter().enumerate() {
        require(
            &mut issues,
            !rule.prefix.is_empty(),
            format!("exec.rules[{index}].prefix"),
            "must name at least one word",
        );
        for (position, token) in rule.prefix.iter().enumerate() {
            let fine = match token {
                ExecToken::Word(word) => !word.is_empty(),
                ExecToken::Alternatives(words) => {
                    !words.is_empty() && words.iter().all(|word| !word.is_empty() && word != "*")
                }
            };
            require(
                &mut issues,
                fine,
                format!("exec.rules[{index}].prefix[{position}]"),
                "must be a word, `*`, or a non-empty list of words",
            );
        }
    }
    if issues.is_empty() {
        for mismatch in crate::exec::ExecPolicy::check_examples(exec) {
            let (key, says) = if mismatch.should_match {
                ("match", "does not match")
            } else {
                ("not_match", "matches")
            };
            issues.push(ConfigIssue::new(
                format!("exec.rules[{}].{key}", mismatch.index),
                format!(
                    "the rule {says} its example {:?}",
                    crate::display::safe_line(&mismatch.example)
                ),
            ));
        }
    }
    issues
}

/// The chat channels' keys (DESIGN §3, §7.1).
fn validate_channels(channels: &ChannelsConfig) -> Vec<ConfigIssue> {
    let mut issues = Vec::new();
    if let Some(telegram) = &channels.telegram {
        let chat = ChannelKeys {
            base: "channels.telegram",
            envs: &[("token_env", &telegram.token_env)],
            api_url: &telegram.api_url,
            users: &telegram.users,
            user_id: is_numeric_id,
            id_words: "must be a Telegram user id (digits)",
            timeout: telegram.timeout,
        };
        chat.check(&mut issues);
        for (i, id) in telegram.chats.iter().enumerate() {
            require(
                &mut issues,
                *id != 0,
                format!("channels.telegram.chats[{i}]"),
                "must be a Telegram chat id (not 0)",
            );
        }
    }
    if let Some(slack) = &channels.slack {
        let chat = ChannelKeys {
            base: "channels.slack",
            envs: &[
                ("bot_token_env", &slack.bot_token_env),
                ("app_token_env", &slack.app_token_env),
            ],
            api_url: &slack.api_url,
            users: &slack.users,
            user_id: is_slack_id,
            id_words: "must be a Slack user id (capital letters and digits)",
            timeout: slack.timeout,
        };
        chat.check(&mut issues);
        for (i, id) in slack.channels.iter().enumerate() {
            require(
                &mut issues,
                is_slack_id(id),
                format!("channels.slack.channels[{i}]"),
                "must be a Slack channel id (capital letters and digits)",
            );
        }
    }
    if let Some(discord) = &channels.discord {
        let chat = ChannelKeys {
            base: "channels.discord",
            envs: &[("token_env", &discord.token_env)],
            api_url: &discord.api_url,
            users: &discord.users,
            user_id: is_numeric_id,
            id_words: "must be a Discord user id (digits)",
            timeout: discord.timeout,
        };
        chat.check(&mut issues);
        for (i, id) in discord.channels.iter().enumerate() {
            require(
                &mut issues,
                is_numeric_id(id),
                format!("channels.discord.channels[{i}]"),
                "must be a Discord channel id (digits)",
            );
        }
        if let Some(url) = &discord.gateway_url {
            require(
                &mut issues,
                is_ws_url(url),
                "channels.discord.gateway_url".to_owned(),
                "must be a ws:// or wss:// url",
            );
        }
    }
    issues
}

/// The keys every chat channel has.
struct ChannelKeys<'a> {
    base: &'a str,
    envs: &'a [(&'a str, &'a String)],
    api_url: &'a str,
    users: &'a BTreeMap<String, ChatUser>,
    user_id: fn(&str) -> bool,
    id_words: &'a str,
    timeout: u64,
}

impl ChannelKeys<'_> {
    fn check(&self, issues: &mut Vec<ConfigIssue>) {
        let base = self.base;
        for (key, name) in self.envs {
            require(
                issues,
                is_env_name(name),
                format!("{base}.{key}"),
                "must be an environment variable name",
            );
        }
        require(
            issues,
            is_http_url(self.api_url),
            format!("{base}.api_url"),
            NOT_HTTP_URL,
        );
        for (id, entry) in self.users {
            let path = format!("{base}.users.{id}");
            require(issues, (self.user_id)(id), path.clone(), self.id_words);
            require(
                issues,
                !entry.user().trim().is_empty(),
                path.clone(),
                "must name an airlock user",
            );
            let roles = entry.roles();
            require(
                issues,
                !roles.is_empty(),
                format!("{path}.roles"),
                "must name a role",
            );
            require(
                issues,
                !roles.contains(&Role::Agent),
                format!("{path}.roles"),
                "cannot be agent: an agent never decides",
            );
        }
        require(
            issues,
            (1..=86_400).contains(&self.timeout),
            format!("{base}.timeout"),
            "must be between 1 and 86400 seconds",
        );
    }
}

fn require(issues: &mut Vec<ConfigIssue>, ok: bool, path: String, message: &str) {
    if !ok {
        issues.push(ConfigIssue::new(path, message));
    }
}

/// A Telegram or Discord id: digits, not 0.
fn is_numeric_id(id: &str) -> bool {
    (1..=20).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_digit()) && id != "0"
}

/// A Slack user or channel id: capital letters and digits.
fn is_slack_id(id: &str) -> bool {
    (2..=24).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

/// A name an environment variable can have: `[A-Za-z_][A-Za-z0-9_]*`.
fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .enumerate()
            .all(|(i, b)| b == b'_' || b.is_ascii_alphabetic() || (i > 0 && b.is_ascii_digit()))
}

/// `^[A-Za-z0-9_]{1,32}$` (spec 004).
pub fn is_profile_name(name: &str) -> bool {
    (1..=32).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn is_upstream_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && !name.contains("__")
}

const NOT_HTTP_URL: &str = "must be an http:// or https:// url";

fn is_http_url(url: &str) -> bool {
    has_scheme(url, &["http://", "https://"])
}

fn is_ws_url(url: &str) -> bool {
    has_scheme(url, &["ws://", "wss://"])
}

/// `url` starts with one of `schemes`, names a host and holds no space or
/// control character.
fn has_scheme(url: &str, schemes: &[&str]) -> bool {
    schemes.iter().any(|scheme| {
        url.strip_prefix(scheme)
            .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/'))
    }) && !url.chars().any(|c| c.is_whitespace() || c.is_control())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_compile() {
        assert!(Policy::compile(&Config::default()).is_ok());
        assert!(validate(&Config::default()).is_empty());
    }
}

#[cfg(test)]
mod exec_tests {
    use super::load;

    fn issues(text: &str) -> Vec<String> {
        match load(text, "airlock.yaml") {
            Ok(_) => Vec::new(),
            Err(error) => error.to_string().lines().map(str::to_owned).collect(),
        }
    }

    #[test]
    fn exec_rules_whose_examples_hold_load() {
        let text = "exec:\n  rules:\n    - {prefix: [git, status], decision: allow, match: [\"git status -s\"], not_match: [\"git push\"]}\n    - {prefix: [cargo, [build, test]], decision: allow, match: [\"cargo test --all\", \"cargo build\"]}\n";
        assert_eq!(issues(text), Vec::<String>::new());
    }

    #[test]
    fn an_exec_rule_whose_example_fails_is_a_config_error() {
        let text = "exec:\n  rules:\n    - {prefix: [git, status], decision: allow, match: [\"git stat\"], not_match: [\"git status --short\"]}\n";
        let found = issues(text).join("\n");
        assert!(
            found.contains("exec.rules[0].match: the rule does not match its example \"git stat\""),
            "{found}"
        );
        assert!(
            found.contains(
                "exec.rules[0].not_match: the rule matches its example \"git status --short\""
            ),
            "{found}"
        );
    }

    #[test]
    fn bad_exec_keys_are_config_errors() {
        let text = "exec:\n  timeout: soon\n  max_output_bytes: 10\n  max_processes: 1\n  max_memory_bytes: 1000\n  env_allow: [\"A B\"]\n  rules:\n    - {prefix: [], decision: allow}\n    - {prefix: [git, []], decision: ask}\n";
        let found = issues(text).join("\n");
        for key in [
            "exec.timeout",
            "exec.max_output_bytes",
            "exec.max_processes",
            "exec.max_memory_bytes",
            "exec.env_allow[0]",
            "exec.rules[0].prefix",
            "exec.rules[1].prefix[1]",
        ] {
            assert!(found.contains(key), "{key} not in {found}");
        }
        let unknown = issues("exec:\n  rules:\n    - {prefix: [ls], decision: maybe}\n").join("\n");
        assert!(unknown.contains("exec.rules"), "{unknown}");
    }
}

/// A syslog target: (`udp` | `tcp` | `tls`, host, port).
pub fn syslog_target(url: &str) -> Option<(&str, &str, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    if !matches!(scheme, "udp" | "tcp" | "tls") {
        return None;
    }
    let (host, port) = rest.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port: u16 = port.parse().ok().filter(|port| *port > 0)?;
    if host.is_empty() || host.contains(|c: char| c.is_whitespace() || c == '/' || c == '@') {
        return None;
    }
    Some((scheme, host, port))
}
