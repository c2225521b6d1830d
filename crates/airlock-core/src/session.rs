//! Sessions (DESIGN §5.3, spec 003's host session): what `session_open`
//! asks for, in airlock's shape or the spec's, and the authority it gets
//! once clamped by the configuration; the hash the audit records of it.
//! Pure: the broker resolves the roots on the file system and keeps the
//! sessions in the store.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::ErrorCode;
use crate::config::{Config, parse_duration_seconds};
use crate::policy::normalize_relative;

/// A session id: `ses-` and 128 random bits as 32 lowercase hex digits.
pub const ID_PREFIX: &str = "ses-";

/// Whether `text` has the form of a session id (it may still name none).
pub fn is_session_id(text: &str) -> bool {
    text.strip_prefix(ID_PREFIX).is_some_and(|hex| {
        hex.len() == 32
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// The name of the workspace `workspace.root` is.
pub const DEFAULT_WORKSPACE: &str = "default";

/// The longest label key and value, and the most labels.
const MAX_LABEL_BYTES: usize = 256;
const MAX_LABELS: usize = 32;
/// The most roots a session may have.
pub const MAX_ROOTS: usize = 16;
/// The most environment variables a session may set, and the longest value.
const MAX_ENV: usize = 64;
const MAX_ENV_VALUE_BYTES: usize = 4096;
/// The most domains `network: {allow}` may name.
const MAX_DOMAINS: usize = 64;

/// Whether a root may be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RootMode {
    Rw,
    Ro,
}

/// What a session's commands may reach on the network: nothing, anything,
/// or the named domains (and their subdomains).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    None,
    Full,
    Allow(Vec<String>),
}

impl Network {
    /// From `none`, `full` or `{allow: [domains]}` (the spec's
    /// `network_mode` takes the same words).
    pub fn parse(value: &Value) -> Result<Network, String> {
        match value {
            Value::String(word) if word == "none" => Ok(Network::None),
            Value::String(word) if word == "full" => Ok(Network::Full),
            Value::Object(object) if object.len() == 1 && object.contains_key("allow") => {
                let Some(list) = object["allow"].as_array() else {
                    return Err("network.allow must be a list of domain names".to_owned());
                };
                if list.len() > MAX_DOMAINS {
                    return Err(format!(
                        "network.allow names more than {MAX_DOMAINS} domains"
                    ));
                }
                let mut domains = Vec::new();
                for item in list {
                    let Some(domain) = item.as_str().filter(|d| is_domain(d)) else {
                        return Err(format!("network.allow: {item} is not a domain name"));
                    };
                    domains.push(domain.to_ascii_lowercase());
                }
                domains.sort();
                domains.dedup();
                Ok(Network::Allow(domains))
            }
            other => Err(format!(
                "network must be \"none\", \"full\" or {{\"allow\": [domains]}}, not {other}"
            )),
        }
    }

    /// How much it allows: none < some domains < full.
    fn rank(&self) -> u8 {
        match self {
            Network::None => 0,
            Network::Allow(_) => 1,
            Network::Full => 2,
        }
    }

    /// Whether `self` allows nothing `wider` does not.
    pub fn within(&self, wider: &Network) -> bool {
        match (self, wider) {
            (_, Network::Full) | (Network::None, _) => true,
            (Network::Allow(mine), Network::Allow(theirs)) => {
                mine.iter().all(|domain| theirs.contains(domain))
            }
            _ => self.rank() <= wider.rank(),
        }
    }

    /// `self` narrowed to what `cap` allows.
    pub fn narrowed_to(&self, cap: &Network) -> Network {
        match (self, cap) {
            (mine, Network::Full) => mine.clone(),
            (_, Network::None) | (Network::None, _) => Network::None,
            (Network::Full, Network::Allow(theirs)) => Network::Allow(theirs.clone()),
            (Network::Allow(mine), Network::Allow(theirs)) => {
                let both: Vec<String> = mine
                    .iter()
                    .filter(|domain| theirs.contains(domain))
                    .cloned()
                    .collect();
                if both.is_empty() {
                    Network::None
                } else {
                    Network::Allow(both)
                }
            }
        }
    }

    /// Its JSON form.
    pub fn to_json(&self) -> Value {
        match self {
            Network::None => Value::String("none".to_owned()),
            Network::Full => Value::String("full".to_owned()),
            Network::Allow(domains) => serde_json::json!({"allow": domains}),
        }
    }
}

fn is_domain(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 253
        && text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// One root a session asks for: a workspace, a directory inside it
/// (workspace-relative, `""` for its root) and the mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootRequest {
    pub workspace: String,
    pub path: String,
    pub mode: Option<RootMode>,
}

/// A git worktree a session asks to work in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorktreeRequest {
    pub workspace: String,
    pub base: Option<String>,
    pub branch: Option<String>,
}

/// The limits a session may set (spec 003's caps); each binds only
/// downwards: the effective limit is the smaller of the session's and the
/// configuration's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_read_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_write_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_inline_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_grep_results: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_glob_results: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_scan_files: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_scan_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_changed_files: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_edit_replacements: Option<u64>,
    /// The longest a command may run, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec_timeout_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_bytes: Option<u64>,
}

/// What a `session_open` call asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenRequest {
    pub roots: Option<Vec<RootRequest>>,
    pub workdir: Option<String>,
    pub env: BTreeMap<String, String>,
    pub network: Option<Network>,
    pub ttl_ms: Option<u64>,
    pub idle_ttl_ms: Option<u64>,
    pub labels: BTreeMap<String, String>,
    pub limits: Limits,
    pub worktree: Option<WorktreeRequest>,
}

/// A `session_open` (or `host.session.open`) that cannot be read:
/// `invalid_input`, or `root_not_allowed` for a path outside the workspace.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct OpenError {
    pub code: ErrorCode,
    pub message: String,
}

#[expect(non_snake_case, reason = "reads as the constructor it stands for")]
fn OpenError(message: String) -> OpenError {
    OpenError {
        code: ErrorCode::InvalidInput,
        message,
    }
}

fn fail<T>(message: impl Into<String>) -> Result<T, OpenError> {
    Err(OpenError(message.into()))
}

fn outside<T>(message: String) -> Result<T, OpenError> {
    Err(OpenError {
        code: ErrorCode::RootNotAllowed,
        message,
    })
}

/// The keys `session_open` takes in airlock's shape.
const OPEN_KEYS: &[&str] = &[
    "roots", "workdir", "env", "network", "ttl", "idle_ttl", "labels", "limits", "worktree",
];

impl OpenRequest {
    /// Reads `args`, in airlock's shape (`{roots?, workdir?, env?, network?,
    /// ttl?, idle_ttl?, labels?, limits?, worktree?}`) or the spec's
    /// (`{target: {local: {mounts, workdir, env, network_mode}},
    /// session_ttl_ns}`). `root` is the default workspace's absolute root:
    /// an absolute path inside it names a directory of it. Unknown keys are
    /// refused.
    pub fn parse(args: &Value, root: &str) -> Result<OpenRequest, OpenError> {
        let Some(object) = args.as_object() else {
            return fail("session_open takes an object");
        };
        if object.contains_key("target") || object.contains_key("session_ttl_ns") {
            return OpenRequest::parse_spec(object, root);
        }
        if let Some(key) = object.keys().find(|key| !OPEN_KEYS.contains(&key.as_str())) {
            return fail(format!(
                "session_open has no parameter `{key}` (it takes {})",
                OPEN_KEYS.join(", ")
            ));
        }
        let mut request = OpenRequest::default();
        if let Some(roots) = present(object, "roots") {
            let Some(list) = roots.as_array() else {
                return fail("roots must be a list");
            };
            request.roots = Some(parse_roots(list, root, "roots")?);
        }
        if let Some(workdir) = present(object, "workdir") {
            request.workdir = Some(path_text(workdir, root, "workdir")?);
        }
        if let Some(env) = present(object, "env") {
            request.env = parse_env(env)?;
        }
        if let Some(network) = present(object, "network") {
            request.network = Some(Network::parse(network).map_err(OpenError)?);
        }
        if let Some(ttl) = present(object, "ttl") {
            request.ttl_ms = Some(duration_ms(ttl, "ttl")?);
        }
        if let Some(idle) = present(object, "idle_ttl") {
            request.idle_ttl_ms = Some(duration_ms(idle, "idle_ttl")?);
        }
        if let Some(labels) = present(object, "labels") {
            request.labels = parse_labels(labels)?;
        }
        if let Some(limits) = present(object, "limits") {
            request.limits = serde_json::from_value(limits.clone())
                .map_err(|error| OpenError(format!("limits: {error}")))?;
        }
        if let Some(worktree) = present(object, "worktree") {
            request.worktree = Some(parse_worktree(worktree)?);
        }
        Ok(request)
    }

    /// The spec's shape: `target.local` with `mounts` (`[{host_path,
    /// guest_path?, mode?}]`, a guest path only where it equals the host
    /// path: airlock does not remap paths), `workdir`, `env` and
    /// `network_mode`, and `session_ttl_ns`.
    fn parse_spec(object: &Map<String, Value>, root: &str) -> Result<OpenRequest, OpenError> {
        const KEYS: &[&str] = &["target", "session_ttl_ns", "labels"];
        if let Some(key) = object.keys().find(|key| !KEYS.contains(&key.as_str())) {
            return fail(format!("host.session.open has no parameter `{key}`"));
        }
        let mut request = OpenRequest::default();
        if let Some(target) = present(object, "target") {
            let Some(local) = target
                .as_object()
                .filter(|target| target.len() == 1)
                .and_then(|target| target.get("local"))
                .and_then(Value::as_object)
            else {
                return fail("target must be {\"local\": {…}}: airlock runs sessions on this host");
            };
            const LOCAL: &[&str] = &["mounts", "workdir", "env", "network_mode"];
            if let Some(key) = local.keys().find(|key| !LOCAL.contains(&key.as_str())) {
                return fail(format!("target.local has no field `{key}`"));
            }
            if let Some(mounts) = present(local, "mounts") {
                let Some(list) = mounts.as_array() else {
                    return fail("target.local.mounts must be a list");
                };
                let mut roots = Vec::new();
                for (at, mount) in list.iter().enumerate() {
                    let Some(mount) = mount.as_object() else {
                        return fail(format!("target.local.mounts[{at}] must be an object"));
                    };
                    if let Some(key) = mount
                        .keys()
                        .find(|key| !["host_path", "guest_path", "mode"].contains(&key.as_str()))
                    {
                        return fail(format!("target.local.mounts[{at}] has no field `{key}`"));
                    }
                    let Some(host) = mount.get("host_path") else {
                        return fail(format!("target.local.mounts[{at}].host_path is required"));
                    };
                    if let Some(guest) = present(mount, "guest_path")
                        && Some(guest) != Some(host)
                    {
                        return fail(format!(
                            "target.local.mounts[{at}].guest_path must equal host_path: airlock does not remap paths"
                        ));
                    }
                    let path =
                        path_text(host, root, &format!("target.local.mounts[{at}].host_path"))?;
                    let mode = match present(mount, "mode") {
                        None => None,
                        Some(mode) => Some(parse_mode(
                            mode,
                            &format!("target.local.mounts[{at}].mode"),
                        )?),
                    };
                    roots.push(RootRequest {
                        workspace: DEFAULT_WORKSPACE.to_owned(),
                        path,
                        mode,
                    });
                }
                check_root_count(&roots)?;
                request.roots = Some(roots);
            }
            if let Some(workdir) = present(local, "workdir") {
                request.workdir = Some(path_text(workdir, root, "target.local.workdir")?);
            }
            if let Some(env) = present(local, "env") {
                request.env = parse_env(env)?;
            }
            if let Some(network) = present(local, "network_mode") {
                request.network = Some(Network::parse(network).map_err(OpenError)?);
            }
        }
        if let Some(ttl) = present(object, "session_ttl_ns") {
            let Some(ns) = ttl.as_u64().filter(|ns| *ns > 0) else {
                return fail("session_ttl_ns must be a positive integer");
            };
            request.ttl_ms = Some(ns.div_ceil(1_000_000));
        }
        if let Some(labels) = present(object, "labels") {
            request.labels = parse_labels(labels)?;
        }
        Ok(request)
    }
}

fn present<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    object.get(key).filter(|value| !value.is_null())
}

fn parse_mode(value: &Value, name: &str) -> Result<RootMode, OpenError> {
    match value.as_str() {
        Some("rw") => Ok(RootMode::Rw),
        Some("ro") => Ok(RootMode::Ro),
        _ => fail(format!("{name} must be \"rw\" or \"ro\"")),
    }
}

fn check_root_count(roots: &[RootRequest]) -> Result<(), OpenError> {
    if roots.is_empty() {
        return fail("a session needs at least one root");
    }
    if roots.len() > MAX_ROOTS {
        return fail(format!("a session has at most {MAX_ROOTS} roots"));
    }
    Ok(())
}

/// Roots as `"path"`, `"@workspace/path"` or `{workspace?, path?, mode?}`.
fn parse_roots(list: &[Value], root: &str, name: &str) -> Result<Vec<RootRequest>, OpenError> {
    let mut roots = Vec::new();
    for (at, item) in list.iter().enumerate() {
        let here = format!("{name}[{at}]");
        let request = match item {
            Value::String(_) => {
                let (workspace, path) = split_workspace(item, root, &here)?;
                RootRequest {
                    workspace,
                    path,
                    mode: None,
                }
            }
            Value::Object(object) => {
                if let Some(key) = object
                    .keys()
                    .find(|key| !["workspace", "path", "mode"].contains(&key.as_str()))
                {
                    return fail(format!("{here} has no field `{key}`"));
                }
                let workspace = match present(object, "workspace") {
                    None => DEFAULT_WORKSPACE.to_owned(),
                    Some(Value::String(name)) if is_workspace_name(name) => name.clone(),
                    Some(other) => {
                        return fail(format!("{here}.workspace: {other} is not a workspace name"));
                    }
                };
                let path = match present(object, "path") {
                    None => String::new(),
                    Some(path) => {
                        let (named, path) = split_workspace(path, root, &format!("{here}.path"))?;
                        if named != DEFAULT_WORKSPACE && named != workspace {
                            return fail(format!(
                                "{here}.path names another workspace than {here}.workspace"
                            ));
                        }
                        path
                    }
                };
                let mode = match present(object, "mode") {
                    None => None,
                    Some(mode) => Some(parse_mode(mode, &format!("{here}.mode"))?),
                };
                RootRequest {
                    workspace,
                    path,
                    mode,
                }
            }
            other => return fail(format!("{here} must be a path or an object, not {other}")),
        };
        roots.push(request);
    }
    check_root_count(&roots)?;
    Ok(roots)
}

/// A workspace name: `^[A-Za-z0-9_-]{1,64}$`.
pub fn is_workspace_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `@name/path` → (`name`, `path`); anything else is a path of the default
/// workspace.
fn split_workspace(value: &Value, root: &str, name: &str) -> Result<(String, String), OpenError> {
    let Some(text) = value.as_str() else {
        return fail(format!("{name} must be a string"));
    };
    if let Some(rest) = text.strip_prefix('@') {
        let (workspace, path) = rest.split_once('/').unwrap_or((rest, ""));
        if !is_workspace_name(workspace) {
            return fail(format!("{name}: `@{workspace}` is not a workspace name"));
        }
        let Some(path) = normalize_relative(path) else {
            return outside(format!("{name}: `{text}` leaves its workspace"));
        };
        return Ok((workspace.to_owned(), path));
    }
    Ok((DEFAULT_WORKSPACE.to_owned(), path_text(value, root, name)?))
}

/// A directory of the default workspace as a workspace-relative path: a
/// relative path as it is (normalized), an absolute one only inside `root`.
fn path_text(value: &Value, root: &str, name: &str) -> Result<String, OpenError> {
    let Some(text) = value.as_str() else {
        return fail(format!("{name} must be a string"));
    };
    if text.contains('\0') {
        return fail(format!("{name} contains a NUL byte"));
    }
    if text.starts_with('/') {
        let Some(inside) = crate::policy::normalize_relative(text.trim_start_matches('/'))
            .map(|path| format!("/{path}"))
        else {
            return fail(format!("{name}: `{text}` is not a path"));
        };
        let root = root.trim_end_matches('/');
        return match inside.strip_prefix(root) {
            Some("") => Ok(String::new()),
            Some(rest) if rest.starts_with('/') => Ok(rest[1..].to_owned()),
            _ => outside(format!("{name} `{text}` is outside every workspace")),
        };
    }
    match normalize_relative(text) {
        Some(path) => Ok(path),
        None => outside(format!("{name} `{text}` leaves its workspace")),
    }
}

fn parse_env(value: &Value) -> Result<BTreeMap<String, String>, OpenError> {
    let Some(object) = value.as_object() else {
        return fail("env must be an object of strings");
    };
    if object.len() > MAX_ENV {
        return fail(format!("env sets more than {MAX_ENV} variables"));
    }
    let mut env = BTreeMap::new();
    for (key, value) in object {
        let valid_key = !key.is_empty()
            && !key.as_bytes()[0].is_ascii_digit()
            && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid_key {
            return fail(format!("env: `{key}` is not a variable name"));
        }
        let Some(text) = value.as_str() else {
            return fail(format!("env.{key} must be a string"));
        };
        if text.len() > MAX_ENV_VALUE_BYTES || text.contains('\0') {
            return fail(format!("env.{key} is too long or contains a NUL byte"));
        }
        env.insert(key.clone(), text.to_owned());
    }
    Ok(env)
}

fn parse_labels(value: &Value) -> Result<BTreeMap<String, String>, OpenError> {
    let Some(object) = value.as_object() else {
        return fail("labels must be an object of strings");
    };
    if object.len() > MAX_LABELS {
        return fail(format!("a session has at most {MAX_LABELS} labels"));
    }
    let mut labels = BTreeMap::new();
    for (key, value) in object {
        let Some(text) = value.as_str() else {
            return fail(format!("labels.{key} must be a string"));
        };
        if key.is_empty()
            || key.len() > MAX_LABEL_BYTES
            || text.len() > MAX_LABEL_BYTES
            || key.chars().chain(text.chars()).any(char::is_control)
        {
            return fail(format!(
                "labels: keys and values are 1 to {MAX_LABEL_BYTES} bytes without control characters"
            ));
        }
        labels.insert(key.clone(), text.to_owned());
    }
    Ok(labels)
}

fn parse_worktree(value: &Value) -> Result<WorktreeRequest, OpenError> {
    let Some(object) = value.as_object() else {
        return fail("worktree must be an object {workspace, base?, branch?}");
    };
    if let Some(key) = object
        .keys()
        .find(|key| !["workspace", "base", "branch"].contains(&key.as_str()))
    {
        return fail(format!("worktree has no field `{key}`"));
    }
    let workspace = match present(object, "workspace") {
        None => DEFAULT_WORKSPACE.to_owned(),
        Some(Value::String(name)) if is_workspace_name(name) => name.clone(),
        Some(other) => {
            return fail(format!(
                "worktree.workspace: {other} is not a workspace name"
            ));
        }
    };
    let git_ref = |key: &str| -> Result<Option<String>, OpenError> {
        match present(object, key) {
            None => Ok(None),
            Some(Value::String(text)) if is_git_ref(text) => Ok(Some(text.clone())),
            Some(other) => fail(format!(
                "worktree.{key}: {other} is not a branch or commit name"
            )),
        }
    };
    Ok(WorktreeRequest {
        workspace,
        base: git_ref("base")?,
        branch: git_ref("branch")?,
    })
}

/// A name git takes as a ref or revision and no command line takes as an
/// option: no leading `-`, no `..`, no control or special characters.
pub fn is_git_ref(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 200
        && !text.starts_with('-')
        && !text.starts_with('/')
        && !text.ends_with('/')
        && !text.ends_with(".lock")
        && !text.contains("..")
        && !text.contains("@{")
        && !text.contains("//")
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'_' | b'-' | b'.'))
}

fn duration_ms(value: &Value, name: &str) -> Result<u64, OpenError> {
    let seconds = match value {
        Value::Number(number) => number.as_u64().filter(|s| *s > 0),
        Value::String(text) => parse_duration_seconds(text),
        _ => None,
    };
    match seconds.and_then(|s| s.checked_mul(1000)) {
        Some(ms) => Ok(ms),
        None => fail(format!(
            "{name} must be a positive number of seconds or a duration (`30m`, `2h`)"
        )),
    }
}

/// One root a session has, resolved: the workspace, the directory's real
/// workspace-relative path, and whether it may be written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Root {
    pub workspace: String,
    pub path: String,
    pub mode: RootMode,
}

/// What a session may do once clamped: its roots, working directory,
/// environment, network, limits and lifetimes. What the audit hashes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Authority {
    pub roots: Vec<Root>,
    /// Workspace-relative, inside one of the roots.
    pub workdir: String,
    pub env: BTreeMap<String, String>,
    pub network: Network,
    pub limits: Limits,
    pub ttl_ms: u64,
    pub idle_ttl_ms: u64,
    /// The git worktree the session works in (its first root), if any:
    /// its branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<String>,
}

impl Authority {
    /// The SHA-256 of its canonical JSON (RFC 8785): what the audit records.
    pub fn hash(&self) -> String {
        let value = serde_json::to_value(self).unwrap_or(Value::Null);
        crate::canonical::sha256_hex(crate::canonical::to_canonical_string(&value))
    }

    /// The root `path` (workspace-relative, resolved) lies in, if any.
    pub fn root_of(&self, path: &str) -> Option<&Root> {
        self.roots
            .iter()
            .filter(|root| root.workspace == DEFAULT_WORKSPACE && is_within(path, &root.path))
            // The deepest root decides (a read-only root inside a writable one).
            .max_by_key(|root| root.path.len())
    }

    /// The exec limits of the configuration, narrowed by the session's.
    pub fn exec_timeout_ms(&self, config_ms: u64) -> u64 {
        self.limits
            .exec_timeout_ms
            .map_or(config_ms, |ms| ms.min(config_ms))
    }
}

/// Whether workspace-relative `path` is `dir` or inside it.
pub fn is_within(path: &str, dir: &str) -> bool {
    dir.is_empty()
        || path == dir
        || path
            .strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Why a session cannot be opened as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A root outside every workspace, or writable where the workspace is not.
    RootNotAllowed(String),
    /// Anything else wrong with the request.
    Invalid(String),
}

/// What exceeds the profile's `sessions.auto`: opening asks a human.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Excess {
    pub reasons: Vec<String>,
}

/// The environment variables a session may set: `exec.env_allow` and
/// `sessions.env_allow`.
pub fn env_allowed(config: &Config, key: &str) -> bool {
    config.exec.env_allow.iter().any(|allowed| allowed == key)
        || config
            .sessions
            .env_allow
            .iter()
            .any(|allowed| allowed == key)
}

/// The configuration's network for commands, as a session sees it.
pub fn config_network(config: &Config) -> Network {
    if config.exec.network {
        Network::Full
    } else {
        Network::None
    }
}

/// The limits of the configuration, as a session's.
pub fn config_limits(config: &Config) -> Limits {
    let broker = &config.file_broker;
    Limits {
        max_read_bytes: Some(broker.max_read_bytes_hard),
        max_write_bytes: Some(broker.max_write_bytes_hard),
        max_inline_bytes: Some(broker.max_inline_bytes),
        max_grep_results: Some(broker.max_grep_results),
        max_glob_results: Some(broker.max_glob_results),
        max_scan_files: Some(broker.max_scan_files),
        max_scan_bytes: Some(broker.max_scan_bytes),
        max_changed_files: Some(broker.max_changed_files),
        max_edit_replacements: Some(broker.max_edit_replacements),
        exec_timeout_ms: config
            .exec
            .timeout_seconds()
            .map(|seconds| seconds.saturating_mul(1000)),
        max_output_bytes: Some(config.exec.max_output_bytes),
    }
}

/// `asked` narrowed to `cap` field by field: never raised.
pub fn narrow_limits(asked: &Limits, cap: &Limits) -> Limits {
    let min = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Limits {
        max_read_bytes: min(asked.max_read_bytes, cap.max_read_bytes),
        max_write_bytes: min(asked.max_write_bytes, cap.max_write_bytes),
        max_inline_bytes: min(asked.max_inline_bytes, cap.max_inline_bytes),
        max_grep_results: min(asked.max_grep_results, cap.max_grep_results),
        max_glob_results: min(asked.max_glob_results, cap.max_glob_results),
        max_scan_files: min(asked.max_scan_files, cap.max_scan_files),
        max_scan_bytes: min(asked.max_scan_bytes, cap.max_scan_bytes),
        max_changed_files: min(asked.max_changed_files, cap.max_changed_files),
        max_edit_replacements: min(asked.max_edit_replacements, cap.max_edit_replacements),
        exec_timeout_ms: min(asked.exec_timeout_ms, cap.exec_timeout_ms),
        max_output_bytes: min(asked.max_output_bytes, cap.max_output_bytes),
    }
}

/// What clamping made of a request: the authority, the variables dropped
/// (not allowed), and what exceeds the profile's allowance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clamped {
    pub authority: Authority,
    pub env_dropped: Vec<String>,
    pub excess: Excess,
}

/// Clamps `request` to `config` (and the profile's `sessions.auto`, if
/// any). `roots` are the request's roots as the broker resolved them on the
/// file system (real workspace-relative directories), in order, and
/// `workdir` the resolved working directory (`None`: the first root).
/// Writable roots need a writable workspace (only `default` is one here).
pub fn clamp(
    config: &Config,
    profile: Option<&str>,
    request: &OpenRequest,
    roots: Vec<Root>,
    workdir: Option<String>,
) -> Result<Clamped, Refusal> {
    if roots.is_empty() {
        return Err(Refusal::Invalid(
            "a session needs at least one root".to_owned(),
        ));
    }
    let workdir = workdir.unwrap_or_else(|| roots[0].path.clone());
    if !roots
        .iter()
        .any(|root| root.workspace == DEFAULT_WORKSPACE && is_within(&workdir, &root.path))
    {
        return Err(Refusal::RootNotAllowed(format!(
            "workdir `{workdir}` is in none of the session's roots"
        )));
    }
    let max_ttl = parse_duration_seconds(&config.sessions.max_ttl).unwrap_or(8 * 3600) * 1000;
    let max_idle = parse_duration_seconds(&config.sessions.idle_ttl).unwrap_or(1800) * 1000;
    let ttl_ms = request.ttl_ms.unwrap_or(max_ttl).min(max_ttl);
    let idle_ttl_ms = request.idle_ttl_ms.unwrap_or(max_idle).min(max_idle);
    let mut env = BTreeMap::new();
    let mut env_dropped = Vec::new();
    for (key, value) in &request.env {
        if env_allowed(config, key) {
            env.insert(key.clone(), value.clone());
        } else {
            env_dropped.push(key.clone());
        }
    }
    let cap = config_network(config);
    let network = request
        .network
        .clone()
        .unwrap_or_else(|| cap.clone())
        .narrowed_to(&cap);
    let limits = narrow_limits(&request.limits, &config_limits(config));
    let authority = Authority {
        roots,
        workdir,
        env,
        network,
        limits,
        ttl_ms,
        idle_ttl_ms,
        worktree: None,
    };
    let mut excess = excess_over_auto(config, profile, &authority);
    // A session's variables reach every command it runs, where a call's
    // own `env` asks each time: choosing them asks a human once.
    if !authority.env.is_empty() {
        excess.reasons.push(format!(
            "sets {} for every command",
            authority.env.keys().cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    Ok(Clamped {
        authority,
        env_dropped,
        excess,
    })
}

/// What of `authority` the profile's `sessions.auto` does not allow.
pub fn excess_over_auto(config: &Config, profile: Option<&str>, authority: &Authority) -> Excess {
    let mut excess = Excess::default();
    let Some(auto) = profile
        .and_then(|name| config.profiles.get(name))
        .and_then(|profile| profile.sessions.auto.as_ref())
    else {
        return excess;
    };
    let allowed_network = auto
        .network
        .as_ref()
        .and_then(|value| Network::parse(value).ok())
        .unwrap_or(Network::None);
    if !authority.network.within(&allowed_network) {
        excess.reasons.push(format!(
            "network {} beyond {}",
            authority.network.to_json(),
            allowed_network.to_json()
        ));
    }
    if let Some(ttl) = auto.ttl.as_deref().and_then(parse_duration_seconds)
        && authority.ttl_ms > ttl.saturating_mul(1000)
    {
        excess
            .reasons
            .push(format!("ttl {}s beyond {ttl}s", authority.ttl_ms / 1000));
    }
    let rw = authority
        .roots
        .iter()
        .filter(|root| root.mode == RootMode::Rw)
        .count() as u64;
    let rw_allowed = auto.rw_roots.unwrap_or(1);
    if rw > rw_allowed {
        excess
            .reasons
            .push(format!("{rw} writable roots beyond {rw_allowed}"));
    }
    excess
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_have_one_form() {
        assert!(is_session_id("ses-0123456789abcdef0123456789abcdef"));
        assert!(!is_session_id("ses-0123456789ABCDEF0123456789abcdef"));
        assert!(!is_session_id("ses-0123"));
        assert!(!is_session_id("0123456789abcdef0123456789abcdef"));
    }

    #[test]
    fn both_shapes_read_the_same() {
        let ours = OpenRequest::parse(
            &json!({"roots": [{"path": "src", "mode": "ro"}], "workdir": "src", "env": {"RUST_LOG": "debug"},
                    "network": "none", "ttl": 60}),
            "/w",
        )
        .unwrap();
        let spec = OpenRequest::parse(
            &json!({"target": {"local": {"mounts": [{"host_path": "/w/src", "mode": "ro"}], "workdir": "/w/src",
                    "env": {"RUST_LOG": "debug"}, "network_mode": "none"}}, "session_ttl_ns": 60_000_000_000u64}),
            "/w",
        )
        .unwrap();
        assert_eq!(ours, spec);
    }

    #[test]
    fn paths_outside_the_workspace_are_refused() {
        for args in [
            json!({"roots": ["../x"]}),
            json!({"roots": ["/etc"]}),
            json!({"workdir": "/w2"}),
            json!({"target": {"local": {"mounts": [{"host_path": "/"}]}}}),
        ] {
            let error = OpenRequest::parse(&args, "/w").unwrap_err();
            assert_eq!(error.code, ErrorCode::RootNotAllowed, "{args}: {error}");
        }
        assert!(OpenRequest::parse(&json!({"roots": []}), "/w").is_err());
        assert!(OpenRequest::parse(&json!({"rootz": []}), "/w").is_err());
        assert!(OpenRequest::parse(&json!({"env": {"A=B": "x"}}), "/w").is_err());
        assert!(
            OpenRequest::parse(
                &json!({"target": {"local": {"mounts": [{"host_path": "/w/a", "guest_path": "/src"}]}}}),
                "/w"
            )
            .is_err()
        );
    }

    #[test]
    fn clamping_never_raises() {
        let mut config = Config::default();
        config.sessions.max_ttl = "1h".to_owned();
        config.exec.env_allow = vec!["PATH".to_owned()];
        let request = OpenRequest::parse(
            &json!({"ttl": "9h", "network": "full", "env": {"PATH": "/bin", "LD_PRELOAD": "x"},
                    "limits": {"max_read_bytes": 999_999_999, "max_grep_results": 3}}),
            "/w",
        )
        .unwrap();
        let root = Root {
            workspace: DEFAULT_WORKSPACE.to_owned(),
            path: String::new(),
            mode: RootMode::Rw,
        };
        let clamped = clamp(&config, None, &request, vec![root], None).unwrap();
        let authority = clamped.authority;
        assert_eq!(authority.ttl_ms, 3_600_000);
        assert_eq!(authority.network, Network::None);
        assert_eq!(clamped.env_dropped, vec!["LD_PRELOAD".to_owned()]);
        assert_eq!(
            authority.limits.max_read_bytes,
            Some(config.file_broker.max_read_bytes_hard)
        );
        assert_eq!(authority.limits.max_grep_results, Some(3));
        assert!(authority.hash().starts_with("sha256:"));
        assert_eq!(authority.hash().len(), 71);
    }

    #[test]
    fn networks_narrow() {
        let allow = |d: &[&str]| Network::Allow(d.iter().map(|s| s.to_string()).collect());
        assert_eq!(Network::Full.narrowed_to(&Network::None), Network::None);
        assert_eq!(
            allow(&["a.com", "b.com"]).narrowed_to(&allow(&["b.com"])),
            allow(&["b.com"])
        );
        assert_eq!(
            allow(&["a.com"]).narrowed_to(&allow(&["b.com"])),
            Network::None
        );
        assert!(allow(&["a.com"]).within(&Network::Full));
        assert!(!Network::Full.within(&allow(&["a.com"])));
        assert!(Network::parse(&json!({"allow": ["-bad"]})).is_err());
    }

    #[test]
    fn within_is_by_components() {
        assert!(is_within("src/a.rs", "src"));
        assert!(is_within("src", "src"));
        assert!(!is_within("srcx/a.rs", "src"));
        assert!(is_within("anything", ""));
    }
}
