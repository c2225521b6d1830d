//! Code mode's place in the broker (DESIGN §5.2). The engine lives above
//! the broker (airlock-codemode, beside the faces); the CLI registers it
//! here as a [`CodeMode`], so that every face that submits a call reaches
//! `codemode_eval` the same way, and the script's own calls come back in
//! through [`Broker::submit`] like any other.

use std::sync::Arc;

use airlock_core::config::Config;
use airlock_core::envelope::Envelope;
use airlock_core::tools::BuiltinTool;
use airlock_core::{ToolAnnotations, ToolCall, ToolOrigin};
use serde_json::Value;

use crate::broker::Broker;
use crate::runtime::Upstreams;
use crate::submit::Mode;
use crate::{Approval, Cancel};

/// The base tool's name; `codemode_eval_<profile>` are its variants.
pub const CODEMODE_TOOL: &str = "codemode_eval";

/// The envelope's `op.method` of a run.
pub const CODE_METHOD: &str = "codemode.eval";

/// A tool as a client or a script sees it listed.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedTool {
    pub name: String,
    pub description: String,
    /// The JSON Schema of its arguments.
    pub input_schema: Value,
    /// The JSON Schema of its result, where the tool declares one.
    pub output_schema: Option<Value>,
    pub annotations: Option<ToolAnnotations>,
}

/// One `codemode_eval*` call, as the broker hands it on.
pub struct CodeCall<'a> {
    pub broker: &'a Broker,
    pub call: &'a ToolCall,
    /// `codemode_eval_<profile>`'s profile, which the script's calls answer
    /// to beside the endpoint's.
    pub narrowed_to: Option<&'a str>,
    pub mode: &'a Mode,
    pub on_pending: &'a (dyn Fn(&Approval) + Sync),
    pub cancel: &'a Cancel,
}

/// Code mode's engine, registered by whoever wires the broker.
pub trait CodeMode: Send + Sync {
    /// Runs one script to its envelope.
    fn eval(&self, run: CodeCall<'_>) -> Envelope;
    /// The TypeScript declarations of the tools a script may call under
    /// `profile` (and `narrowed_to`).
    fn declarations(
        &self,
        broker: &Broker,
        profile: Option<&str>,
        narrowed_to: Option<&str>,
    ) -> String;
    /// How the tool is listed (its description declares the script's
    /// tools, so it depends on the profiles).
    fn listing(
        &self,
        broker: &Broker,
        name: &str,
        profile: Option<&str>,
        narrowed_to: Option<&str>,
    ) -> ListedTool;
}

/// Whether `tool` names one of code mode's tools under `config`:
/// `Some(None)` for `codemode_eval`, `Some(Some(profile))` for a listed
/// `codemode_eval_<profile>`, `None` otherwise (or when code mode is off).
pub fn code_tool(config: &Config, tool: &str) -> Option<Option<String>> {
    if !config.codemode.enabled {
        return None;
    }
    if tool == CODEMODE_TOOL {
        return Some(None);
    }
    let profile = tool.strip_prefix(CODEMODE_TOOL)?.strip_prefix('_')?;
    config
        .codemode
        .profile_tools
        .iter()
        .any(|listed| listed == profile)
        .then(|| Some(profile.to_owned()))
}

impl Broker {
    /// Registers code mode's engine with this broker.
    /// A script's result as the answer carries it: the text itself up to
    /// `max_inline_bytes`, a blob beyond.
    pub fn shape_result(
        &self,
        text: String,
    ) -> Result<(Option<String>, Option<airlock_fs::BlobRef>), airlock_fs::FsError> {
        airlock_fs::shape_text(&self.sandbox, text, airlock_fs::OutputMode::Auto)
    }

    pub fn with_code_mode(mut self, code: Arc<dyn CodeMode>) -> Broker {
        self.code_mode = Some(code);
        self
    }

    /// Lets this broker name the upstreams' tools (and carry out their
    /// approved calls).
    pub fn with_upstreams(mut self, upstreams: Arc<dyn Upstreams>) -> Broker {
        self.forwarder = Some(upstreams.clone());
        self.upstreams = Some(upstreams);
        self
    }

    /// Code mode's tools as an endpoint bound to `profile` lists them: the
    /// base tool when the profile lists it, and `codemode_eval_<p>` for
    /// each `codemode.profile_tools` entry. None without an engine or with
    /// code mode off.
    pub fn code_tools(&self, profile: Option<&str>) -> Vec<ListedTool> {
        let Some(code) = &self.code_mode else {
            return Vec::new();
        };
        if !self.config.codemode.enabled || !self.policy.lists_tool(profile, CODEMODE_TOOL) {
            return Vec::new();
        }
        let mut out = vec![code.listing(self, CODEMODE_TOOL, profile, None)];
        for narrowed in &self.config.codemode.profile_tools {
            let name = format!("{CODEMODE_TOOL}_{narrowed}");
            out.push(code.listing(self, &name, profile, Some(narrowed)));
        }
        out
    }

    /// The declarations of the tools a script of an endpoint bound to
    /// `profile` may call (`airlock://codemode/types.d.ts`); `None` where
    /// code mode is not offered.
    pub fn code_declarations(&self, profile: Option<&str>) -> Option<String> {
        let code = self.code_mode.as_ref()?;
        (self.config.codemode.enabled && self.policy.lists_tool(profile, CODEMODE_TOOL))
            .then(|| code.declarations(self, profile, None))
    }

    /// The tools a script may call under `profile` (and `narrowed_to`):
    /// the built-in tools and the upstreams' tools (`<upstream>__<tool>`)
    /// that both profiles list, with their schemas. Code mode's own tools
    /// are not among them.
    pub fn script_tools(
        &self,
        profile: Option<&str>,
        narrowed_to: Option<&str>,
    ) -> Vec<ListedTool> {
        let lists = |name: &str| {
            self.policy.lists_tool(profile, name)
                && narrowed_to.is_none_or(|narrowed| self.policy.lists_tool(Some(narrowed), name))
        };
        let mut out = Vec::new();
        for schema in airlock_core::tools::schemas() {
            // A command's changes could not join the run's staged diff (nor
            // would it see the staged files): no `exec` in a script.
            if schema.name == BuiltinTool::Exec.name() {
                continue;
            }
            // A run works in its call's session: it neither opens nor
            // closes one.
            if BuiltinTool::from_name(&schema.name).is_some_and(BuiltinTool::is_session_tool) {
                continue;
            }
            if BuiltinTool::from_name(&schema.name).is_some() && lists(&schema.name) {
                out.push(ListedTool {
                    name: schema.name.clone(),
                    description: schema.description.clone(),
                    input_schema: schema.input_schema.clone(),
                    output_schema: None,
                    annotations: Some(ToolAnnotations {
                        read_only_hint: Some(schema.read_only),
                        destructive_hint: Some(schema.destructive),
                        idempotent_hint: None,
                        open_world_hint: Some(false),
                    }),
                });
            }
        }
        if let Some(upstreams) = &self.upstreams {
            for (upstream, tool, known) in upstreams.all_tools() {
                let name = format!("{upstream}__{tool}");
                if lists(&name) {
                    out.push(ListedTool {
                        name,
                        description: known.description.unwrap_or_default(),
                        input_schema: known.input_schema.unwrap_or(Value::Null),
                        output_schema: known.output_schema,
                        annotations: known.annotations,
                    });
                }
            }
        }
        out
    }

    /// Where a tool a script names comes from: a built-in tool by its
    /// name, an upstream's as `<upstream>__<tool>` while that upstream
    /// offers it, anything else unknown.
    pub fn script_tool_origin(&self, name: &str) -> ToolOrigin {
        if BuiltinTool::from_name(name).is_some() {
            return self.policy.origin_of(name, None);
        }
        let Some((upstream, tool)) = name.split_once("__") else {
            return ToolOrigin::Unknown;
        };
        match self
            .upstreams
            .as_ref()
            .and_then(|upstreams| upstreams.find_tool(upstream, tool))
        {
            Some(found) => self.policy.origin_of(name, found.annotations),
            None => ToolOrigin::Unknown,
        }
    }

    /// Hands a `codemode_eval*` call to the engine; `None` when `call` is
    /// not one (or there is no engine), so it goes the usual way.
    pub(crate) fn code_call(
        &self,
        call: &ToolCall,
        mode: &Mode,
        on_pending: &(dyn Fn(&Approval) + Sync),
        cancel: &Cancel,
    ) -> Option<Envelope> {
        let code = self.code_mode.as_ref()?;
        let narrowed = code_tool(&self.config, &call.tool)?;
        Some(code.eval(CodeCall {
            broker: self,
            call,
            narrowed_to: narrowed.as_deref(),
            mode,
            on_pending,
            cancel,
        }))
    }
}
