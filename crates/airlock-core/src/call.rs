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
    /// Reading a resource of a configured upstream MCP server
    /// (`resource:<upstream>:<uri>`): a read, low risk unless a rule says
    /// otherwise.
    Resource {
        /// The upstream's configured name.
        upstream: Arc<str>,
    },
    /// An upstream server's `sampling/createMessage` (`sampling:<upstream>`):
    /// it spends the client's model, so it asks (medium risk) unless a rule
    /// says otherwise.
    Sampling {
        /// The upstream's configured name.
        upstream: Arc<str>,
    },
    /// Anything else: high risk.
    Unknown,
}

/// The name under which the policy sees the reading of resource `uri` of
/// `upstream`: `resource:<upstream>:<uri>` (rules name resources with
/// globs over it, `resource:docs:file:///srv/docs/*`).
pub fn resource_tool(upstream: &str, uri: &str) -> String {
    format!("resource:{upstream}:{uri}")
}

/// The upstream and URI of a [`resource_tool`] name.
pub fn resource_name(name: &str) -> Option<(&str, &str)> {
    let (upstream, uri) = name.strip_prefix("resource:")?.split_once(':')?;
    (!upstream.is_empty() && !uri.is_empty()).then_some((upstream, uri))
}

/// The name under which the policy sees `upstream`'s sampling requests.
pub fn sampling_tool(upstream: &str) -> String {
    format!("sampling:{upstream}")
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
    /// Who asked for the call on a chat platform (spec 001), where its
    /// confirmation goes.
    pub requester: Option<Requester>,
    /// When the call arrived; grants that expired before it do not apply.
    pub received_at: UnixMillis,
    /// The code-mode run the call was made from, if any (DESIGN §5.2).
    pub via: Option<Via>,
    /// Where the call finds its durable session besides a `session_id`
    /// argument (DESIGN §5.3); the broker resolves it.
    pub sessions: SessionHints,
    /// The authority of the session the call runs in, once the broker
    /// resolved it (DESIGN §5.3); `None`: the implicit default session.
    /// Faces leave it `None`; code mode gives a script's calls its run's.
    pub scope: Option<Arc<crate::session::Authority>>,
}

/// The sessions a face knows for a call: one the operator bound to the
/// endpoint (`--session`; the model cannot override it) and the last one
/// the connection opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionHints {
    pub bound: Option<String>,
    pub last: Option<String>,
}

/// A call a code-mode script made: its run, its place in the run, and the
/// profile the run's tool (`codemode_eval_<profile>`) binds beside the
/// endpoint's, so that the call answers to both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Via {
    pub run_id: String,
    pub seq: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub narrowed_to: Option<String>,
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
            requester: None,
            received_at,
            via: None,
            sessions: SessionHints::default(),
            scope: None,
        }
    }
}

/// The person a call was made for on a chat platform (spec 001: the bot
/// asks in the chat where the user asked it): the platform, the chat and
/// the platform's user id. Given by the caller (`requester` in the HTTP
/// body, `_meta["airlock/requester"]` over MCP, `--requester
/// channel:chat:user`), so it only routes a confirmation; who may decide
/// is still the configuration's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Requester {
    /// `telegram`, `slack` or `discord`.
    pub channel: String,
    /// The platform's chat or channel id.
    pub chat: String,
    /// The platform's user id.
    pub user: String,
}

/// The chat platforms a requester can name.
pub const CHAT_CHANNELS: [&str; 3] = ["telegram", "slack", "discord"];

impl Requester {
    /// A requester from its JSON form `{channel, chat, user}` (strings; a
    /// Telegram chat may be given as a number), checked.
    pub fn from_json(value: &Value) -> Result<Requester, String> {
        let Some(object) = value.as_object() else {
            return Err("requester must be an object {channel, chat, user}".to_owned());
        };
        if let Some(key) = object
            .keys()
            .find(|key| !["channel", "chat", "user"].contains(&key.as_str()))
        {
            return Err(format!("requester: unknown field {key:?}"));
        }
        let field = |name: &str| match object.get(name) {
            Some(Value::String(text)) => Ok(text.clone()),
            Some(Value::Number(number)) if name != "channel" => Ok(number.to_string()),
            Some(_) => Err(format!("requester.{name} must be a string")),
            None => Err(format!("requester.{name} is missing")),
        };
        Requester::new(&field("channel")?, &field("chat")?, &field("user")?)
    }

    /// A requester from `channel:chat:user`.
    pub fn parse(text: &str) -> Result<Requester, String> {
        let mut parts = text.splitn(3, ':');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(channel), Some(chat), Some(user)) => Requester::new(channel, chat, user),
            _ => Err("requester must be channel:chat:user (telegram:-100123:42)".to_owned()),
        }
    }

    /// Checks each part: a known chat platform, and ids of 1 to 64 letters,
    /// digits, `-` and `_` (every platform's ids are of that form; nothing
    /// else reaches a platform's API or a message).
    pub fn new(channel: &str, chat: &str, user: &str) -> Result<Requester, String> {
        if !CHAT_CHANNELS.contains(&channel) {
            return Err(format!(
                "requester.channel must be one of {}",
                CHAT_CHANNELS.join(", ")
            ));
        }
        let id = |text: &str| {
            (1..=64).contains(&text.len())
                && text
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if !id(chat) {
            return Err("requester.chat must be 1 to 64 letters, digits, - or _".to_owned());
        }
        if !id(user) {
            return Err("requester.user must be 1 to 64 letters, digits, - or _".to_owned());
        }
        Ok(Requester {
            channel: channel.to_owned(),
            chat: chat.to_owned(),
            user: user.to_owned(),
        })
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
