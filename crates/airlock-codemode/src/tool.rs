//! `codemode_eval` as the broker runs it: the arguments checked, the run
//! audited from start to end, each call the script makes checked against
//! its tool's schema and submitted through the broker with `via: {run_id,
//! seq}`, and the answer one envelope.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use airlock_broker::{Approval, CodeCall, CodeMode, ListedTool, Record};
use airlock_core::envelope::{Envelope, Status};
use airlock_core::{ErrorCode, ToolCall, Via};
use serde_json::{Map, Value, json};

use crate::driver::{self, End, Host, HumanClock, Isolation, Outcome, Reply};
use crate::protocol::{EngineLimits, FailCode, Failure, Settled, Start};

/// The envelope's `op.method` of a run.
pub const METHOD: &str = "codemode.eval";

/// Code mode's engine, as registered with the broker.
#[derive(Debug)]
pub struct CodeTool {
    isolation: Isolation,
    running: AtomicUsize,
}

impl CodeTool {
    pub fn new(isolation: Isolation) -> CodeTool {
        CodeTool {
            isolation,
            running: AtomicUsize::new(0),
        }
    }
}

/// A run's slot among `codemode.max_concurrent_runs`.
struct Slot<'a>(&'a AtomicUsize);

impl<'a> Slot<'a> {
    fn take(running: &'a AtomicUsize, max: usize) -> Option<Slot<'a>> {
        running
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                (now < max).then_some(now + 1)
            })
            .ok()
            .map(|_| Slot(running))
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `codemode_eval`'s arguments.
struct EvalArgs {
    code: String,
    description: Option<String>,
}

fn eval_args(args: &Value) -> Result<EvalArgs, String> {
    let Some(object) = args.as_object() else {
        return Err("the arguments must be an object {code, description?}".to_owned());
    };
    if let Some(key) = object
        .keys()
        .find(|key| !["code", "description"].contains(&key.as_str()))
    {
        return Err(format!(
            "unknown argument `{}` (codemode_eval takes code and description)",
            airlock_core::display::safe_text(key)
        ));
    }
    let code = match object.get("code") {
        Some(Value::String(code)) => code.clone(),
        Some(_) => return Err("`code` must be a string".to_owned()),
        None => return Err("`code` is required: the script to run".to_owned()),
    };
    let description = match object.get("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(_) => return Err("`description` must be a string".to_owned()),
    };
    Ok(EvalArgs { code, description })
}

/// The script inside a Markdown fence (```js … ```), the fence lines
/// blanked so that lines stay true; any other text as it is.
pub fn strip_fences(code: &str) -> String {
    let lines: Vec<&str> = code.split('\n').collect();
    let first = lines.iter().position(|line| !line.trim().is_empty());
    let last = lines.iter().rposition(|line| !line.trim().is_empty());
    let (Some(first), Some(last)) = (first, last) else {
        return code.to_owned();
    };
    let opens = lines[first].trim_start().starts_with("```");
    let closes = lines[last].trim() == "```";
    if first == last || !opens || !closes {
        return code.to_owned();
    }
    lines
        .iter()
        .enumerate()
        .map(|(index, line)| {
            if index == first || index == last {
                ""
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn limits_of(config: &airlock_core::config::CodemodeConfig) -> EngineLimits {
    EngineLimits {
        cpu_ms: config.cpu_seconds().unwrap_or(5).saturating_mul(1000),
        memory_bytes: config.memory_bytes,
        stack_bytes: config.stack_bytes,
        max_result_bytes: config.max_result_bytes,
        max_console_bytes: config.max_console_bytes,
        max_calls: config.max_calls,
        max_in_flight: config.max_in_flight,
    }
}

fn failure_code(code: FailCode) -> ErrorCode {
    match code {
        FailCode::ScriptTimeout => ErrorCode::ScriptTimeout,
        FailCode::ScriptMemory => ErrorCode::ScriptMemory,
        FailCode::ScriptLimit => ErrorCode::ScriptLimit,
        FailCode::ScriptError => ErrorCode::ScriptError,
        FailCode::ParseError => ErrorCode::ParseError,
        FailCode::SandboxUnavailable => ErrorCode::SandboxUnavailable,
    }
}

impl CodeMode for CodeTool {
    fn eval(&self, run: CodeCall<'_>) -> Envelope {
        let started = Instant::now();
        let call = run.call;
        let broker = run.broker;
        let config = &broker.config().codemode;
        let refuse = |code: ErrorCode, message: String| {
            Envelope::failure(Status::Error, METHOD, &call.tool, None, code, message)
        };
        let args = match eval_args(&call.args) {
            Ok(args) => args,
            Err(message) => return refuse(ErrorCode::InvalidInput, message),
        };
        let code = strip_fences(&args.code);
        if code.len() as u64 > config.max_source_bytes {
            return refuse(
                ErrorCode::ScriptLimit,
                format!(
                    "the script is {} bytes, over codemode.max_source_bytes ({})",
                    code.len(),
                    config.max_source_bytes
                ),
            );
        }
        let Some(_slot) = Slot::take(&self.running, config.max_concurrent_runs as usize) else {
            return refuse(
                ErrorCode::RateLimited,
                format!(
                    "{} scripts are running already (codemode.max_concurrent_runs); try again when one ends",
                    config.max_concurrent_runs
                ),
            );
        };
        let tools: BTreeMap<String, ListedTool> = broker
            .script_tools(call.profile.as_deref(), run.narrowed_to)
            .into_iter()
            .map(|tool| (tool.name.clone(), tool))
            .collect();
        let run_id = format!("run_{}", uuid::Uuid::new_v4().simple());
        let script_sha256 = airlock_core::canonical::sha256_hex(code.as_bytes());
        let seed = uuid::Uuid::new_v4().as_u64_pair().0;
        let now_ms = broker.now_ms();
        let record = |event: &str| {
            Record::new(event)
                .text("tool", &call.tool)
                .text("run_id", &run_id)
                .value("session", call.session.clone().map(Value::String))
                .value("user", call.principal.user.clone().map(Value::String))
                .value("agent", call.principal.agent.clone().map(Value::String))
                .value("tool_call_id", call.tool_call_id.clone().map(Value::String))
                .value("context_id", call.context_id.clone().map(Value::String))
                .value("profile", call.profile.clone().map(Value::String))
                .value(
                    "narrowed_to",
                    run.narrowed_to.map(|p| Value::String(p.to_owned())),
                )
        };
        let begun = record("code_run_start")
            .text("script_sha256", &script_sha256)
            .number("script_bytes", code.len() as u64)
            .value("description", args.description.clone().map(Value::String))
            .number("seed", seed)
            .number("now_ms", now_ms);
        if !broker.note(begun) {
            return refuse(
                ErrorCode::IoError,
                "the audit log could not be written; the script was not run".to_owned(),
            );
        }
        let host = BrokerHost {
            broker,
            outer: call,
            run_id: &run_id,
            narrowed_to: run.narrowed_to,
            mode: run.mode,
            on_pending: run.on_pending,
            cancel: run.cancel,
            tools: &tools,
            log: Mutex::new(Vec::new()),
            pending: Mutex::new(Vec::new()),
        };
        let start = Start {
            code,
            tools: tools.keys().cloned().collect(),
            limits: limits_of(config),
            seed,
            now_ms,
        };
        let wall = Duration::from_secs(config.wall_seconds().unwrap_or(60));
        let outcome = driver::run(&self.isolation, start, wall, &host);
        let calls = host.log.into_inner().unwrap_or_default();
        let envelope = envelope_of(call, &run_id, &outcome, calls);
        let mut ended = record("code_run_end")
            .text("status", data_status(&envelope))
            .number("calls", u64::from(outcome.calls))
            .number("ms", started.elapsed().as_millis() as u64);
        if let Some(error) = &envelope.error {
            ended = ended
                .text("code", error.code.as_str())
                .text("message", &error.message);
        }
        if let End::Done(result) = &outcome.end {
            ended = ended.text(
                "result_sha256",
                &airlock_core::canonical::sha256_hex(result.as_bytes()),
            );
        }
        if !broker.note(ended) {
            return refuse(
                ErrorCode::IoError,
                "the script ran, but the audit log could not record its end".to_owned(),
            );
        }
        envelope
    }

    fn listing(
        &self,
        broker: &airlock_broker::Broker,
        name: &str,
        profile: Option<&str>,
        narrowed_to: Option<&str>,
    ) -> ListedTool {
        let tools = broker.script_tools(profile, narrowed_to);
        let names: Vec<String> = tools.iter().map(|tool| tool.name.clone()).collect();
        let scope = match narrowed_to {
            Some(narrowed) => format!(
                " Its calls answer to profile `{narrowed}` as well as to the endpoint's: it can only narrow what the script may do."
            ),
            None => String::new(),
        };
        ListedTool {
            name: name.to_owned(),
            description: format!(
                "Runs a short JavaScript program that calls tools as `await codemode.<tool>(args)` and returns the value of its last expression (or of a top-level `return`). Every call is checked by airlock's policy like a direct call: a refused call throws a catchable ToolCallDeniedError {{tool, code, reason}}; a call a human denies ends the run. console.log lines come back in `logs`. No network, files, timers or eval: only codemode.*, console.* and the result.{scope} Tools: {}.",
                names.join(", ")
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "code": {"type": "string", "description": "The script: JavaScript, the body of an async function (top-level await and return work)."},
                    "description": {"type": "string", "description": "What the script does, shown to the human who approves its calls."}
                },
                "required": ["code"],
                "additionalProperties": false
            }),
            output_schema: None,
            annotations: Some(airlock_core::ToolAnnotations {
                read_only_hint: Some(false),
                destructive_hint: Some(true),
                idempotent_hint: Some(false),
                open_world_hint: Some(true),
            }),
        }
    }
}

/// One call of the run, as the envelope lists it.
#[derive(Debug, Clone)]
struct CallEntry {
    seq: u32,
    tool: String,
    args_sha256: String,
    status: String,
    code: Option<String>,
    hitl_id: Option<String>,
    ms: u64,
}

/// Carries out the script's calls through the broker.
struct BrokerHost<'a> {
    broker: &'a airlock_broker::Broker,
    outer: &'a ToolCall,
    run_id: &'a str,
    narrowed_to: Option<&'a str>,
    mode: &'a airlock_broker::Mode,
    on_pending: &'a (dyn Fn(&Approval) + Sync),
    cancel: &'a airlock_broker::Cancel,
    tools: &'a BTreeMap<String, ListedTool>,
    log: Mutex<Vec<CallEntry>>,
    /// Approvals of calls under way, cancelled if the run ends first.
    pending: Mutex<Vec<String>>,
}

// The broker's callbacks are called from the call threads; what they
// touch is shared through locks.
fn settle_failed(tool: &str, code: ErrorCode, message: &str) -> Reply {
    Reply::Settle {
        kind: Settled::Failed,
        payload: json!({"tool": tool, "code": code.as_str(), "message": message}).to_string(),
    }
}

impl Host for BrokerHost<'_> {
    fn call(&self, seq: u32, tool: &str, args: &str, human: &HumanClock) -> Reply {
        let started = Instant::now();
        let args_sha256 = airlock_core::canonical::sha256_hex(args.as_bytes());
        let entry = |status: &str, code: Option<ErrorCode>, hitl_id: Option<String>| CallEntry {
            seq,
            tool: tool.to_owned(),
            args_sha256: args_sha256.clone(),
            status: status.to_owned(),
            code: code.map(|code| code.as_str().to_owned()),
            hitl_id,
            ms: started.elapsed().as_millis() as u64,
        };
        let record = |entry: CallEntry| {
            if let Ok(mut log) = self.log.lock() {
                log.push(entry);
            }
        };
        let Some(listed) = self.tools.get(tool) else {
            record(entry("error", Some(ErrorCode::UnknownTool), None));
            return settle_failed(tool, ErrorCode::UnknownTool, "no such tool in this run");
        };
        let value: Value = match serde_json::from_str(args) {
            Ok(value) => value,
            Err(error) => {
                record(entry("error", Some(ErrorCode::InvalidInput), None));
                return settle_failed(
                    tool,
                    ErrorCode::InvalidInput,
                    &format!("the arguments are not JSON: {error}"),
                );
            }
        };
        if let Err((at, message)) = crate::schema::check(&listed.input_schema, &value) {
            record(entry("error", Some(ErrorCode::InvalidInput), None));
            return settle_failed(tool, ErrorCode::InvalidInput, &format!("{at}: {message}"));
        }
        let mut inner = ToolCall::new(
            tool,
            value,
            self.broker.script_tool_origin(tool),
            self.broker.now_ms(),
        );
        inner.principal = self.outer.principal.clone();
        inner.session = self.outer.session.clone();
        inner.profile = self.outer.profile.clone();
        inner.context_id = self.outer.context_id.clone();
        inner.requester = self.outer.requester.clone();
        inner.tool_call_id = Some(format!("{}:{seq}", self.run_id));
        inner.via = Some(Via {
            run_id: self.run_id.to_owned(),
            seq,
            narrowed_to: self.narrowed_to.map(str::to_owned),
        });
        let waiting: Mutex<Option<crate::driver::Waiting>> = Mutex::new(None);
        let envelope = self.broker.submit_cancellable(
            &inner,
            self.mode,
            &|approval: &Approval| {
                if let Ok(mut pending) = self.pending.lock() {
                    pending.push(approval.id.clone());
                }
                if let Ok(mut waiting) = waiting.lock() {
                    *waiting = Some(human.waiting());
                }
                (self.on_pending)(approval);
            },
            self.cancel,
        );
        drop(waiting);
        let hitl_id = envelope.hitl.as_ref().map(|hitl| hitl.hitl_id.clone());
        let code = envelope.error.as_ref().map(|error| error.code);
        record(entry(envelope.status.as_str(), code, hitl_id.clone()));
        reply_of(tool, listed, &envelope)
    }

    fn ended(&self) {
        // Calls still under way belong to a run that is over: nobody may
        // approve them any more, and their commands stop.
        self.cancel.cancel();
        let pending = self
            .pending
            .lock()
            .map(|ids| ids.clone())
            .unwrap_or_default();
        for id in pending {
            let _ = self.broker.cancel(&id);
        }
    }
}

/// How the script sees a call's envelope.
fn reply_of(tool: &str, listed: &ListedTool, envelope: &Envelope) -> Reply {
    match envelope.status {
        Status::Allowed => {
            let data = envelope.data.clone().unwrap_or(Value::Null);
            // An upstream's result: its structured content when the tool
            // declares an output schema, else the whole result.
            let value = match (&listed.output_schema, data.get("structuredContent")) {
                (Some(_), Some(structured)) => structured.clone(),
                _ => data,
            };
            Reply::Settle {
                kind: Settled::Ok,
                payload: value.to_string(),
            }
        }
        Status::Denied => {
            let error = envelope.error.as_ref();
            let layer = error
                .and_then(|error| error.reason.as_ref())
                .map(|reason| reason.layer.as_str());
            let message = error.map(|error| error.message.clone()).unwrap_or_default();
            if matches!(layer, Some("human" | "timeout")) {
                return Reply::End {
                    status: "denied".to_owned(),
                    message: format!("codemode.{tool}: {message}"),
                };
            }
            let code = error.map_or(ErrorCode::PolicyDenied, |error| error.code);
            // Spec 004's reasons: the call would ask and nobody can be
            // asked, or the policy refuses it.
            let reason = if layer == Some("hitl") {
                "elicitation_unsupported"
            } else {
                "denied"
            };
            Reply::Settle {
                kind: Settled::Denied,
                payload: json!({"tool": tool, "code": code.as_str(), "reason": reason, "message": message})
                    .to_string(),
            }
        }
        Status::HitlRequired => Reply::End {
            status: "hitl_required".to_owned(),
            message: format!(
                "codemode.{tool} waits for a human decision ({})",
                envelope
                    .hitl
                    .as_ref()
                    .map(|hitl| hitl.hitl_id.as_str())
                    .unwrap_or("")
            ),
        },
        Status::Error => {
            let (code, message) = envelope
                .error
                .as_ref()
                .map_or((ErrorCode::IoError, String::new()), |error| {
                    (error.code, error.message.clone())
                });
            settle_failed(tool, code, &message)
        }
    }
}

fn data_status(envelope: &Envelope) -> &str {
    envelope
        .data
        .as_ref()
        .and_then(|data| data.get("status"))
        .and_then(Value::as_str)
        .unwrap_or("error")
}

/// The run's envelope: `data` is `{run_id, status, result, logs,
/// logs_truncated, calls, error?}`.
fn envelope_of(
    call: &ToolCall,
    run_id: &str,
    outcome: &Outcome,
    calls: Vec<CallEntry>,
) -> Envelope {
    let mut calls = calls;
    calls.sort_by_key(|entry| entry.seq);
    let calls: Vec<Value> = calls
        .into_iter()
        .map(|entry| {
            let mut object = Map::new();
            object.insert("seq".to_owned(), json!(entry.seq));
            object.insert("tool".to_owned(), json!(entry.tool));
            object.insert("args_sha256".to_owned(), json!(entry.args_sha256));
            object.insert("status".to_owned(), json!(entry.status));
            if let Some(code) = entry.code {
                object.insert("code".to_owned(), json!(code));
            }
            if let Some(hitl_id) = entry.hitl_id {
                object.insert("hitl_id".to_owned(), json!(hitl_id));
            }
            object.insert("ms".to_owned(), json!(entry.ms));
            Value::Object(object)
        })
        .collect();
    let logs: Vec<Value> = outcome
        .logs
        .iter()
        .map(|(level, text)| json!({"level": level, "text": text}))
        .collect();
    let mut data = json!({
        "run_id": run_id,
        "status": "completed",
        "result": Value::Null,
        "logs": logs,
        "logs_truncated": outcome.logs_truncated,
        "calls": calls,
    });
    let envelope = match &outcome.end {
        End::Done(result) => {
            data["result"] = serde_json::from_str(result).unwrap_or(Value::Null);
            Envelope::new(Status::Allowed, METHOD, &call.tool, None)
        }
        End::Failed(failure) => {
            data["status"] = json!("error");
            data["error"] = failure_json(failure);
            Envelope::failure(
                Status::Error,
                METHOD,
                &call.tool,
                None,
                failure_code(failure.code),
                failure.message.clone(),
            )
        }
        End::Stopped { status, message } => {
            data["status"] = json!(status);
            if status == "hitl_required" {
                let mut envelope = Envelope::failure(
                    Status::HitlRequired,
                    METHOD,
                    &call.tool,
                    None,
                    ErrorCode::PolicyDenied,
                    message.clone(),
                );
                envelope.error = None;
                envelope
            } else {
                let mut envelope = Envelope::failure(
                    Status::Denied,
                    METHOD,
                    &call.tool,
                    None,
                    ErrorCode::PolicyDenied,
                    message.clone(),
                );
                if let Some(error) = &mut envelope.error {
                    error.reason = Some(airlock_core::envelope::ErrorReason::new(
                        "human", "human", None,
                    ));
                }
                envelope
            }
        }
    };
    Envelope {
        data: Some(data),
        ..envelope
    }
}

fn failure_json(failure: &Failure) -> Value {
    let mut error = json!({
        "code": failure_code(failure.code).as_str(),
        "message": failure.message,
    });
    if let Some(line) = failure.line {
        error["line"] = json!(line);
    }
    if let Some(column) = failure.column {
        error["column"] = json!(column);
    }
    error
}

#[cfg(test)]
mod tests {
    use super::strip_fences;

    #[test]
    fn fences_are_blanked_and_lines_stay() {
        assert_eq!(
            strip_fences("```js\nlet a = 1;\na\n```\n"),
            "\nlet a = 1;\na\n\n"
        );
        assert_eq!(strip_fences("let a = 1;"), "let a = 1;");
        assert_eq!(strip_fences("```\n```"), "\n");
    }
}
