//! A tool call as every transport hands it to the broker and the policy.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tools::BuiltinTool;

/// Milliseconds since the Unix epoch. The core never reads a clock; callers pass
/// the time in.
pub type UnixMillis = u64;

/// Who an HTTP request comes from, once its bearer token checked out: put
/// into the request by the HTTP face, read by what serves the request (the
/// MCP endpoint binds its session to it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpPrincipal {
    pub user: Option<String>,
    pub token_name: String,
    /// The token holds the admin role.
    pub admin: bool,
}

/// Who is asking: the human user the agent acts for, and the agent itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Principal {
    /// The user id the call is made for (spec 001's requesting user).
    pub user: Option<String>,
    /// The agent's name (for example the MCP client's name).
    pub agent: Option<String>,
    /// The credential the face authenticated the call with (an HTTP bearer
    /// token's name), `None` where there is none (stdio, the CLI). Unlike the
    /// agent's name, the caller cannot choose it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The credential holds the admin role: it sees every approval, not only
    /// its own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub admin: bool,
}

impl Principal {
    /// Who owns what this principal creates (approvals, session grants): the
    /// user, the agent and the credential, as one string. Another principal
    /// naming the same session has another key, so it neither sees these
    /// approvals nor uses these grants.
    pub fn owner_key(&self) -> String {
        serde_json::to_string(&(&self.user, &self.agent, &self.token)).unwrap_or_default()
    }

    /// Whether this principal may see an approval whose owner key is
    /// `owner` (`None`: made before owners were recorded, nobody's).
    pub fn owns(&self, owner: Option<&str>) -> bool {
        self.admin || owner == Some(self.owner_key().as_str())
    }
}

/// MCP tool annotations that bear on risk, as an upstream server declares them.
/// Unknown keys are refused so that a misspelt hint is not silently ignored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolAnnotations {
    pub read_only_hint: Option<bool>,
    pub destructive_hint: Option<bool>,
    pub idempotent_hint: Option<bool>,
    pub open_world_hint: Option<bool>,
}

/// Where a tool comes from, which decides its default risk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolOrigin {
    /// One of airlock's own tools.
    Builtin(BuiltinTool),
    /// A tool of a configured upstream MCP server.
    Upstream {
        /// The upstream's configured name.
        upstream: Arc<str>,
        /// What the upstream says about the tool; trusted only where configured.
        annotations: Option<ToolAnnotations>,
    },
    /// Anything else: high risk.
    Unknown,
}

/// One call of one tool, with everything the policy may look at.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The tool's name as the agent called it.
    pub tool: String,
    /// The arguments, a JSON object.
    pub args: Value,
    pub origin: ToolOrigin,
    pub principal: Principal,
    pub session: Option<String>,
    /// The profile bound to the endpoint the call came through, if any.
    pub profile: Option<String>,
    pub tool_call_id: Option<String>,
    /// The caller's own correlation id (spec 000's `context_id`: MCP `_meta`,
    /// the HTTP body, `airlock call --context`), recorded with the call.
    pub context_id: Option<String>,
    /// When the call arrived; grants that expired before it do not apply.
    pub received_at: UnixMillis,
}

impl ToolCall {
    /// A call with no principal, session or profile, received at `received_at`.
    pub fn new(
        tool: impl Into<String>,
        args: Value,
        origin: ToolOrigin,
        received_at: UnixMillis,
    ) -> ToolCall {
        ToolCall {
            tool: tool.into(),
            args,
            origin,
            principal: Principal::default(),
            session: None,
            profile: None,
            tool_call_id: None,
            context_id: None,
            received_at,
        }
    }
}

/// The longest `context_id` accepted, in bytes.
pub const MAX_CONTEXT_ID_BYTES: usize = 256;

/// Checks a caller's `context_id`: at most [`MAX_CONTEXT_ID_BYTES`] bytes, not
/// empty, no control or direction-changing characters (it is shown and recorded
/// as given; see [`crate::display::is_unsafe`]).
pub fn check_context_id(context_id: &str) -> Result<(), ContextIdError> {
    if context_id.is_empty() {
        return Err(ContextIdError::Empty);
    }
    if context_id.len() > MAX_CONTEXT_ID_BYTES {
        return Err(ContextIdError::TooLong {
            bytes: context_id.len(),
        });
    }
    if context_id
        .chars()
        .any(|c| c.is_control() || crate::display::is_unsafe(c))
    {
        return Err(ContextIdError::Unsafe);
    }
    Ok(())
}

/// Why a `context_id` is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ContextIdError {
    #[error("context_id must not be empty")]
    Empty,
    #[error("context_id is {bytes} bytes, over the limit of {MAX_CONTEXT_ID_BYTES}")]
    TooLong { bytes: usize },
    #[error("context_id must not contain control or direction-changing characters")]
    Unsafe,
}
