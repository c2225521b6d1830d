//! Agent hooks (DESIGN §9.1): the events Claude Code, Codex and Gemini CLI
//! send to a hook command before and after each of their own tool calls,
//! read into one shape ([`AgentEvent`]), mapped onto airlock's tools
//! ([`Mapped`]), and airlock's verdict written back in each agent's own
//! output format ([`render`]).
//!
//! Nothing here does IO: the CLI reads the event, the broker decides.
//!
//! The agents' contracts, as their references give them:
//! - Claude Code: <https://code.claude.com/docs/en/hooks> (events
//!   `PreToolUse`, `PermissionRequest`, `PostToolUse`; `tool_use_id`;
//!   `hookSpecificOutput.permissionDecision`; exit 2 blocks `PreToolUse`
//!   but is not honoured for `PermissionRequest`; timeouts in seconds,
//!   600 by default; a hook that fails or times out lets the tool run).
//! - Codex: <https://developers.openai.com/codex/hooks> and the source of
//!   `openai/codex` (`codex-rs/hooks/src/engine/output_parser.rs`,
//!   `codex-rs/core/src/tools/hook_names.rs`): shell tools arrive as `Bash`
//!   with `{command}` only, edits as `apply_patch` with the patch text in
//!   `tool_input.command`; outputs reject unknown fields, a bare
//!   `permissionDecision: allow` and `ask` are unsupported (the hook is
//!   then ignored and the tool runs), a deny needs a non-empty reason, and
//!   exit 2 with a message on stderr blocks.
//! - Gemini CLI: <https://geminicli.com/docs/hooks/reference> and
//!   `google-gemini/gemini-cli` (`packages/core/src/hooks/hookRunner.ts`,
//!   `packages/core/src/tools/mcp-tool.ts`): events `BeforeTool` and
//!   `AfterTool`, no call id, `decision: allow | deny`, JSON on stdout read
//!   whatever the exit code, timeouts in milliseconds (60,000 by default),
//!   MCP tools named `mcp_<server>_<tool>` with `mcp_context` naming them
//!   unambiguously.
//!
//! Every agent lets the tool run when its hook fails, so airlock's own
//! failures are always written as explicit denials ([`HookVerdict::Deny`]).

pub mod install;
mod output;

use std::path::{Component, Path, PathBuf};

use serde_json::{Map, Value, json};

pub use output::{HookOutput, HookVerdict, render, unreadable};

/// An agent airlock answers hooks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Agent {
    ClaudeCode,
    Codex,
    Gemini,
}

impl Agent {
    pub const ALL: [Agent; 3] = [Agent::ClaudeCode, Agent::Codex, Agent::Gemini];

    /// `claude-code`, `codex`, `gemini`.
    pub fn name(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "claude-code",
            Agent::Codex => "codex",
            Agent::Gemini => "gemini",
        }
    }

    pub fn from_name(name: &str) -> Option<Agent> {
        Agent::ALL.into_iter().find(|agent| agent.name() == name)
    }

    /// How long the agent waits for a hook when its entry names no
    /// timeout, in seconds.
    pub fn default_timeout_seconds(self) -> u64 {
        match self {
            Agent::ClaudeCode | Agent::Codex => 600,
            Agent::Gemini => 60,
        }
    }
}

/// When the hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Before the tool runs (`PreToolUse`, `BeforeTool`): allow or deny.
    Pre,
    /// The agent is about to ask its user (`PermissionRequest`).
    Permission,
    /// After the tool ran (`PostToolUse`, `AfterTool`): verify, record.
    Post,
}

/// One hook event, whatever agent sent it.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentEvent {
    pub agent: Agent,
    pub phase: Phase,
    /// The event's name as the agent sent it (`PreToolUse` …).
    pub event_name: String,
    pub session_id: Option<String>,
    /// The agent's id of the tool call (Claude Code and Codex on pre and
    /// post events; never from Gemini CLI, nor on `PermissionRequest`).
    pub tool_use_id: Option<String>,
    /// The agent's working directory.
    pub cwd: Option<String>,
    pub tool_name: String,
    pub tool_input: Value,
    /// What the tool returned (post events).
    pub tool_response: Option<Value>,
    /// Gemini CLI's `mcp_context` for an MCP tool.
    pub mcp_context: Option<Value>,
}

/// Why an event could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookInputError {
    #[error("the hook input is not JSON: {0}")]
    NotJson(String),
    #[error("the hook input is not a JSON object")]
    NotAnObject,
    #[error("the hook input has no `{0}`")]
    Missing(&'static str),
    #[error("`{field}` must be {what}")]
    Wrong {
        field: &'static str,
        what: &'static str,
    },
    #[error("{agent} sends no hook event named `{event}` that airlock answers")]
    UnknownEvent { agent: &'static str, event: String },
}

/// The largest event airlock reads (an agent's `Write` carries the whole
/// file).
pub const MAX_EVENT_BYTES: usize = 32 << 20;

impl AgentEvent {
    /// Reads `agent`'s event from the bytes of its standard input.
    pub fn parse(agent: Agent, input: &[u8]) -> Result<AgentEvent, HookInputError> {
        let value: Value = serde_json::from_slice(input)
            .map_err(|error| HookInputError::NotJson(error.to_string()))?;
        let Value::Object(object) = value else {
            return Err(HookInputError::NotAnObject);
        };
        let text = |field: &'static str| -> Result<Option<String>, HookInputError> {
            match object.get(field) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(text)) => Ok(Some(text.clone())),
                Some(_) => Err(HookInputError::Wrong {
                    field,
                    what: "a string",
                }),
            }
        };
        let event_name =
            text("hook_event_name")?.ok_or(HookInputError::Missing("hook_event_name"))?;
        let phase =
            match (agent, event_name.as_str()) {
                (Agent::ClaudeCode | Agent::Codex, "PreToolUse")
                | (Agent::Gemini, "BeforeTool") => Phase::Pre,
                (Agent::ClaudeCode | Agent::Codex, "PermissionRequest") => Phase::Permission,
                (Agent::ClaudeCode | Agent::Codex, "PostToolUse")
                | (Agent::Gemini, "AfterTool") => Phase::Post,
                _ => {
                    return Err(HookInputError::UnknownEvent {
                        agent: agent.name(),
                        event: event_name,
                    });
                }
            };
        let tool_name = text("tool_name")?.ok_or(HookInputError::Missing("tool_name"))?;
        if tool_name.is_empty() {
            return Err(HookInputError::Missing("tool_name"));
        }
        let tool_input = match object.get("tool_input") {
            Some(Value::Object(input)) => Value::Object(input.clone()),
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(_) => {
                return Err(HookInputError::Wrong {
                    field: "tool_input",
                    what: "an object",
                });
            }
        };
        Ok(AgentEvent {
            agent,
            phase,
            event_name,
            session_id: text("session_id")?,
            tool_use_id: text("tool_use_id")?,
            cwd: text("cwd")?,
            tool_name,
            tool_input,
            tool_response: object
                .get("tool_response")
                .filter(|value| !value.is_null())
                .cloned(),
            mcp_context: object
                .get("mcp_context")
                .filter(|value| value.is_object())
                .cloned(),
        })
    }

    /// The id that ties this call's pre and post events together: the
    /// agent's own id where it sends one, else (Gemini CLI) one made of the
    /// session, the tool and its input, which both events carry.
    pub fn call_key(&self) -> String {
        match &self.tool_use_id {
            Some(id) => format!("{}:{id}", self.agent.name()),
            None => {
                let material = json!({
                    "session": self.session_id,
                    "tool": self.tool_name,
                    "input": self.tool_input,
                });
                let hash =
                    crate::canonical::sha256_hex(crate::canonical::to_canonical_string(&material));
                format!(
                    "{}:{}",
                    self.agent.name(),
                    hash.trim_start_matches("sha256:")
                )
            }
        }
    }
}

/// What an agent's tool call is, in airlock's terms.
#[derive(Debug, Clone, PartialEq)]
pub enum Mapped {
    /// One of airlock's built-in tools with its arguments (paths relative
    /// to the workspace root where they lie inside it).
    Builtin {
        tool: crate::tools::BuiltinTool,
        args: Value,
    },
    /// Several edits of one file, one after the other (Claude Code's
    /// `MultiEdit`): each as `edit_file` would make it.
    Edits { path: String, edits: Vec<Edit> },
    /// A change to a file airlock cannot compute exactly (Claude Code's
    /// `NotebookEdit`): decided as a write of `path`, shown as `what`.
    OpaqueWrite { path: String, what: String },
    /// A tool of an MCP server the agent talks to.
    Upstream {
        server: String,
        tool: String,
        args: Value,
    },
    /// A tool airlock does not know: decided as an unknown tool (high risk).
    Unknown { name: String, args: Value },
}

/// One edit of [`Mapped::Edits`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    pub old_string: String,
    pub new_string: String,
    pub replace_all: bool,
}

/// Why an event's tool input does not make a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{tool}: {message}")]
pub struct MapError {
    pub tool: String,
    pub message: String,
}

/// Maps `event`'s tool call onto airlock's tools. Relative paths are the
/// agent's, from its working directory; every path is made relative to the
/// workspace `root` (canonical) where it lies inside it, and left absolute
/// (for the sandbox to refuse) where it does not.
pub fn map(event: &AgentEvent, root: &Path) -> Result<Mapped, MapError> {
    use crate::tools::BuiltinTool as T;
    let input = &event.tool_input;
    let cwd = event
        .cwd
        .as_deref()
        .map(PathBuf::from)
        .filter(|cwd| cwd.is_absolute())
        .unwrap_or_else(|| root.to_path_buf());
    let fail = |message: String| MapError {
        tool: event.tool_name.clone(),
        message,
    };
    let string = |field: &str| -> Result<String, MapError> {
        match input.get(field) {
            Some(Value::String(text)) => Ok(text.clone()),
            Some(_) => Err(fail(format!("`{field}` must be a string"))),
            None => Err(fail(format!("`{field}` is missing"))),
        }
    };
    let optional = |field: &str| -> Result<Option<String>, MapError> {
        match input.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => Ok(Some(text.clone())),
            Some(_) => Err(fail(format!("`{field}` must be a string"))),
        }
    };
    let flag = |field: &str| -> Result<bool, MapError> {
        match input.get(field) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(flag)) => Ok(*flag),
            Some(_) => Err(fail(format!("`{field}` must be true or false"))),
        }
    };
    let path = |raw: &str| workspace_path(root, &cwd, raw);
    let builtin = |tool: T, args: Value| Ok(Mapped::Builtin { tool, args });
    let exec = |command: String, dir: Option<String>| {
        let mut args = Map::new();
        args.insert("command".to_owned(), Value::String(command));
        let dir = match dir {
            Some(dir) => Some(path(&dir)),
            None => Some(path(".")),
        };
        if let Some(dir) = dir.filter(|dir| !dir.is_empty() && dir != ".") {
            args.insert("cwd".to_owned(), Value::String(dir));
        }
        builtin(T::Exec, Value::Object(args))
    };
    // The directory a search or listing looks in (Gemini CLI calls it
    // `dir_path`, Claude Code `path`).
    let dir = || match event.agent {
        Agent::Gemini => optional("dir_path"),
        _ => optional("path"),
    };
    let searched = |tool: T| {
        let mut args = json!({"pattern": string("pattern")?});
        if let Some(dir) = dir()? {
            args["path"] = Value::String(path(&dir));
        }
        builtin(tool, args)
    };
    let name = event.tool_name.as_str();
    match (event.agent, name) {
        (Agent::ClaudeCode, "Edit") => builtin(
            T::EditFile,
            json!({
                "path": path(&string("file_path")?),
                "old_string": string("old_string")?,
                "new_string": string("new_string")?,
                "replace_all": flag("replace_all")?,
            }),
        ),
        (Agent::ClaudeCode, "MultiEdit") => {
            let Some(Value::Array(items)) = input.get("edits") else {
                return Err(fail("`edits` must be a list".to_owned()));
            };
            let mut edits = Vec::with_capacity(items.len());
            for item in items {
                let text = |field: &str| match item.get(field) {
                    Some(Value::String(text)) => Ok(text.clone()),
                    _ => Err(fail(format!("each edit needs `{field}` (a string)"))),
                };
                edits.push(Edit {
                    old_string: text("old_string")?,
                    new_string: text("new_string")?,
                    replace_all: item
                        .get("replace_all")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                });
            }
            if edits.is_empty() {
                return Err(fail("`edits` is empty".to_owned()));
            }
            Ok(Mapped::Edits {
                path: path(&string("file_path")?),
                edits,
            })
        }
        (Agent::ClaudeCode, "Write") | (Agent::Gemini, "write_file") => builtin(
            T::WriteFile,
            json!({"path": path(&string("file_path")?), "content": string("content")?}),
        ),
        (Agent::ClaudeCode, "NotebookEdit") => {
            let mode = optional("edit_mode")?.unwrap_or_else(|| "replace".to_owned());
            let cell = optional("cell_id")?.unwrap_or_else(|| "(first)".to_owned());
            let source = optional("new_source")?.unwrap_or_default();
            Ok(Mapped::OpaqueWrite {
                path: path(&string("notebook_path")?),
                what: format!("NotebookEdit {mode} cell {cell}:\n{source}"),
            })
        }
        (Agent::ClaudeCode, "Bash") | (Agent::Codex, "Bash") => exec(string("command")?, None),
        (Agent::Gemini, "run_shell_command") => exec(string("command")?, optional("dir_path")?),
        (Agent::ClaudeCode, "Read") | (Agent::Gemini, "read_file") => {
            builtin(T::ReadFile, json!({"path": path(&string("file_path")?)}))
        }
        (Agent::ClaudeCode, "Grep") | (Agent::Gemini, "grep_search" | "search_file_content") => {
            searched(T::Grep)
        }
        (Agent::ClaudeCode, "Glob") | (Agent::Gemini, "glob") => searched(T::Glob),
        (Agent::ClaudeCode, "LS") | (Agent::Gemini, "list_directory") => builtin(
            T::ListDir,
            json!({"path": path(dir()?.as_deref().unwrap_or("."))}),
        ),
        (Agent::Gemini, "replace") => builtin(
            T::EditFile,
            json!({
                "path": path(&string("file_path")?),
                "old_string": string("old_string")?,
                "new_string": string("new_string")?,
                "replace_all": flag("allow_multiple")?,
            }),
        ),
        (Agent::Codex, "apply_patch") => {
            let patch = string("command")?;
            let relative = workspace_path(root, &cwd, ".");
            builtin(
                T::ApplyPatch,
                json!({"patch": rebase_patch(&patch, &relative)}),
            )
        }
        (Agent::Gemini, _) if event.mcp_context.is_some() => {
            let context = event.mcp_context.as_ref().unwrap_or(&Value::Null);
            match (
                context.get("server_name").and_then(Value::as_str),
                context.get("tool_name").and_then(Value::as_str),
            ) {
                (Some(server), Some(tool)) => Ok(Mapped::Upstream {
                    server: server.to_owned(),
                    tool: tool.to_owned(),
                    args: input.clone(),
                }),
                _ => Ok(Mapped::Unknown {
                    name: name.to_owned(),
                    args: input.clone(),
                }),
            }
        }
        (Agent::ClaudeCode | Agent::Codex, _) if name.starts_with("mcp__") => {
            match name["mcp__".len()..].split_once("__") {
                Some((server, tool)) if !server.is_empty() && !tool.is_empty() => {
                    Ok(Mapped::Upstream {
                        server: server.to_owned(),
                        tool: tool.to_owned(),
                        args: input.clone(),
                    })
                }
                _ => Ok(Mapped::Unknown {
                    name: name.to_owned(),
                    args: input.clone(),
                }),
            }
        }
        _ => Ok(Mapped::Unknown {
            name: name.to_owned(),
            args: input.clone(),
        }),
    }
}

/// The input to hand back to `agent` for its `tool` so that it writes
/// `after` where the file held `before` (an approver's edited version), in
/// the tool's own shape: a whole-file write, or one edit of the whole
/// text. `None` for a tool that takes none.
pub fn edited_input(
    agent: &str,
    tool: &str,
    input: &Value,
    before: Option<&str>,
    after: &str,
) -> Option<Value> {
    let mut edited = input.as_object()?.clone();
    match (agent, tool) {
        ("claude-code", "Write") | ("gemini", "write_file") => {
            edited.insert("content".to_owned(), Value::String(after.to_owned()));
        }
        ("claude-code", "Edit" | "MultiEdit") => {
            let before = before.filter(|before| !before.is_empty())?;
            let file_path = edited.get("file_path")?.clone();
            if tool == "MultiEdit" {
                edited = Map::new();
                edited.insert("file_path".to_owned(), file_path);
                edited.insert(
                    "edits".to_owned(),
                    json!([{"old_string": before, "new_string": after, "replace_all": false}]),
                );
            } else {
                edited.insert("old_string".to_owned(), Value::String(before.to_owned()));
                edited.insert("new_string".to_owned(), Value::String(after.to_owned()));
                edited.insert("replace_all".to_owned(), Value::Bool(false));
            }
        }
        ("gemini", "replace") => {
            let before = before.filter(|before| !before.is_empty())?;
            edited.insert("old_string".to_owned(), Value::String(before.to_owned()));
            edited.insert("new_string".to_owned(), Value::String(after.to_owned()));
            edited.insert("allow_multiple".to_owned(), Value::Bool(false));
        }
        _ => return None,
    }
    Some(Value::Object(edited))
}

/// `raw` (relative to `cwd`, or absolute) relative to `root` when it lies
/// inside it (`""` for the root itself); else the absolute path, lexically
/// normalized, which the sandbox refuses.
pub fn workspace_path(root: &Path, cwd: &Path, raw: &str) -> String {
    let joined = if Path::new(raw).is_absolute() {
        PathBuf::from(raw)
    } else {
        cwd.join(raw)
    };
    let mut normal = PathBuf::from("/");
    for component in joined.components() {
        match component {
            Component::Normal(part) => normal.push(part),
            Component::ParentDir => {
                normal.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    match normal.strip_prefix(root) {
        Ok(inside) => inside.to_string_lossy().into_owned(),
        Err(_) => normal.to_string_lossy().into_owned(),
    }
}

/// A Codex patch whose paths are relative to `dir` (the agent's working
/// directory, root-relative), with its paths made relative to the root.
fn rebase_patch(patch: &str, dir: &str) -> String {
    if dir.is_empty() || dir.starts_with('/') {
        return patch.to_owned();
    }
    let mut out = String::with_capacity(patch.len() + 64);
    for line in patch.split_inclusive('\n') {
        let rebased = [
            "*** Add File: ",
            "*** Update File: ",
            "*** Delete File: ",
            "*** Move to: ",
        ]
        .iter()
        .find_map(|header| {
            line.strip_prefix(header).map(|rest| {
                let (path, end) = match rest.strip_suffix('\n') {
                    Some(path) => (path, "\n"),
                    None => (rest, ""),
                };
                if path.trim().starts_with('/') {
                    format!("{header}{path}{end}")
                } else {
                    format!("{header}{dir}/{}{end}", path.trim())
                }
            })
        });
        match rebased {
            Some(line) => out.push_str(&line),
            None => out.push_str(line),
        }
    }
    out
}

#[cfg(test)]
mod tests;
