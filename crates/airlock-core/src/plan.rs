//! Plans: what an approval applies once it is approved. Plain data, so one
//! process can make a plan and another apply it later.
//!
//! A [`Plan`] is either a change to files ([`ChangePlan`], made by one of the
//! built-in write tools) or a call to another MCP server ([`UpstreamCall`]).
//! A [`ChangePlan`] is a list of [`FileChange`]s, one per path: the hash the
//! file must have (or its absence) and what it becomes (new bytes, or
//! absence). A write or edit is one change; a delete is one change to
//! absence; a move is two (the source to absence, the target from absence,
//! marked `moved_from`); a patch is any number. The plan carries one unified
//! diff over all its files and the hash of that diff; a human approves the
//! diff. Making a plan and applying it is `airlock-fs`'s work; this module
//! only says what one is.

use serde::{Deserialize, Serialize};

use crate::canonical::sha256_hex;
use crate::tools::BuiltinTool;

/// What an approval applies once approved. Its serde form is the one stored
/// with the approval (`kind` names the variant).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Plan {
    /// `write_file`: one file written whole.
    Write(ChangePlan),
    /// `edit_file`: one file's text replaced.
    Edit(ChangePlan),
    /// `apply_patch`: any number of files.
    Patch(ChangePlan),
    /// `delete_file`: one file removed.
    Delete(ChangePlan),
    /// `move_file`: one file moved (two changes).
    Move(ChangePlan),
    /// A call to a tool of another MCP server, forwarded as it was approved.
    Upstream(UpstreamCall),
    /// `exec`: the file changes its command made in a preview (its output
    /// in the plan's report), applied without running it again.
    Exec(ChangePlan),
    /// `exec` that could not be previewed (it needs the network, or
    /// `exec.preview` says so): the call, run once approved, its file
    /// changes applied through the change engine then.
    ExecRun(ExecRun),
    /// A code-mode run's file changes (DESIGN §5.2): what its write calls
    /// staged, as one change over every file, applied without running the
    /// script again. The report holds the run (its id, the script's hash,
    /// the calls, the console) and what the script read, which must not
    /// have changed either.
    Code(ChangePlan),
    /// A call an agent makes with its own tool, asked about by its hook
    /// (DESIGN §9.1): approving it lets the agent go ahead, and the agent
    /// makes the change itself; airlock keeps what it showed (the change
    /// it computed, if the call changes files) to check the agent's work
    /// afterwards and to undo it.
    Agent(AgentPlan),
    /// A `session_open` asking for more than its profile's `sessions.auto`
    /// allows (DESIGN §5.3): the session, opened once approved.
    Session(SessionPlan),
}

/// A session to open once approved: its id (chosen when proposed, so that
/// opening it twice is not possible), the authority shown, and why it asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionPlan {
    pub session_id: String,
    pub authority: crate::session::Authority,
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_dropped: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// What exceeds the allowance.
    pub beyond: Vec<String>,
}

impl Plan {
    /// The plan of a built-in write tool's `change`; `None` for a tool that
    /// changes nothing.
    pub fn of_builtin(tool: BuiltinTool, change: ChangePlan) -> Option<Plan> {
        Some(match tool {
            BuiltinTool::WriteFile => Plan::Write(change),
            BuiltinTool::EditFile => Plan::Edit(change),
            BuiltinTool::ApplyPatch => Plan::Patch(change),
            BuiltinTool::DeleteFile => Plan::Delete(change),
            BuiltinTool::MoveFile => Plan::Move(change),
            BuiltinTool::Exec => Plan::Exec(change),
            _ => return None,
        })
    }

    /// The name of the variant, as its stored `kind` says it.
    pub const fn kind(&self) -> &'static str {
        match self {
            Plan::Write(_) => "write",
            Plan::Edit(_) => "edit",
            Plan::Patch(_) => "patch",
            Plan::Delete(_) => "delete",
            Plan::Move(_) => "move",
            Plan::Upstream(_) => "upstream",
            Plan::Exec(_) => "exec",
            Plan::ExecRun(_) => "exec_run",
            Plan::Code(_) => "code",
            Plan::Agent(_) => "agent",
            Plan::Session(_) => "session",
        }
    }

    /// The kind of plan a built-in tool makes; `None` for one that changes
    /// nothing.
    pub const fn kind_of(tool: BuiltinTool) -> Option<&'static str> {
        match tool {
            BuiltinTool::WriteFile => Some("write"),
            BuiltinTool::EditFile => Some("edit"),
            BuiltinTool::ApplyPatch => Some("patch"),
            BuiltinTool::DeleteFile => Some("delete"),
            BuiltinTool::MoveFile => Some("move"),
            BuiltinTool::Exec => Some("exec"),
            _ => None,
        }
    }

    /// The change to files, unless this is an upstream call.
    pub fn change(&self) -> Option<&ChangePlan> {
        match self {
            Plan::Write(change)
            | Plan::Edit(change)
            | Plan::Patch(change)
            | Plan::Delete(change)
            | Plan::Move(change)
            | Plan::Exec(change)
            | Plan::Code(change) => Some(change),
            Plan::Agent(agent) => Some(&agent.change),
            Plan::Upstream(_) | Plan::ExecRun(_) | Plan::Session(_) => None,
        }
    }

    /// The same kind of plan with `change` in place of its own (an
    /// approver's edited version); `None` for an upstream call.
    pub fn with_change(&self, change: ChangePlan) -> Option<Plan> {
        Some(match self {
            Plan::Write(_) => Plan::Write(change),
            Plan::Edit(_) => Plan::Edit(change),
            Plan::Patch(_) => Plan::Patch(change),
            Plan::Delete(_) => Plan::Delete(change),
            Plan::Move(_) => Plan::Move(change),
            Plan::Exec(_) => Plan::Exec(change),
            Plan::Code(_) => Plan::Code(change),
            Plan::Agent(agent) if agent.editable() => Plan::Agent(AgentPlan {
                change,
                ..agent.clone()
            }),
            Plan::Upstream(_) | Plan::ExecRun(_) | Plan::Agent(_) | Plan::Session(_) => {
                return None;
            }
        })
    }

    /// The upstream call, if this is one.
    pub fn upstream(&self) -> Option<&UpstreamCall> {
        match self {
            Plan::Upstream(call) => Some(call),
            _ => None,
        }
    }

    /// Whether this is a call to another MCP server (only the process that
    /// holds its connection can carry it out).
    pub fn is_upstream(&self) -> bool {
        matches!(self, Plan::Upstream(_))
    }
}

/// An agent's own tool call, as its hook showed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentPlan {
    /// `claude-code`, `codex`, `gemini`.
    pub agent: String,
    /// The agent's name for the tool (`Edit`, `Bash`, `apply_patch` …).
    pub tool: String,
    /// What ties the agent's events for this call together.
    pub call_key: String,
    /// The change to files the call makes, as airlock computed it (no
    /// changes for a call that writes no file, or one airlock cannot
    /// compute).
    pub change: ChangePlan,
    /// Whether `change` is exactly what the agent's tool writes, so the
    /// files can be checked against it afterwards.
    pub exact: bool,
    /// The agent's input for the tool, as it sent it (from which an
    /// approver's edited version is handed back to it).
    #[serde(default)]
    pub input: serde_json::Value,
}

impl AgentPlan {
    /// Whether the agent takes an approver's edited version of this call
    /// back as its tool's input (a one-file write or edit of Claude Code or
    /// Gemini CLI; Codex reserves a rewritten input on its permission
    /// event, so none of its calls is editable).
    pub fn editable(&self) -> bool {
        self.exact
            && self.change.changes.len() == 1
            && matches!(
                (self.agent.as_str(), self.tool.as_str()),
                ("claude-code", "Write" | "Edit" | "MultiEdit")
                    | ("gemini", "write_file" | "replace")
            )
    }
}

/// An `exec` call to run once approved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecRun {
    /// The call's arguments (`command` or `argv`, `cwd`, `env` …).
    pub args: serde_json::Value,
    /// Whether it may use the network.
    pub network: bool,
    /// Why it was not previewed.
    pub unpreviewed: String,
    /// The authority of the session it was proposed in (DESIGN §5.3): it
    /// runs under it once approved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<crate::session::Authority>,
}

/// One call to another MCP server: the upstream's name, the tool as that
/// server names it, and the arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamCall {
    pub upstream: String,
    /// The tool as the server names it; for a resource read, the URI.
    pub tool: String,
    pub args: serde_json::Value,
    /// What is asked of the server (a tool call unless said).
    #[serde(default, skip_serializing_if = "UpstreamRequest::is_tool_call")]
    pub request: UpstreamRequest,
}

impl UpstreamCall {
    /// A `tools/call` of `tool` on `upstream`.
    pub fn tool(upstream: &str, tool: &str, args: serde_json::Value) -> UpstreamCall {
        UpstreamCall {
            upstream: upstream.to_owned(),
            tool: tool.to_owned(),
            args,
            request: UpstreamRequest::ToolCall,
        }
    }
}

/// The request an [`UpstreamCall`] makes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamRequest {
    /// `tools/call`.
    #[default]
    ToolCall,
    /// `resources/read` of the URI in `tool` (its arguments `{uri}`).
    ReadResource,
    /// The server's `sampling/createMessage` (its parameters in `args`), put
    /// to the client whose call the server was serving.
    Sample,
}

impl UpstreamRequest {
    fn is_tool_call(&self) -> bool {
        *self == UpstreamRequest::ToolCall
    }
}

/// One file's transition in a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    /// The requested path, normalized, root-relative.
    pub path: String,
    /// What `path` resolved to when the plan was made.
    pub resolved_path: String,
    /// Hash of the content the change replaces; `None`: the file must not exist.
    pub before_hash: Option<String>,
    /// The new content; `None`: the file is removed.
    #[serde(with = "content")]
    pub after: Option<Vec<u8>>,
    /// Create missing parent directories (each within the create allowlist).
    #[serde(default)]
    pub create_parents: bool,
    /// For the target of a move: the path it moves from (display only; the
    /// source is its own change to absence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_from: Option<String>,
    /// Permission bits for a file the change creates (a move keeps its
    /// source's); `None`: 0666 less the umask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
}

impl FileChange {
    /// Hash of the content after the change; `None` when the file is removed.
    pub fn after_hash(&self) -> Option<String> {
        self.after.as_deref().map(sha256_hex)
    }

    /// `CREATE FILE p`, `MODIFY p`, `DELETE p` or `MOVE a -> b`, with
    /// ` (-> resolved)` when a symlink makes it land elsewhere.
    pub fn summary(&self) -> String {
        let text = match (&self.moved_from, &self.before_hash, &self.after) {
            (Some(from), _, _) => format!("MOVE {from} -> {}", self.path),
            (None, None, _) => format!("CREATE FILE {}", self.path),
            (None, Some(_), Some(_)) => format!("MODIFY {}", self.path),
            (None, Some(_), None) => format!("DELETE {}", self.path),
        };
        if self.resolved_path == self.path {
            text
        } else {
            format!("{text} (-> {})", self.resolved_path)
        }
    }
}

/// A prepared change to one or more files, waiting for a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangePlan {
    /// The tool that proposed it.
    pub tool: String,
    /// One line for a human: `MODIFY src/a.rs`, `PATCH 2 files: …`.
    pub summary: String,
    /// One change per path, in the order they are shown.
    pub changes: Vec<FileChange>,
    /// One unified diff over all files.
    pub diff: String,
    /// Hash of `diff`.
    pub patch_hash: String,
    /// Tool-specific result fields, added to the applied call's `data`.
    #[serde(default)]
    pub report: serde_json::Map<String, serde_json::Value>,
}

/// Why a plan cannot be edited by an approver.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotEditable {
    #[error("only a change to one file can be edited; this one changes {0} files")]
    SeveralFiles(usize),
    #[error("only a write can be edited, not a removal or a move")]
    NotAWrite,
    #[error("an upstream call cannot be edited, only approved or denied")]
    Upstream,
}

impl ChangePlan {
    /// The one change an approver may edit: the plan writes exactly one file
    /// (no removal, no move). Its new content is `after`.
    pub fn editable_change(&self) -> Result<&FileChange, NotEditable> {
        let [change] = self.changes.as_slice() else {
            return Err(NotEditable::SeveralFiles(self.changes.len()));
        };
        if change.after.is_none() || change.moved_from.is_some() {
            return Err(NotEditable::NotAWrite);
        }
        Ok(change)
    }

    /// The path shown first (the approval's `path`).
    pub fn primary_path(&self) -> Option<&str> {
        self.changes
            .iter()
            .find(|change| change.moved_from.is_none() || self.changes.len() == 1)
            .or_else(|| self.changes.first())
            .map(|change| change.moved_from.as_deref().unwrap_or(&change.path))
    }

    /// Every path the plan changes, sorted.
    pub fn changed_paths(&self) -> Vec<String> {
        let mut paths: Vec<String> = self
            .changes
            .iter()
            .map(|change| change.path.clone())
            .collect();
        paths.sort();
        paths
    }

    /// Whether this is the creation of new files only.
    pub fn creates_only(&self) -> bool {
        self.changes
            .iter()
            .all(|change| change.before_hash.is_none())
    }

    /// The base hash of a one-file plan.
    pub fn single_base_hash(&self) -> Option<String> {
        match self.changes.as_slice() {
            [one] => one.before_hash.clone(),
            _ => None,
        }
    }

    /// Whether an approver's edit made this plan (its report says so).
    pub fn is_edited(&self) -> bool {
        self.report
            .get("edited")
            .and_then(serde_json::Value::as_bool)
            == Some(true)
    }

    /// The diff, cut after `max_chars` characters with a closing line saying so.
    pub fn diff_preview(&self, max_chars: u64) -> String {
        preview(&self.diff, max_chars)
    }
}

/// `text` cut after `max_chars` characters (never inside one), with a closing
/// line saying so.
pub fn preview(text: &str, max_chars: u64) -> String {
    let max_chars = usize::try_from(max_chars).unwrap_or(usize::MAX);
    let Some((cut, _)) = text.char_indices().nth(max_chars) else {
        return text.to_owned();
    };
    let total = text.chars().count();
    let mut preview = text[..cut].to_owned();
    if !preview.ends_with('\n') {
        preview.push('\n');
    }
    preview.push_str(&format!(
        "... diff truncated: {max_chars} of {total} characters shown\n"
    ));
    preview
}

/// File content in a stored plan: a string when it is UTF-8, else
/// `{"hex": "…"}`.
pub mod content {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Stored {
        Text(String),
        Bytes { hex: String },
    }

    pub fn serialize<S: Serializer>(
        value: &Option<Vec<u8>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            None => serializer.serialize_none(),
            Some(bytes) => match std::str::from_utf8(bytes) {
                Ok(text) => Stored::Text(text.to_owned()).serialize(serializer),
                Err(_) => Stored::Bytes {
                    hex: hex::encode(bytes),
                }
                .serialize(serializer),
            },
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Vec<u8>>, D::Error> {
        match Option::<Stored>::deserialize(deserializer)? {
            None => Ok(None),
            Some(Stored::Text(text)) => Ok(Some(text.into_bytes())),
            Some(Stored::Bytes { hex }) => {
                hex::decode(hex).map(Some).map_err(serde::de::Error::custom)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn change(path: &str, after: Option<&[u8]>) -> ChangePlan {
        ChangePlan {
            tool: "write_file".to_owned(),
            summary: format!("MODIFY {path}"),
            changes: vec![FileChange {
                path: path.to_owned(),
                resolved_path: path.to_owned(),
                before_hash: Some(sha256_hex("old")),
                after: after.map(<[u8]>::to_vec),
                create_parents: false,
                moved_from: None,
                mode: None,
            }],
            diff: String::new(),
            patch_hash: sha256_hex(""),
            report: serde_json::Map::new(),
        }
    }

    #[test]
    fn every_plan_reads_back_as_it_was_written() {
        let plans = [
            Plan::Write(change("a.txt", Some(b"text\n"))),
            Plan::Edit(change("b.txt", Some(&[0xff, 0, 1]))),
            Plan::Delete(change("c.txt", None)),
            Plan::Upstream(UpstreamCall::tool(
                "fs",
                "write",
                serde_json::json!({"path": "x", "n": 1}),
            )),
            Plan::Upstream(UpstreamCall {
                upstream: "docs".to_owned(),
                tool: "file:///srv/a.md".to_owned(),
                args: serde_json::json!({"uri": "file:///srv/a.md"}),
                request: UpstreamRequest::ReadResource,
            }),
        ];
        for plan in plans {
            let text = serde_json::to_string(&plan).unwrap();
            assert_eq!(serde_json::from_str::<Plan>(&text).unwrap(), plan, "{text}");
        }
        let text = serde_json::to_value(Plan::Edit(change("b", Some(&[0xff])))).unwrap();
        assert_eq!(text["kind"], "edit");
        assert_eq!(
            text["changes"][0]["after"],
            serde_json::json!({"hex": "ff"})
        );
    }

    #[test]
    fn only_a_one_file_write_is_editable() {
        assert!(change("a", Some(b"x")).editable_change().is_ok());
        assert_eq!(
            change("a", None).editable_change(),
            Err(NotEditable::NotAWrite)
        );
        let mut two = change("a", Some(b"x"));
        two.changes.push(two.changes[0].clone());
        assert_eq!(two.editable_change(), Err(NotEditable::SeveralFiles(2)));
    }
}
