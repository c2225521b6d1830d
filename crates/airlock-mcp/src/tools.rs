//! What `tools/list` shows: the built-in tools (airlock-core's schemas, with
//! annotations), `proposal_status`, and the upstreams' tools.

use std::sync::OnceLock;

use rmcp::model::Tool;
use serde_json::json;

/// The built-in tools as MCP tools (airlock-core's schemas),
/// `proposal_status` last.
pub(crate) fn builtin() -> &'static [Tool] {
    static TOOLS: OnceLock<Vec<Tool>> = OnceLock::new();
    TOOLS.get_or_init(|| {
        airlock_core::tools::schemas()
            .iter()
            .filter_map(|schema| {
                let mut annotations = json!({"readOnlyHint": schema.read_only});
                if !schema.read_only {
                    annotations["destructiveHint"] = json!(schema.destructive);
                    annotations["idempotentHint"] = json!(false);
                }
                annotations["openWorldHint"] = json!(false);
                serde_json::from_value(json!({
                    "name": schema.name,
                    "description": schema.description,
                    "inputSchema": schema.input_schema,
                    "annotations": annotations,
                }))
                .ok()
            })
            .collect()
    })
}

/// The name of the tool Claude Code's `--permission-prompt-tool` is pointed
/// at (`mcp__<server>__permission_prompt`).
pub(crate) const PERMISSION_PROMPT: &str = "permission_prompt";

/// Claude Code's permission prompt tool (DESIGN §9.1), listed after the
/// built-in tools under `serve`.
pub(crate) fn permission_prompt() -> &'static Tool {
    static TOOL: OnceLock<Tool> = OnceLock::new();
    TOOL.get_or_init(|| {
        serde_json::from_value(json!({
            "name": PERMISSION_PROMPT,
            "description": "For Claude Code's --permission-prompt-tool: decides a tool call Claude Code asks permission for, as airlock's hook would (its policy, and a human when it asks), and answers {\"behavior\": \"allow\", \"updatedInput\": …} or {\"behavior\": \"deny\", \"message\": …} as JSON text.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "tool_name": {"type": "string", "description": "The tool Claude Code wants to run."},
                    "input": {"type": "object", "description": "Its input."},
                    "tool_use_id": {"type": "string", "description": "Claude Code's id of the call."},
                },
                "required": ["tool_name", "input"],
                "additionalProperties": false,
            },
            "annotations": {"readOnlyHint": true, "openWorldHint": false},
        }))
        .unwrap_or_else(|_| Tool::default())
    })
}

/// A tool the broker lists (code mode's), as an MCP tool.
pub(crate) fn listed(tool: &airlock_broker::ListedTool) -> Option<Tool> {
    let mut value = json!({
        "name": tool.name,
        "description": tool.description,
        "inputSchema": tool.input_schema,
    });
    if let Some(hints) = &tool.annotations {
        value["annotations"] = json!({
            "readOnlyHint": hints.read_only_hint,
            "destructiveHint": hints.destructive_hint,
            "idempotentHint": hints.idempotent_hint,
            "openWorldHint": hints.open_world_hint,
        });
    }
    serde_json::from_value(value).ok()
}

/// A tool of an upstream as airlock lists it: renamed, and without an output
/// schema (results airlock answers itself, a denial or a pending approval, do
/// not follow the upstream's schema).
pub(crate) fn relisted(tool: &Tool, name: String) -> Tool {
    let mut tool = tool.clone();
    tool.name = name.into();
    tool
}

/// The hints of an upstream tool, in the policy's terms.
pub(crate) fn annotations_of(tool: &Tool) -> Option<airlock_core::ToolAnnotations> {
    let hints = tool.annotations.as_ref()?;
    Some(airlock_core::ToolAnnotations {
        read_only_hint: hints.read_only_hint,
        destructive_hint: hints.destructive_hint,
        idempotent_hint: hints.idempotent_hint,
        open_world_hint: hints.open_world_hint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn every_builtin_tool_is_listed_with_its_schema() {
        let names: Vec<&str> = builtin().iter().map(|tool| tool.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                "read_file",
                "write_file",
                "edit_file",
                "apply_patch",
                "delete_file",
                "move_file",
                "grep",
                "glob",
                "list_dir",
                "stat",
                "exists",
                "exec",
                "session_open",
                "session_list",
                "session_close",
                "session_signal",
                "proposal_status"
            ]
        );
        for name in names {
            if name != "proposal_status" {
                assert!(
                    airlock_core::tools::BuiltinTool::from_name(name).is_some(),
                    "{name} is not a built-in tool"
                );
            }
        }
    }

    /// `(property names, required names)` of an object schema.
    fn shape(schema: &Value) -> (Vec<String>, Vec<String>) {
        let mut properties: Vec<String> = schema["properties"]
            .as_object()
            .map(|map| map.keys().cloned().collect())
            .unwrap_or_default();
        properties.sort();
        let mut required: Vec<String> = schema["required"]
            .as_array()
            .map(|list| {
                list.iter()
                    .filter_map(|name| name.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        required.sort();
        (properties, required)
    }

    fn params<T: schemars::JsonSchema>() -> (Vec<String>, Vec<String>) {
        shape(&serde_json::to_value(schemars::schema_for!(T)).unwrap())
    }

    /// The schemas `tools/list` shows (airlock-core's tools.json) name exactly the parameters
    /// the tools parse (airlock-fs's serde types): the same properties, the same
    /// required ones. A field added to one and not the other fails here.
    #[test]
    fn the_listed_schemas_are_the_parameter_types() {
        use airlock_fs::{
            DeleteParams, EditParams, GlobParams, GrepParams, ListDirParams, MoveParams,
            PatchParams, ReadParams, StatParams, WriteParams,
        };
        let expected = [
            ("read_file", params::<ReadParams>()),
            ("write_file", params::<WriteParams>()),
            ("edit_file", params::<EditParams>()),
            ("apply_patch", params::<PatchParams>()),
            ("delete_file", params::<DeleteParams>()),
            ("move_file", params::<MoveParams>()),
            ("grep", params::<GrepParams>()),
            ("glob", params::<GlobParams>()),
            ("list_dir", params::<ListDirParams>()),
            ("stat", params::<StatParams>()),
            ("exists", params::<StatParams>()),
            ("exec", params::<airlock_broker::ExecParams>()),
        ];
        for (name, (properties, required)) in expected {
            let tool = builtin()
                .iter()
                .find(|tool| tool.name == name)
                .unwrap_or_else(|| panic!("{name} is not listed"));
            let listed = Value::Object((*tool.input_schema).clone());
            // Every tool also takes `session_id`, which the broker takes out
            // before the tool parses its arguments (DESIGN §5.3).
            let (mut listed_properties, listed_required) = shape(&listed);
            let at = listed_properties
                .iter()
                .position(|property| property == "session_id")
                .unwrap_or_else(|| panic!("{name} does not take session_id"));
            listed_properties.remove(at);
            assert_eq!(
                (listed_properties, listed_required),
                (properties, required),
                "{name}"
            );
        }
    }
}
