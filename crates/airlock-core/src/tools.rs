//! The catalogue of airlock's built-in tools: their names, their fixed risk class
//! and which of their parameters name workspace paths.

use serde::Serialize;

use crate::risk::Risk;

/// A tool that airlock implements itself (DESIGN §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BuiltinTool {
    ReadFile,
    WriteFile,
    EditFile,
    ApplyPatch,
    DeleteFile,
    MoveFile,
    Grep,
    Glob,
    Stat,
    Exists,
    ListDir,
    ProposalStatus,
    /// The shell tool (DESIGN §5.1).
    Exec,
    /// Sessions (DESIGN §5.3): open, list, close, signal.
    SessionOpen,
    SessionList,
    SessionClose,
    SessionSignal,
}

/// How much a built-in tool can change, which fixes its default risk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BuiltinClass {
    /// Reads only: low risk.
    ReadOnly,
    /// Writes or edits file contents: medium risk.
    Write,
    /// Deletes or moves files: high risk.
    Destructive,
    /// Runs a command: decided part by part by `exec.rules`; medium risk
    /// until they say otherwise.
    Exec,
}

impl BuiltinTool {
    /// Every built-in tool, in the order `tools/list` shows them.
    pub const ALL: [BuiltinTool; 17] = [
        BuiltinTool::ReadFile,
        BuiltinTool::WriteFile,
        BuiltinTool::EditFile,
        BuiltinTool::ApplyPatch,
        BuiltinTool::DeleteFile,
        BuiltinTool::MoveFile,
        BuiltinTool::Grep,
        BuiltinTool::Glob,
        BuiltinTool::Stat,
        BuiltinTool::Exists,
        BuiltinTool::ListDir,
        BuiltinTool::Exec,
        BuiltinTool::SessionOpen,
        BuiltinTool::SessionList,
        BuiltinTool::SessionClose,
        BuiltinTool::SessionSignal,
        BuiltinTool::ProposalStatus,
    ];

    /// The tool's name as agents call it.
    pub const fn name(self) -> &'static str {
        match self {
            BuiltinTool::ReadFile => "read_file",
            BuiltinTool::WriteFile => "write_file",
            BuiltinTool::EditFile => "edit_file",
            BuiltinTool::ApplyPatch => "apply_patch",
            BuiltinTool::DeleteFile => "delete_file",
            BuiltinTool::MoveFile => "move_file",
            BuiltinTool::Grep => "grep",
            BuiltinTool::Glob => "glob",
            BuiltinTool::Stat => "stat",
            BuiltinTool::Exists => "exists",
            BuiltinTool::ListDir => "list_dir",
            BuiltinTool::ProposalStatus => "proposal_status",
            BuiltinTool::Exec => "exec",
            BuiltinTool::SessionOpen => "session_open",
            BuiltinTool::SessionList => "session_list",
            BuiltinTool::SessionClose => "session_close",
            BuiltinTool::SessionSignal => "session_signal",
        }
    }

    /// spec 000's method name for the envelope's `op.method`.
    pub const fn method(self) -> &'static str {
        match self {
            BuiltinTool::ReadFile => "fs.read",
            BuiltinTool::Grep => "fs.grep",
            BuiltinTool::Glob => "fs.glob",
            BuiltinTool::ListDir => "fs.list_dir",
            BuiltinTool::Stat => "fs.stat",
            BuiltinTool::Exists => "fs.exists",
            BuiltinTool::ProposalStatus => "hitl.status",
            BuiltinTool::WriteFile
            | BuiltinTool::EditFile
            | BuiltinTool::ApplyPatch
            | BuiltinTool::DeleteFile
            | BuiltinTool::MoveFile => "fs.propose_patch",
            BuiltinTool::Exec => "exec.run",
            BuiltinTool::SessionOpen => "host.session.open",
            BuiltinTool::SessionList => "host.session.list",
            BuiltinTool::SessionClose => "host.session.close",
            BuiltinTool::SessionSignal => "host.session.signal",
        }
    }

    /// The built-in tool called `name`, if there is one.
    pub fn from_name(name: &str) -> Option<BuiltinTool> {
        BuiltinTool::ALL
            .into_iter()
            .find(|tool| tool.name() == name)
    }

    /// Whether it is one of the session tools.
    pub const fn is_session_tool(self) -> bool {
        matches!(
            self,
            BuiltinTool::SessionOpen
                | BuiltinTool::SessionList
                | BuiltinTool::SessionClose
                | BuiltinTool::SessionSignal
        )
    }

    /// The built-in tool spec 003 calls `name` (`host.session.open`,
    /// `host.fs.read_file`, `host.exec`, …): accepted, never listed.
    pub fn from_spec_name(name: &str) -> Option<BuiltinTool> {
        let tool = match name {
            "host.session.open" => BuiltinTool::SessionOpen,
            "host.session.list" => BuiltinTool::SessionList,
            "host.session.close" => BuiltinTool::SessionClose,
            "host.session.signal" => BuiltinTool::SessionSignal,
            "host.exec" => BuiltinTool::Exec,
            _ => {
                let tool = BuiltinTool::from_name(name.strip_prefix("host.fs.")?)?;
                return (!tool.is_session_tool()
                    && !matches!(tool, BuiltinTool::Exec | BuiltinTool::ProposalStatus))
                .then_some(tool);
            }
        };
        Some(tool)
    }

    /// The tool's fixed class.
    pub const fn class(self) -> BuiltinClass {
        match self {
            BuiltinTool::ReadFile
            | BuiltinTool::Grep
            | BuiltinTool::Glob
            | BuiltinTool::Stat
            | BuiltinTool::Exists
            | BuiltinTool::ListDir
            | BuiltinTool::ProposalStatus
            // They change airlock's own state, never the workspace; opening
            // beyond the profile's allowance asks (the broker decides it).
            | BuiltinTool::SessionOpen
            | BuiltinTool::SessionList
            | BuiltinTool::SessionClose
            | BuiltinTool::SessionSignal => BuiltinClass::ReadOnly,
            BuiltinTool::WriteFile | BuiltinTool::EditFile | BuiltinTool::ApplyPatch => {
                BuiltinClass::Write
            }
            BuiltinTool::DeleteFile | BuiltinTool::MoveFile => BuiltinClass::Destructive,
            BuiltinTool::Exec => BuiltinClass::Exec,
        }
    }

    /// Whether the tool can change the workspace (a built-in write tool).
    pub const fn is_write(self) -> bool {
        !matches!(self.class(), BuiltinClass::ReadOnly)
    }

    /// The parameters that hold one workspace-relative path each.
    pub const fn path_params(self) -> &'static [&'static str] {
        match self {
            BuiltinTool::ReadFile
            | BuiltinTool::WriteFile
            | BuiltinTool::EditFile
            | BuiltinTool::DeleteFile
            | BuiltinTool::Grep
            | BuiltinTool::Glob
            | BuiltinTool::Stat
            | BuiltinTool::Exists
            | BuiltinTool::ListDir => &["path"],
            BuiltinTool::MoveFile => &["from", "to"],
            // apply_patch names its paths inside the patch text; see `patch_paths`.
            BuiltinTool::ApplyPatch | BuiltinTool::ProposalStatus => &[],
            // Session roots are checked by the broker when it opens one.
            BuiltinTool::SessionOpen
            | BuiltinTool::SessionList
            | BuiltinTool::SessionClose
            | BuiltinTool::SessionSignal => &[],
            // Its working directory; the paths a command names are its
            // redirections' (see `exec::parse`) and the sandbox's.
            BuiltinTool::Exec => &["cwd"],
        }
    }
}

impl BuiltinClass {
    /// The default risk of a tool of this class (DESIGN §4, layer 5).
    pub const fn default_risk(self) -> Risk {
        match self {
            BuiltinClass::ReadOnly => Risk::Low,
            BuiltinClass::Write => Risk::Medium,
            BuiltinClass::Destructive => Risk::High,
            BuiltinClass::Exec => Risk::Medium,
        }
    }
}

/// Argument names that, on tools airlock does not implement, are taken to hold
/// paths, so that deny globs and protected paths also guard upstream servers.
pub const FOREIGN_PATH_PARAMS: &[&str] = &[
    "path",
    "paths",
    "file",
    "files",
    "file_path",
    "filepath",
    "filename",
    "directory",
    "dir",
    "source",
    "destination",
    "src",
    "dst",
    "from",
    "to",
    "target",
    "old_path",
    "new_path",
];

/// What an `apply_patch` call's patch touches, for the policy.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PatchTargets {
    /// The paths the patch parser (the one the file tools apply with) reads:
    /// every operation's path and move target. Empty when it does not parse.
    pub parsed: Vec<String>,
    /// Whether the patch parsed; grants cover only a parsed patch.
    pub parses: bool,
    /// It deletes or moves a file: delete/move risk.
    pub destructive: bool,
    /// [`patch_paths`]' textual reading, checked by the sandbox layer too.
    pub textual: Vec<String>,
}

/// The targets of `apply_patch` arguments (`patch`, `patch_format`).
pub fn patch_targets(args: &serde_json::Value) -> PatchTargets {
    let Some(text) = args.get("patch").and_then(serde_json::Value::as_str) else {
        return PatchTargets::default();
    };
    let format = args
        .get("patch_format")
        .and_then(|format| serde_json::from_value(format.clone()).ok())
        .unwrap_or_default();
    let textual = patch_paths(text);
    match crate::patch::parse(text, format) {
        Ok(patch) => {
            let mut parsed = Vec::new();
            let mut destructive = false;
            for op in &patch.ops {
                parsed.push(op.path().to_owned());
                match op {
                    crate::patch::PatchOp::Delete { .. } => destructive = true,
                    crate::patch::PatchOp::Update {
                        move_to: Some(to), ..
                    } => {
                        destructive = true;
                        parsed.push(to.clone());
                    }
                    crate::patch::PatchOp::Add { .. } | crate::patch::PatchOp::Update { .. } => {}
                }
            }
            PatchTargets {
                parsed,
                parses: true,
                destructive,
                textual,
            }
        }
        // It will fail to plan; until then it is judged by its headers, and no
        // grant covers it.
        Err(_) => PatchTargets {
            parsed: Vec::new(),
            parses: false,
            destructive: false,
            textual,
        },
    }
}

/// The paths an `apply_patch` patch text touches, read from its file headers:
/// V4A `*** Add/Delete/Update File:` and `*** Move to:`; unified `---`/`+++`
/// pairs; git's `diff --git`, `rename`/`copy from`/`to` lines.
///
/// This is a textual scan for the policy's path checks; the patch parser of the
/// file tools is what applies a patch, and it checks every path again through the
/// sandbox. Where a header is ambiguous (a path followed by a space and more text)
/// both readings are returned: an extra candidate can only make the check stricter.
pub fn patch_paths(patch: &str) -> Vec<String> {
    const V4A_HEADERS: [&str; 4] = [
        "*** Add File:",
        "*** Delete File:",
        "*** Update File:",
        "*** Move to:",
    ];
    const GIT_HEADERS: [&str; 4] = ["rename from ", "rename to ", "copy from ", "copy to "];
    let lines: Vec<&str> = patch.lines().collect();
    let mut paths = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim();
        if let Some(rest) = V4A_HEADERS
            .iter()
            .find_map(|header| trimmed.strip_prefix(header))
        {
            paths.push(rest.trim().to_owned());
        } else if let Some(rest) = GIT_HEADERS
            .iter()
            .find_map(|header| line.strip_prefix(header))
        {
            paths.push(unquote(rest.trim()));
        } else if let Some(rest) = line.strip_prefix("diff --git ") {
            paths.extend(
                rest.split_whitespace()
                    .map(|part| strip_side(&unquote(part))),
            );
        } else if let Some(rest) = line.strip_prefix("--- ") {
            // A `---` line is a header only when a `+++` line follows it; inside a
            // hunk it is a removed line starting with `--`.
            let Some(next) = lines.get(i + 1).and_then(|next| next.strip_prefix("+++ ")) else {
                continue;
            };
            for header in [rest, next] {
                push_unified_path(header, &mut paths);
            }
        }
    }
    paths
}

fn push_unified_path(header: &str, paths: &mut Vec<String>) {
    // `a/src/x.rs\t2024-01-01 10:00`: the path ends at a tab.
    let header = header.split('\t').next().unwrap_or(header).trim();
    let path = unquote(header);
    if path == "/dev/null" {
        return;
    }
    let path = strip_side(&path);
    // `x.rs 2024-01-01`: a space may end the path too; keep both readings.
    if let Some((first, _)) = path.split_once(' ') {
        paths.push(first.to_owned());
    }
    paths.push(path);
}

/// Drops git's `a/` or `b/` prefix.
fn strip_side(path: &str) -> String {
    path.strip_prefix("a/")
        .or_else(|| path.strip_prefix("b/"))
        .unwrap_or(path)
        .to_owned()
}

/// Undoes git's C-style quoting of a path (`"a/x\ty"`), for the escapes git uses.
fn unquote(text: &str) -> String {
    let Some(inner) = text
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
    else {
        return text.to_owned();
    };
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_paths_reads_v4a_and_unified_headers() {
        let patch = "*** Begin Patch\n*** Update File: src/a.rs\n*** Move to: src/b.rs\n@@\n-x\n+y\n\
                     *** Add File: docs/new.md\n+hi\n*** Delete File: old.txt\n*** End Patch\n\
                     --- a/lib/x.rs\t2024\n+++ b/lib/x.rs\n@@ -1 +1 @@\n--- not a header\n+new\n\
                     --- /dev/null\n+++ b/.env\n";
        assert_eq!(
            patch_paths(patch),
            [
                "src/a.rs",
                "src/b.rs",
                "docs/new.md",
                "old.txt",
                "lib/x.rs",
                "lib/x.rs",
                ".env"
            ]
        );
    }

    #[test]
    fn patch_paths_reads_git_headers_quotes_and_timestamps() {
        let patch = "diff --git a/x.txt b/secrets/y.txt\nrename from x.txt\nrename to secrets/y.txt\n\
                     --- \"a/odd\\tname\"\n+++ \"b/odd\\tname\"\n\
                     --- .env 2024-01-01 10:00\n+++ .env 2024-01-02 10:00\n";
        assert_eq!(
            patch_paths(patch),
            [
                "x.txt",
                "secrets/y.txt",
                "x.txt",
                "secrets/y.txt",
                "odd\tname",
                "odd\tname",
                ".env",
                ".env 2024-01-01 10:00",
                ".env",
                ".env 2024-01-02 10:00",
            ]
        );
    }

    #[test]
    fn names_round_trip() {
        for tool in BuiltinTool::ALL {
            assert_eq!(BuiltinTool::from_name(tool.name()), Some(tool));
        }
        assert_eq!(BuiltinTool::from_name("rm"), None);
    }
}

/// A built-in tool as clients see it: its name, description, hints and the
/// JSON Schema of its arguments (from `tools.json`, the one place they are
/// written). The MCP face lists these, code mode validates a script's
/// calls against them and declares them to the script.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSchema {
    pub name: String,
    pub description: String,
    pub read_only: bool,
    pub destructive: bool,
    /// `{"type": "object", "properties": …, "required": …,
    /// "additionalProperties": false}`.
    pub input_schema: serde_json::Value,
}

/// A call named in spec 003's dotted form (`host.fs.write_file`,
/// `host.exec`, `host.session.open`) as airlock's own: the canonical name,
/// and the arguments in airlock's shape (`host.exec`'s `timeout_ns` is
/// `timeout_ms`; `host.session.open`'s `target` shape is read by
/// `session_open` itself). Any other name is returned as it is.
pub fn canonical_call(name: &str, args: serde_json::Value) -> (String, serde_json::Value) {
    let Some(tool) = BuiltinTool::from_spec_name(name) else {
        return (name.to_owned(), args);
    };
    let mut args = args;
    if tool == BuiltinTool::Exec
        && let Some(object) = args.as_object_mut()
        && let Some(ns) = object.remove("timeout_ns")
    {
        // A value that is no count of nanoseconds stays, and is refused
        // as the exec tool's own would be.
        let value = match ns.as_u64() {
            Some(ns) => serde_json::json!(ns.div_ceil(1_000_000).max(1)),
            None => ns,
        };
        object.insert("timeout_ms".to_owned(), value);
    }
    (tool.name().to_owned(), args)
}

/// The argument every tool takes to name its session (DESIGN §5.3); the
/// broker takes it out before the tool sees its arguments.
pub const SESSION_ID: &str = "session_id";

/// One entry of `tools.json`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SchemaEntry {
    name: String,
    description: String,
    #[serde(rename = "readOnly")]
    read_only: bool,
    #[serde(default)]
    destructive: bool,
    properties: serde_json::Value,
    required: Vec<String>,
}

/// Every built-in tool's schema, in listing order (`proposal_status`
/// last).
pub fn schemas() -> &'static [ToolSchema] {
    static SCHEMAS: std::sync::OnceLock<Vec<ToolSchema>> = std::sync::OnceLock::new();
    SCHEMAS.get_or_init(|| {
        let entries: Vec<SchemaEntry> =
            serde_json::from_str(include_str!("tools.json")).unwrap_or_default();
        entries
            .into_iter()
            .map(|mut entry| {
                // Every tool but the session tools runs in a session it may
                // name (DESIGN §5.3).
                if !entry.name.starts_with("session_")
                    && let Some(properties) = entry.properties.as_object_mut()
                {
                    properties.insert(
                        SESSION_ID.to_owned(),
                        serde_json::json!({
                            "type": "string",
                            "description": "The session to run in (session_open's id); default: this connection's last opened session.",
                        }),
                    );
                }
                entry
            })
            .map(|entry| ToolSchema {
                input_schema: serde_json::json!({
                    "type": "object",
                    "properties": entry.properties,
                    "required": entry.required,
                    "additionalProperties": false,
                }),
                name: entry.name,
                description: entry.description,
                read_only: entry.read_only,
                destructive: entry.destructive,
            })
            .collect()
    })
}
