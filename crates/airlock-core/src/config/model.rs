//! The typed model of `airlock.yaml` (DESIGN §3).
//!
//! Every struct denies unknown keys and fills missing ones from its `Default`,
//! which holds the seed values of DESIGN §3. The JSON Schema printed by
//! `airlock config schema` is derived from these types, so their doc comments are
//! the schema's descriptions.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::risk::Risk;

/// The whole configuration file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
#[schemars(title = "airlock.yaml")]
pub struct Config {
    pub workspace: WorkspaceConfig,
    pub file_broker: FileBrokerConfig,
    pub security: SecurityConfig,
    /// Profile applied to endpoints that bind none; unset means no profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_profile: Option<String>,
    /// Named tool profiles (spec 004). Names match `^[A-Za-z0-9_]{1,32}$`.
    pub profiles: BTreeMap<String, ProfileConfig>,
    /// MCP servers whose tools airlock gates, listed as `<name>__<tool>`.
    pub upstreams: Vec<UpstreamConfig>,
    pub auth: AuthConfig,
    pub audit: AuditConfig,
    pub notify: NotifyConfig,
    pub http: HttpConfig,
    pub mcp: McpConfig,
    pub approvals: ApprovalsConfig,
    pub tls: TlsConfig,
    /// Chat approvers (DESIGN §7.1); each connects outbound only.
    pub channels: ChannelsConfig,
    /// The shell tool (DESIGN §5.1).
    pub exec: ExecConfig,
    /// Code mode: the `codemode_eval` tool (DESIGN §5.2, spec 004).
    pub codemode: CodemodeConfig,
    /// Where the state lives: SQLite in the state dir, or PostgreSQL shared
    /// by several instances (DESIGN §7.2).
    pub store: StoreConfig,
    /// Metrics for operators' tools (DESIGN §8.1).
    pub telemetry: TelemetryConfig,
    /// Durable sessions that scope authority (DESIGN §5.3, spec 003).
    pub sessions: SessionsConfig,
}

/// How long sessions live and what they may ask for (DESIGN §5.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SessionsConfig {
    /// The longest absolute lifetime a session gets (`8h`); a longer `ttl`
    /// is clamped to it.
    pub max_ttl: String,
    /// How long a session lives without a call (`30m`); a longer
    /// `idle_ttl` is clamped to it.
    pub idle_ttl: String,
    /// What a root outside every workspace gets: `deny` (`root_not_allowed`)
    /// or `ask` (the opening becomes a proposal).
    pub new_roots: NewRoots,
    /// Environment variables a session may set for its commands, beside
    /// `exec.env_allow`; any other is dropped (and named in the answer).
    pub env_allow: Vec<String>,
    /// Sessions one principal may have open at once.
    pub max_open_per_principal: u64,
}

impl Default for SessionsConfig {
    fn default() -> SessionsConfig {
        SessionsConfig {
            max_ttl: "8h".to_owned(),
            idle_ttl: "30m".to_owned(),
            new_roots: NewRoots::Deny,
            env_allow: Vec::new(),
            max_open_per_principal: 64,
        }
    }
}

/// What a session root outside every workspace gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NewRoots {
    #[default]
    Deny,
    Ask,
}

/// What airlock tells monitoring tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// `GET /metrics` (Prometheus text) on the HTTP listener, for admin
    /// tokens; `serve --metrics-addr` serves it on a loopback port of its
    /// own either way.
    pub metrics: bool,
    /// OpenTelemetry traces and logs of every call, exported over OTLP.
    pub otlp: OtlpConfig,
}

impl Default for TelemetryConfig {
    fn default() -> TelemetryConfig {
        TelemetryConfig {
            metrics: true,
            otlp: OtlpConfig::default(),
        }
    }
}

/// Where traces and logs go (OTLP/HTTP with JSON bodies).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct OtlpConfig {
    /// The collector's base URL (`http://127.0.0.1:4318`): traces are
    /// POSTed to `/v1/traces`, logs to `/v1/logs`. Null: off.
    pub endpoint: Option<String>,
}

/// Where the sandbox is and where airlock keeps its own state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct WorkspaceConfig {
    /// Sandbox root, relative to the `--workspace` directory; canonicalized at start.
    pub root: String,
    /// Approvals database, audit log, blobs and snapshots; relative to `root`.
    /// Never readable or writable through airlock's tools.
    pub state_dir: String,
}

/// Limits of the file tools (specs 000 and 003).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FileBrokerConfig {
    /// `false` turns the file tools off (spec 000): they are neither listed nor
    /// callable.
    pub enabled: bool,
    /// How long a proposal may wait for a decision, in seconds.
    pub hitl_ttl_seconds: u64,
    /// Bytes `read_file` returns when the call names no `max_bytes`.
    pub max_read_bytes_default: u64,
    /// Bytes `read_file` never exceeds, whatever the call asks.
    pub max_read_bytes_hard: u64,
    /// Largest content a write may produce.
    pub max_write_bytes_hard: u64,
    /// Output larger than this becomes a blob under `output_mode: auto`.
    pub max_inline_bytes: u64,
    /// Diff previews are cut at this many characters.
    pub diff_preview_max_chars: u64,
    pub absolute_paths: AbsolutePaths,
    pub follow_symlinks: FollowSymlinks,
    /// New files may be created only in these directories or at the root level.
    pub allowlisted_create_dirs: Vec<String>,
    /// Paths matching these globs are never read or written.
    pub deny_path_globs: Vec<String>,
    pub max_grep_results: u64,
    pub max_glob_results: u64,
    /// Files one grep or glob may look at; past it they stop with `truncated`
    /// and `truncated_reason: max_scan_files` (spec 003).
    pub max_scan_files: u64,
    /// Bytes one grep may read; past it it stops with `truncated` and
    /// `truncated_reason: max_scan_bytes` (spec 003).
    pub max_scan_bytes: u64,
    /// Files one patch may change; larger patches are refused (spec 003).
    pub max_changed_files: u64,
    /// Replacements one edit may make; more are refused (spec 003).
    pub max_edit_replacements: u64,
    /// Patch formats apply_patch accepts (spec 003).
    pub allowed_patch_formats: Vec<PatchFormatName>,
    /// Spec 000's switch. Only `true` is accepted: airlock audits every call.
    pub audit_log_enabled: bool,
    /// `false` refuses to read or write a regular file with more than one
    /// hard link (it may be another name of a file outside the workspace or
    /// of a protected one). Protected paths are refused either way.
    pub allow_hardlinks: bool,
}

/// A patch format apply_patch may accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PatchFormatName {
    /// `*** Begin Patch` (Codex's apply_patch).
    V4a,
    /// `---`/`+++`/`@@` (`diff -u`, `git diff`).
    Unified,
}

/// What to do with an absolute path argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AbsolutePaths {
    /// Every absolute path is refused.
    Reject,
    /// Absolute paths inside the workspace root are accepted.
    WithinRoot,
}

/// How symbolic links inside the workspace are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FollowSymlinks {
    /// A path through any symlink is refused.
    Deny,
    /// Symlinks are followed while they stay inside the root.
    WithinRootOnly,
    /// Symlinks are followed anywhere.
    Allow,
}

/// Who may use write tools and how approvals work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SecurityConfig {
    /// `null`: no user restriction; `[]`: write tools disabled; a list: only these users.
    pub write_tool_allowlist: Option<Vec<String>>,
    /// `false` lets write-class calls from allowed users through without asking.
    pub write_tool_confirmation: bool,
    pub hitl: HitlConfig,
}

/// Human-in-the-loop gates (spec 002).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct HitlConfig {
    /// `false` lets every call that would ask through (still audited).
    pub enabled: bool,
    /// Seconds to wait for a decision when neither rule nor risk policy says.
    pub default_timeout: u64,
    pub approval_mode: ApprovalMode,
    /// What to do when an MCP client cannot be asked.
    pub elicitation_fallback: ElicitationFallback,
    /// Pending approvals allowed in the workspace; more are `rate_limited`.
    pub max_pending: u64,
    /// Pending approvals allowed per session.
    pub max_pending_per_session: u64,
    /// Evaluated in order; the first rule whose tools and conditions all match wins.
    pub rules: Vec<RuleConfig>,
    pub policies: RiskPolicies,
}

/// Whether a call that needs approval waits for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalMode {
    /// The call blocks until a decision or the timeout.
    Wait,
    /// The call returns `hitl_required` at once.
    Defer,
}

/// What happens to a call needing approval when the MCP client cannot be asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ElicitationFallback {
    /// `wait` while an approver channel is live for the workspace (a
    /// `watch`, a connected web UI, a configured webhook), else `deny`.
    Auto,
    Deny,
    Allow,
    Defer,
    Wait,
}

/// One HITL rule (spec 002).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Tool names or globs (`*`, `?`, `[...]`, `{a,b}`).
    pub tools: Vec<String>,
    /// All must match; a missing parameter does not match.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ConditionConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk: Option<Risk>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_approval: Option<bool>,
    /// Seconds to wait for a decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// `deny` refuses matching calls outright.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<RuleDecision>,
}

/// The verdict a rule may impose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RuleDecision {
    Deny,
}

/// A condition on one parameter; exactly one of `equals`, `matches`, `glob`, `in`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConditionConfig {
    /// Dotted path into the arguments (`options.mode`, `paths.0`).
    pub param: String,
    /// The parameter equals this JSON value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equals: Option<Value>,
    /// The parameter is a string matching this regex at its start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matches: Option<String>,
    /// The parameter is a string matching this path glob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glob: Option<String>,
    /// The parameter equals one of these JSON values.
    #[serde(default, rename = "in", skip_serializing_if = "Option::is_none")]
    pub in_: Option<Vec<Value>>,
}

/// The policy for each risk level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RiskPolicies {
    pub low: RiskPolicyConfig,
    pub medium: RiskPolicyConfig,
    pub high: RiskPolicyConfig,
    pub critical: RiskPolicyConfig,
}

/// How calls of one risk level are handled. A key left out takes that level's
/// built-in default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RiskPolicyConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub require_approval: Option<bool>,
    /// Seconds to wait for a decision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// Whether an approver may choose "always allow".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_skip: Option<bool>,
    /// Whether a decision must carry a reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub require_reason: Option<bool>,
    /// Roles or user ids that may decide; empty means any approver.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approvers: Option<Vec<String>>,
}

/// A named profile (spec 004): precedence deny > ask > allow.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ProfileConfig {
    /// When present, tools matching none of these globs are denied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowlist: Option<Vec<String>>,
    /// Tools matching these globs are denied.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub denylist: Vec<String>,
    /// Tools matching these globs need approval.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub asklist: Vec<String>,
    /// Overrides `security.hitl.elicitation_fallback` for this profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elicitation_fallback: Option<ElicitationFallback>,
    /// A session the operator binds to the profile's endpoints: every call
    /// runs in it, whatever `session_id` the model names (DESIGN §5.3).
    /// Its fields are those of `session_open`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    pub session: Option<serde_json::Value>,
    /// What the profile's `session_open` calls may get without a human.
    #[serde(skip_serializing_if = "ProfileSessions::is_empty")]
    pub sessions: ProfileSessions,
}

/// A profile's session allowances.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ProfileSessions {
    /// The authority a session may be opened with at once: `network`
    /// (`none`, `full` or `{allow: [domains]}`), `ttl`, `rw` (how many
    /// writable roots). Beyond it, opening asks. Unset: everything the
    /// configuration allows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto: Option<SessionAuto>,
}

impl ProfileSessions {
    fn is_empty(&self) -> bool {
        self.auto.is_none()
    }
}

/// What a session may be opened with without a human.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SessionAuto {
    /// The widest network (`none` unless set).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Value>")]
    pub network: Option<serde_json::Value>,
    /// The longest absolute lifetime (`2h`); longer asks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
    /// How many writable roots (1 unless set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rw_roots: Option<u64>,
}

/// An MCP server airlock starts (stdio) or connects to (streamable HTTP).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Prefix of its tools (`<name>__<tool>`); `^[A-Za-z0-9_-]{1,32}$`, no `__`.
    pub name: String,
    /// Program to start for a stdio server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Extra environment variables for the stdio server.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Working directory of the stdio server, relative to the workspace root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// URL of a streamable-HTTP server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Extra HTTP headers for the streamable-HTTP server; `${VAR}` in a
    /// value is the environment variable's value when connecting.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// How long a request to it may take (`30s`, `2m`; default 120 s), after
    /// which the call fails with `upstream_unavailable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Whether the server's tool annotations may lower a tool's default risk.
    #[serde(default)]
    pub trusted_annotations: bool,
    /// `false`: its tools and prompts are offered under their own names
    /// (rules still see `<name>__<tool>`); one upstream at most, and none
    /// of its names may be one of airlock's own tools.
    #[serde(default = "prefixed", skip_serializing_if = "is_prefixed")]
    pub prefix: bool,
}

fn prefixed() -> bool {
    true
}

fn is_prefixed(prefix: &bool) -> bool {
    *prefix
}

impl UpstreamConfig {
    /// `timeout` in seconds (`None` when unset or when it does not parse,
    /// which the configuration check refuses).
    pub fn timeout_seconds(&self) -> Option<u64> {
        self.timeout.as_deref().and_then(parse_duration_seconds)
    }

    /// The upstream of `upstreams` offered without a prefix, if any.
    pub fn unprefixed(upstreams: &[UpstreamConfig]) -> Option<&UpstreamConfig> {
        upstreams.iter().find(|upstream| !upstream.prefix)
    }
}

/// Bearer tokens for the HTTP API.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    pub tokens: Vec<TokenConfig>,
}

/// One bearer token, stored as the SHA-256 of the token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    pub name: String,
    /// Hex SHA-256 of the token (64 hex digits, optionally prefixed `sha256:`).
    pub sha256: String,
    pub roles: Vec<Role>,
    /// The user the token belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Submit calls and read their own results.
    Agent,
    /// Decide approvals the policy lets it decide.
    Approver,
    /// Everything, including the audit log.
    Admin,
}

/// The audit log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// JSONL file, relative to the workspace root. Never readable or writable
    /// through airlock's tools.
    pub path: String,
    /// Environment variable holding an HMAC key; when set, the chain is keyed.
    pub hmac_key_env: Option<String>,
    /// Signed checkpoints of the log's Merkle tree (DESIGN §8.1).
    pub checkpoints: CheckpointsConfig,
    /// Every record, as it is appended, to a SIEM (spec 000 phase 2).
    pub ship: ShipConfig,
}

/// Where a server ships the audit log: each record once, in order, from a
/// cursor kept in the store (nothing lost or sent twice across restarts).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ShipConfig {
    /// RFC 5424 syslog: `udp://HOST:PORT`, `tcp://HOST:PORT` (octet
    /// counting) or `tls://HOST:PORT` (RFC 5425, checked against the
    /// platform roots and `tls.ca_file`).
    pub syslog: Option<String>,
    /// An HTTP(S) endpoint that receives batches: a JSON array of records.
    pub http: Option<String>,
}

/// Signed tree heads: made every `every` records and when a server stops,
/// signed with `<state_dir>/audit.key`, kept in the store, written to
/// `<state_dir>/audit.checkpoint` and POSTed to `webhook`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct CheckpointsConfig {
    /// A checkpoint every this many records; 0 turns checkpoints off.
    pub every: u64,
    /// A URL that receives each new checkpoint: a JSON POST with its size,
    /// root, key and the signed note (`event: audit_checkpoint`).
    pub webhook: Option<String>,
    /// The log's name in every checkpoint (a schema-less URL such as
    /// `example.com/airlock/repo`); null: made once for the log and kept in
    /// the store.
    pub origin: Option<String>,
}

impl Default for CheckpointsConfig {
    fn default() -> CheckpointsConfig {
        CheckpointsConfig {
            every: 1000,
            webhook: None,
            origin: None,
        }
    }
}

/// Notifications of new approvals.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct NotifyConfig {
    pub webhooks: Vec<WebhookConfig>,
}

/// A URL that receives a JSON POST for each approval event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    pub url: String,
    #[serde(default = "default_webhook_events")]
    pub events: Vec<WebhookEvent>,
}

/// Approval events a webhook may receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WebhookEvent {
    Created,
    Decided,
    Expired,
}

/// Who may reach the HTTP listener from a browser (DNS rebinding, CSRF).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// `Host` values accepted beyond loopback names and addresses, the bound
    /// address and the `--public-url` host: `name` (any port) or `name:port`.
    pub allowed_hosts: Vec<String>,
    /// Browser origins (`scheme://host[:port]`) allowed to call the API beyond
    /// the listener's own; every other cross-origin request is refused (403).
    pub allowed_origins: Vec<String>,
}

/// How approvals and their grants behave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ApprovalsConfig {
    /// How long an "always allow" grant lasts unless the approval names
    /// another time (`--for`): `30s`, `10m`, `8h`, `7d`.
    pub grant_ttl: String,
    /// Spec 001: only the user who made a call may decide it (implied when
    /// `security.write_tool_allowlist` lists users).
    pub same_user: bool,
}

impl Default for ApprovalsConfig {
    fn default() -> ApprovalsConfig {
        ApprovalsConfig {
            grant_ttl: "8h".to_owned(),
            same_user: false,
        }
    }
}

/// Outbound TLS (https upstreams, webhooks, chat APIs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// PEM certificates trusted beside the platform's roots (a private CA),
    /// relative to the workspace root.
    pub ca_file: Option<String>,
}

/// The chat channels; none runs unless configured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ChannelsConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub telegram: Option<TelegramConfig>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slack: Option<SlackConfig>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discord: Option<DiscordConfig>,
}

/// A platform user mapped to an airlock user: its name (role approver) or
/// the name with roles.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ChatUser {
    Name(String),
    WithRoles(ChatUserRoles),
}

/// An airlock user with the roles a chat decision is taken with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChatUserRoles {
    pub user: String,
    #[serde(default = "approver_role")]
    pub roles: Vec<Role>,
}

fn approver_role() -> Vec<Role> {
    vec![Role::Approver]
}

impl ChatUser {
    /// The airlock user.
    pub fn user(&self) -> &str {
        match self {
            ChatUser::Name(user) => user,
            ChatUser::WithRoles(entry) => &entry.user,
        }
    }

    /// The roles the user decides with (approver unless listed).
    pub fn roles(&self) -> Vec<Role> {
        match self {
            ChatUser::Name(_) => approver_role(),
            ChatUser::WithRoles(entry) => entry.roles.clone(),
        }
    }
}

/// Telegram (Bot API, long polling).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TelegramConfig {
    /// Environment variable holding the bot token.
    pub token_env: String,
    /// Bot API server; requests go to `{api_url}/bot{token}/{method}`.
    pub api_url: String,
    /// Chat ids approvals go to when the requester names no chat.
    pub chats: Vec<i64>,
    /// Telegram user id -> airlock user.
    pub users: BTreeMap<String, ChatUser>,
    /// Seconds a confirmation waits in the chat (capped by the risk
    /// policy's timeout), then it is denied as expired.
    pub timeout: u64,
}

impl Default for TelegramConfig {
    fn default() -> TelegramConfig {
        TelegramConfig {
            token_env: "AIRLOCK_TELEGRAM_TOKEN".to_owned(),
            api_url: "https://api.telegram.org".to_owned(),
            chats: Vec::new(),
            users: BTreeMap::new(),
            timeout: 60,
        }
    }
}

/// Slack (Socket Mode and the Web API).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SlackConfig {
    /// Environment variable holding the bot token (`xoxb-…`).
    pub bot_token_env: String,
    /// Environment variable holding the app-level token (`xapp-…`) Socket
    /// Mode connects with.
    pub app_token_env: String,
    /// Web API base.
    pub api_url: String,
    /// Channel ids approvals go to when the requester names none.
    pub channels: Vec<String>,
    /// Slack user id -> airlock user.
    pub users: BTreeMap<String, ChatUser>,
    /// Seconds a confirmation waits (capped by the risk policy's timeout).
    pub timeout: u64,
}

impl Default for SlackConfig {
    fn default() -> SlackConfig {
        SlackConfig {
            bot_token_env: "AIRLOCK_SLACK_BOT_TOKEN".to_owned(),
            app_token_env: "AIRLOCK_SLACK_APP_TOKEN".to_owned(),
            api_url: "https://slack.com/api".to_owned(),
            channels: Vec::new(),
            users: BTreeMap::new(),
            timeout: 60,
        }
    }
}

/// Discord (Gateway and REST).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct DiscordConfig {
    /// Environment variable holding the bot token.
    pub token_env: String,
    /// REST API base.
    pub api_url: String,
    /// Gateway URL; unset: asked from the API (`GET /gateway/bot`).
    pub gateway_url: Option<String>,
    /// Channel ids approvals go to when the requester names none.
    pub channels: Vec<String>,
    /// Discord user id -> airlock user.
    pub users: BTreeMap<String, ChatUser>,
    /// Seconds a confirmation waits (capped by the risk policy's timeout).
    pub timeout: u64,
}

impl Default for DiscordConfig {
    fn default() -> DiscordConfig {
        DiscordConfig {
            token_env: "AIRLOCK_DISCORD_TOKEN".to_owned(),
            api_url: "https://discord.com/api/v10".to_owned(),
            gateway_url: None,
            channels: Vec::new(),
            users: BTreeMap::new(),
            timeout: 60,
        }
    }
}

impl ApprovalsConfig {
    /// `grant_ttl` in milliseconds (`None` when it does not parse, which the
    /// configuration check refuses).
    pub fn grant_ttl_ms(&self) -> Option<u64> {
        parse_duration_seconds(&self.grant_ttl).map(|seconds| seconds.saturating_mul(1000))
    }
}

/// `30s`, `10m`, `2h`, `7d` or plain seconds, in seconds; `None` for anything
/// else, zero included.
pub fn parse_duration_seconds(text: &str) -> Option<u64> {
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((at, _)) => text.split_at(at),
        None => (text, "s"),
    };
    let amount: u64 = digits.parse().ok()?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return None,
    };
    amount.checked_mul(seconds).filter(|seconds| *seconds > 0)
}

/// The MCP face.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    /// The longest JSON-RPC message (one stdio line) airlock reads, in bytes;
    /// a longer one is refused without being held in memory.
    pub max_message_bytes: u64,
}

impl Default for McpConfig {
    fn default() -> McpConfig {
        McpConfig {
            max_message_bytes: 16 * 1024 * 1024,
        }
    }
}

fn default_webhook_events() -> Vec<WebhookEvent> {
    vec![WebhookEvent::Created]
}

impl Default for WorkspaceConfig {
    fn default() -> WorkspaceConfig {
        WorkspaceConfig {
            root: ".".to_owned(),
            state_dir: ".airlock".to_owned(),
        }
    }
}

impl Default for FileBrokerConfig {
    fn default() -> FileBrokerConfig {
        FileBrokerConfig {
            enabled: true,
            hitl_ttl_seconds: 120,
            max_read_bytes_default: 32_000,
            max_read_bytes_hard: 131_072,
            max_write_bytes_hard: 524_288,
            max_inline_bytes: 16_384,
            diff_preview_max_chars: 8_000,
            absolute_paths: AbsolutePaths::Reject,
            follow_symlinks: FollowSymlinks::WithinRootOnly,
            allowlisted_create_dirs: ["src/", "lib/", "tests/", "docs/", "scripts/"]
                .map(String::from)
                .to_vec(),
            deny_path_globs: ["**/.env", "**/*.pem", "**/*id_rsa*", "**/secrets/**"]
                .map(String::from)
                .to_vec(),
            max_grep_results: 100,
            max_glob_results: 1_000,
            max_scan_files: 200_000,
            max_scan_bytes: 2_147_483_648,
            max_changed_files: 200,
            max_edit_replacements: 1_000,
            allowed_patch_formats: vec![PatchFormatName::V4a, PatchFormatName::Unified],
            audit_log_enabled: true,
            allow_hardlinks: false,
        }
    }
}

impl Default for SecurityConfig {
    fn default() -> SecurityConfig {
        SecurityConfig {
            write_tool_allowlist: None,
            write_tool_confirmation: true,
            hitl: HitlConfig::default(),
        }
    }
}

impl Default for HitlConfig {
    fn default() -> HitlConfig {
        HitlConfig {
            enabled: true,
            default_timeout: 60,
            approval_mode: ApprovalMode::Wait,
            elicitation_fallback: ElicitationFallback::Auto,
            max_pending: 100,
            max_pending_per_session: 10,
            rules: Vec::new(),
            policies: RiskPolicies::default(),
        }
    }
}

impl Default for RiskPolicies {
    fn default() -> RiskPolicies {
        RiskPolicies {
            low: RiskPolicyConfig::builtin(Risk::Low),
            medium: RiskPolicyConfig::builtin(Risk::Medium),
            high: RiskPolicyConfig::builtin(Risk::High),
            critical: RiskPolicyConfig::builtin(Risk::Critical),
        }
    }
}

impl RiskPolicyConfig {
    /// The built-in policy of a risk level, as DESIGN §3 writes it.
    pub fn builtin(risk: Risk) -> RiskPolicyConfig {
        match risk {
            Risk::Low => RiskPolicyConfig {
                require_approval: Some(false),
                ..RiskPolicyConfig::default()
            },
            Risk::Medium => RiskPolicyConfig {
                require_approval: Some(true),
                timeout: Some(120),
                allow_skip: Some(true),
                ..RiskPolicyConfig::default()
            },
            Risk::High => RiskPolicyConfig {
                require_approval: Some(true),
                timeout: Some(60),
                allow_skip: Some(false),
                ..RiskPolicyConfig::default()
            },
            Risk::Critical => RiskPolicyConfig {
                require_approval: Some(true),
                timeout: Some(30),
                allow_skip: Some(false),
                require_reason: Some(true),
                approvers: Some(vec!["admin".to_owned()]),
            },
        }
    }
}

impl RiskPolicies {
    /// The configured policy of one level.
    pub fn get(&self, risk: Risk) -> &RiskPolicyConfig {
        match risk {
            Risk::Low => &self.low,
            Risk::Medium => &self.medium,
            Risk::High => &self.high,
            Risk::Critical => &self.critical,
        }
    }
}

impl Default for AuditConfig {
    fn default() -> AuditConfig {
        AuditConfig {
            path: ".airlock/audit.jsonl".to_owned(),
            hmac_key_env: Some("AIRLOCK_AUDIT_KEY".to_owned()),
            checkpoints: CheckpointsConfig::default(),
            ship: ShipConfig::default(),
        }
    }
}

/// `text` with each `${NAME}` replaced by `lookup(NAME)`. `NAME` is
/// `[A-Za-z_][A-Za-z0-9_]*`; `$$` is a lone `$`. An unset variable, an
/// unclosed `${` or a bad name is an error naming it (never the values).
pub fn expand_env(text: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
            continue;
        }
        let Some(inner) = after.strip_prefix('{') else {
            out.push('$');
            rest = after;
            continue;
        };
        let Some(close) = inner.find('}') else {
            return Err("`${` without its closing `}`".to_owned());
        };
        let name = &inner[..close];
        let valid = name
            .chars()
            .next()
            .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!("`${{{name}}}` is not an environment variable name"));
        }
        match lookup(name) {
            Some(value) => out.push_str(&value),
            None => return Err(format!("environment variable {name} is not set")),
        }
        rest = &inner[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod expand_tests {
    use super::expand_env;

    #[test]
    fn variables_expand_and_bad_references_are_named() {
        let lookup = |name: &str| (name == "TOKEN").then(|| "s3cret".to_owned());
        assert_eq!(
            expand_env("Bearer ${TOKEN}", lookup).as_deref(),
            Ok("Bearer s3cret")
        );
        assert_eq!(expand_env("a $$ b $x", lookup).as_deref(), Ok("a $ b $x"));
        assert_eq!(
            expand_env("${MISSING}", lookup),
            Err("environment variable MISSING is not set".to_owned())
        );
        assert_eq!(
            expand_env("${TOKEN", lookup),
            Err("`${` without its closing `}`".to_owned())
        );
        assert_eq!(
            expand_env("${1X}", lookup),
            Err("`${1X}` is not an environment variable name".to_owned())
        );
    }
}

/// Where approvals, grants, snapshots, events and the audit chain live
/// (DESIGN §3, §7.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `null`: SQLite in the state dir (one host). `postgres://user@host/db`:
    /// every instance with this URL shares one PostgreSQL database. `${VAR}`
    /// is replaced from the environment (a password never needs to be in the
    /// file). A change takes a restart.
    pub url: Option<String>,
    /// Connections an instance keeps open to PostgreSQL at most.
    pub pool_size: u64,
    /// How long a stopped instance's claims (waiting calls, applies) stand
    /// before another instance takes them over (`10s`).
    pub lease: String,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            url: None,
            pool_size: 16,
            lease: "10s".to_owned(),
        }
    }
}

impl StoreConfig {
    /// `lease` in seconds (`None` when it does not parse, which the
    /// configuration check refuses).
    pub fn lease_seconds(&self) -> Option<u64> {
        parse_duration_seconds(&self.lease)
    }
}

/// The shell tool `exec` (DESIGN §5.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ExecConfig {
    /// `false`: no `exec` tool.
    pub enabled: bool,
    /// What a command no rule matches gets.
    pub default: ExecDecision,
    /// How an asking command is shown before approval: `overlay` runs it in
    /// a copy-on-write overlay and shows its file changes as a diff;
    /// `rerun` shows it without a diff and runs it after approval; `none`
    /// shows only the command.
    pub preview: ExecPreview,
    /// `auto`: Landlock and/or namespaces, refusing to run without either;
    /// `none`: no sandbox, and every command asks.
    pub sandbox: ExecSandbox,
    /// Whether commands may use the network (a rule may allow it for its
    /// commands).
    pub network: bool,
    /// The environment variables a command sees (all others are removed).
    pub env_allow: Vec<String>,
    /// How long a command may run (`30s`, `2m`).
    pub timeout: String,
    /// Output kept per stream; more is cut and marked truncated.
    pub max_output_bytes: u64,
    /// Processes a command may have at once (itself and what it starts).
    pub max_processes: u64,
    /// Memory a command may use: its processes together where airlock can
    /// make a memory cgroup, and each process's data in any case.
    pub max_memory_bytes: u64,
    /// Rules for the simple commands a command line is made of; among the
    /// rules that match a command the strictest wins, and across a command
    /// line's commands the strictest wins (deny > ask > allow). They come
    /// before a curated list that allows common read-only commands.
    pub rules: Vec<ExecRuleConfig>,
}

impl Default for ExecConfig {
    fn default() -> Self {
        ExecConfig {
            enabled: true,
            default: ExecDecision::Ask,
            preview: ExecPreview::Overlay,
            sandbox: ExecSandbox::Auto,
            network: false,
            env_allow: ["PATH", "HOME", "LANG", "LC_ALL", "TERM", "USER"]
                .map(str::to_owned)
                .to_vec(),
            timeout: "120s".to_owned(),
            max_output_bytes: 1_048_576,
            max_processes: 512,
            max_memory_bytes: 8 << 30,
            rules: Vec::new(),
        }
    }
}

impl ExecConfig {
    /// `timeout` in seconds (`None` when it does not parse, which the
    /// configuration check refuses).
    pub fn timeout_seconds(&self) -> Option<u64> {
        parse_duration_seconds(&self.timeout)
    }
}

/// Code mode (DESIGN §5.2): scripts that call tools as
/// `codemode.<tool>(args)`, each call gated like any other. The limits
/// bind every run; a script cannot raise them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct CodemodeConfig {
    /// `false`: no `codemode_eval` tool.
    pub enabled: bool,
    /// Profiles also offered as `codemode_eval_<profile>`, whose calls
    /// answer to the endpoint's profile and this one both.
    pub profile_tools: Vec<String>,
    /// CPU time of one run (`5s`).
    pub cpu: String,
    /// Wall time of one run, not counting time waiting for a human (`60s`).
    pub wall: String,
    /// Memory the engine may allocate in one run.
    pub memory_bytes: u64,
    /// Native stack the script's calls may use.
    pub stack_bytes: u64,
    /// The longest script.
    pub max_source_bytes: u64,
    /// The longest result (its JSON).
    pub max_result_bytes: u64,
    /// Console output kept per run; beyond, lines are dropped and the run
    /// says so.
    pub max_console_bytes: u64,
    /// Tool calls per run.
    pub max_calls: u32,
    /// Tool calls under way at once in one run.
    pub max_in_flight: u32,
    /// Runs at once in this process; more are refused (`rate_limited`).
    pub max_concurrent_runs: u32,
}

impl Default for CodemodeConfig {
    fn default() -> Self {
        CodemodeConfig {
            enabled: true,
            profile_tools: Vec::new(),
            cpu: "5s".to_owned(),
            wall: "60s".to_owned(),
            memory_bytes: 64 << 20,
            stack_bytes: 1 << 20,
            max_source_bytes: 256 << 10,
            max_result_bytes: 1 << 20,
            max_console_bytes: 64 << 10,
            max_calls: 256,
            max_in_flight: 8,
            max_concurrent_runs: 2,
        }
    }
}

impl CodemodeConfig {
    /// `cpu` in seconds (`None` when it does not parse).
    pub fn cpu_seconds(&self) -> Option<u64> {
        parse_duration_seconds(&self.cpu)
    }

    /// `wall` in seconds (`None` when it does not parse).
    pub fn wall_seconds(&self) -> Option<u64> {
        parse_duration_seconds(&self.wall)
    }
}

/// What a command gets.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ExecDecision {
    Allow,
    Ask,
    Deny,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExecPreview {
    Overlay,
    Rerun,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExecSandbox {
    Auto,
    None,
}

/// A rule for simple commands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecRuleConfig {
    /// The first words of the command: each a word, `*` for any one word,
    /// or a list of alternatives (`[cargo, [build, test]]`).
    pub prefix: Vec<ExecToken>,
    pub decision: ExecDecision,
    /// The risk of a command this rule decides (default: low for allow,
    /// medium for ask, high for deny).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk: Option<Risk>,
    /// Whether its commands may use the network.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub network: bool,
    /// Commands this rule must match; checked when the configuration loads.
    #[serde(default, rename = "match", skip_serializing_if = "Vec::is_empty")]
    pub matches: Vec<String>,
    /// Commands this rule must not match; checked when the configuration
    /// loads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_match: Vec<String>,
}

/// One word of a rule's prefix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ExecToken {
    /// A word, or `*` for any one word.
    Word(String),
    /// Any of these words.
    Alternatives(Vec<String>),
}
