//! `codemode_eval` as the broker runs it: the arguments checked, the run
//! audited from start to end, each call the script makes checked against
//! its tool's schema and submitted through the broker with `via: {run_id,
//! seq}`, and the answer one envelope.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use airlock_broker::{Approval, CodeCall, CodeMode, ListedTool, Record, RunProposal, Staging};
use airlock_core::display::safe_line;
use airlock_core::envelope::{Envelope, Status};
use airlock_core::tools::BuiltinTool;
use airlock_core::{ErrorCode, ToolCall, ToolOrigin, Via};
use serde_json::{Map, Value, json};

use crate::driver::Spare;
use crate::driver::{self, End, Host, HumanClock, Isolation, Outcome, Reply};
use crate::dts;
use crate::protocol::{EngineLimits, FailCode, Failure, Settled, Start};
use crate::resume::{Logged, Refused, Suspended, Suspensions, WaitingCall};
use crate::worker::WorkerArgs;

/// The envelope's `op.method` of a run.
pub const METHOD: &str = "codemode.eval";

/// Code mode's engine, as registered with the broker.
#[derive(Debug)]
pub struct CodeTool {
    isolation: Isolation,
    running: AtomicUsize,
    spares: Option<Spares>,
    /// Runs that stopped at a call waiting for a human, to resume.
    suspended: Suspensions,
}

/// Workers started ahead: each run takes the one waiting and asks for the
/// next, which a thread of the tool's own starts (a worker dies with the
/// thread that started it, so not with a run's).
#[derive(Debug)]
struct Spares {
    slot: Arc<Mutex<Option<Spare>>>,
    ask: Mutex<mpsc::Sender<WorkerArgs>>,
}

impl CodeTool {
    pub fn new(isolation: Isolation) -> CodeTool {
        CodeTool {
            isolation,
            running: AtomicUsize::new(0),
            spares: None,
            suspended: Suspensions::default(),
        }
    }

    /// Keeps a worker started ahead for the next run (for a server, which
    /// runs many): a run with no call then costs no process start.
    pub fn with_spares(mut self) -> CodeTool {
        let Isolation::Worker { program } = &self.isolation else {
            return self;
        };
        let program = program.clone();
        let slot: Arc<Mutex<Option<Spare>>> = Arc::default();
        let (ask, asked) = mpsc::channel::<WorkerArgs>();
        let filled = slot.clone();
        let started = std::thread::Builder::new()
            .name("codemode-spares".to_owned())
            .spawn(move || {
                while let Ok(args) = asked.recv() {
                    if let Ok(spare) = driver::spawn_worker(&program, args)
                        && let Ok(mut slot) = filled.lock()
                    {
                        *slot = Some(spare);
                    }
                }
            });
        if started.is_ok() {
            self.spares = Some(Spares {
                slot,
                ask: Mutex::new(ask),
            });
        }
        self
    }

    /// The worker waiting for runs held to `args`, if one is; the next is
    /// asked for at once.
    fn spare(&self, args: WorkerArgs) -> Option<Spare> {
        let spares = self.spares.as_ref()?;
        let taken = spares.slot.lock().ok()?.take();
        if let Ok(ask) = spares.ask.lock() {
            let _ = ask.send(args);
        }
        taken.filter(|spare| spare.args() == args)
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
    /// Required unless `resume` names a run (then, if given, it must be
    /// that run's script).
    code: Option<String>,
    description: Option<String>,
    dry_run: bool,
    /// The id of a run that stopped at a call waiting for a human.
    resume: Option<String>,
}

fn eval_args(args: &Value) -> Result<EvalArgs, String> {
    let Some(object) = args.as_object() else {
        return Err("the arguments must be an object {code, description?}".to_owned());
    };
    if let Some(key) = object
        .keys()
        .find(|key| !["code", "description", "dry_run", "resume"].contains(&key.as_str()))
    {
        return Err(format!(
            "unknown argument `{}` (codemode_eval takes code, description, dry_run and resume)",
            airlock_core::display::safe_text(key)
        ));
    }
    let resume = match object.get("resume") {
        None | Some(Value::Null) => None,
        Some(Value::String(run_id)) => Some(run_id.clone()),
        Some(_) => return Err("`resume` must be a run id (a string)".to_owned()),
    };
    let code = match object.get("code") {
        Some(Value::String(code)) => Some(code.clone()),
        Some(_) => return Err("`code` must be a string".to_owned()),
        None if resume.is_some() => None,
        None => return Err("`code` is required: the script to run".to_owned()),
    };
    let description = match object.get("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(_) => return Err("`description` must be a string".to_owned()),
    };
    let dry_run = match object.get("dry_run") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(flag)) => *flag,
        Some(_) => return Err("`dry_run` must be true or false".to_owned()),
    };
    Ok(EvalArgs {
        code,
        description,
        dry_run,
        resume,
    })
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
        let mut args = match eval_args(&call.args) {
            Ok(args) => args,
            Err(message) => return refuse(ErrorCode::InvalidInput, message),
        };
        let resumed = match &args.resume {
            None => None,
            Some(run_id) => match self.suspended.take(
                run_id,
                &call.principal.owner_key(),
                call.session.as_deref(),
                &call.tool,
                call.profile.as_deref(),
                broker.now_ms(),
            ) {
                Ok(run) => Some(run),
                Err(Refused::NotFound) => {
                    return refuse(
                        ErrorCode::NotFound,
                        format!(
                            "no run {} waits to be resumed by this caller (it ended, expired or is another's)",
                            airlock_core::display::safe_line(run_id)
                        ),
                    );
                }
                Err(Refused::Mismatch(why)) => {
                    return refuse(
                        ErrorCode::InvalidInput,
                        format!(
                            "run {} cannot be resumed here: {why}",
                            airlock_core::display::safe_line(run_id)
                        ),
                    );
                }
            },
        };
        let code = match (&resumed, &args.code) {
            (Some(run), Some(code)) if strip_fences(code) != run.code => {
                self.suspended.keep(run.clone());
                return refuse(
                    ErrorCode::InvalidInput,
                    "`code` is not the script of the run to resume (leave it out to resume)"
                        .to_owned(),
                );
            }
            (Some(run), _) => run.code.clone(),
            (None, Some(code)) => strip_fences(code),
            (None, None) => {
                return refuse(
                    ErrorCode::InvalidInput,
                    "`code` is required: the script to run".to_owned(),
                );
            }
        };
        if let Some(run) = &resumed {
            // What the human was told the script does stays what it was.
            if args.description.is_some() && args.description != run.description {
                self.suspended.keep(run.clone());
                return refuse(
                    ErrorCode::InvalidInput,
                    "`description` is not the one of the run to resume (leave it out to resume)"
                        .to_owned(),
                );
            }
            args.description = run.description.clone();
        }
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
        let discovery = discovery_listed(broker, call.profile.as_deref(), run.narrowed_to);
        let run_id = match &resumed {
            Some(run) => run.run_id.clone(),
            None => format!("run_{}", uuid::Uuid::new_v4().simple()),
        };
        let discovery_names: Vec<String> = if discovery {
            vec![dts::SEARCH_TOOLS.to_owned(), dts::GET_TOOLS.to_owned()]
        } else {
            Vec::new()
        };
        // TypeScript blanked and the text's calls found; a script that does
        // not parse is still a run (audited), one that ends before it starts.
        let prepared = airlock_script::prepare(&code);
        let preview = prepared.as_ref().ok().map(|prepared| {
            let call_of = |tool: &str, value: Value| {
                inner_call(broker, call, &run_id, run.narrowed_to, 0, tool, value)
            };
            crate::preview::check(
                &prepared.preview,
                prepared.language.as_str(),
                &crate::preview::Checker {
                    broker,
                    profile: call.profile.as_deref(),
                    narrowed_to: run.narrowed_to,
                    tools: &tools,
                    discovery: &discovery_names,
                    call_of: &call_of,
                },
            )
        });
        let script_sha256 = airlock_core::canonical::sha256_hex(code.as_bytes());
        // A resumed run sees the same clock and random numbers as before.
        let (seed, now_ms) = match &resumed {
            Some(run) => (run.seed, run.now_ms),
            None => (uuid::Uuid::new_v4().as_u64_pair().0, broker.now_ms()),
        };
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
            .number("now_ms", now_ms)
            .flag("resumed", resumed.is_some())
            .value(
                "preview",
                preview.as_ref().map(|preview| preview.json.clone()),
            );
        if !broker.note(begun) {
            return refuse(
                ErrorCode::IoError,
                "the audit log could not be written; the script was not run".to_owned(),
            );
        }
        let staging = Staging::new();
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
            staging: &staging,
            discovery,
            about: about_run(&run_id, &args, &script_sha256, preview.as_ref()),
            replay: resumed.as_ref().map(|run| Replay {
                log: run.log.clone(),
                waiting: run.waiting.clone(),
            }),
            kept: Mutex::new(BTreeMap::new()),
        };
        let mut names: Vec<String> = tools.keys().cloned().collect();
        names.extend(discovery_names.iter().cloned());
        let runnable = match &prepared {
            Ok(prepared) => prepared.code.clone(),
            Err(_) => String::new(),
        };
        let start = Start {
            code: runnable,
            tools: names,
            limits: limits_of(config),
            seed,
            now_ms,
        };
        let wall = Duration::from_secs(config.wall_seconds().unwrap_or(60));
        let spare = self.spare(WorkerArgs {
            cpu_ms: start.limits.cpu_ms,
            memory_bytes: start.limits.memory_bytes,
        });
        let outcome = match &prepared {
            Ok(_) => driver::run_with(&self.isolation, start, wall, &host, spare),
            Err(error) => Outcome {
                end: End::Failed(Failure {
                    code: FailCode::ParseError,
                    message: error.message.clone(),
                    line: Some(error.line),
                    column: Some(error.column),
                }),
                logs: Vec::new(),
                logs_truncated: false,
                calls: 0,
            },
        };
        let calls = host.log.into_inner().unwrap_or_default();
        let kept = host.kept.into_inner().unwrap_or_default();
        let mut envelope = envelope_of(call, &run_id, &outcome, &calls);
        // A large result is stored as a blob (read back as the resource
        // airlock://blob/sha256/<hex>), and the answer names it.
        if let End::Done(result) = &outcome.end
            && result.len() as u64 > broker.config().file_broker.max_inline_bytes
        {
            match broker.shape_result(result.clone()) {
                Ok((None, Some(blob))) => {
                    if let Some(data) = envelope.data.as_mut() {
                        data["result"] = Value::Null;
                        data["result_blob"] = serde_json::to_value(blob).unwrap_or(Value::Null);
                    }
                }
                Ok(_) => {}
                Err(error) => {
                    envelope = refuse(
                        ErrorCode::IoError,
                        format!("the script's result could not be stored: {error}"),
                    );
                }
            }
        }
        // A run stopped at a call that waits for a human: kept, to resume
        // once the human has decided; the answer names the approval.
        if let End::Stopped { status, .. } = &outcome.end
            && status == "hitl_required"
            && let Some(waiting) = calls
                .iter()
                .find(|entry| entry.status == "hitl_required" && entry.hitl_id.is_some())
            && let Some(hitl_id) = waiting.hitl_id.clone()
        {
            let approval = broker.approval(&hitl_id).ok();
            envelope.hitl = Some(airlock_core::envelope::HitlInfo {
                hitl_id: hitl_id.clone(),
                ttl_seconds: approval.as_ref().map(|approval| {
                    approval
                        .expires_ms
                        .saturating_sub(broker.now_ms())
                        .div_ceil(1000)
                }),
                risk: approval.as_ref().map(|approval| approval.risk),
                summary: approval.as_ref().map(|approval| approval.summary.clone()),
                diff_preview: None,
            });
            let resumable = self.suspended.keep(Suspended {
                run_id: run_id.clone(),
                owner: call.principal.owner_key(),
                session: call.session.clone(),
                tool: call.tool.clone(),
                profile: call.profile.clone(),
                code: code.clone(),
                description: args.description.clone(),
                seed,
                now_ms,
                log: kept,
                waiting: WaitingCall {
                    seq: waiting.seq,
                    tool: waiting.tool.clone(),
                    args_sha256: waiting.args_sha256.clone(),
                    hitl_id,
                },
                expires_ms: approval.map_or(0, |approval| approval.expires_ms),
            });
            if let Some(data) = envelope.data.as_mut() {
                data["resumable"] = json!(resumable);
            }
        }
        // A script that ended well proposes what it staged, once; one that
        // did not leaves nothing behind.
        if matches!(outcome.end, End::Done(_)) && !staging.is_empty() {
            let proposal = RunProposal {
                call,
                report: run_report(
                    &run_id,
                    &script_sha256,
                    &args,
                    &code,
                    &calls,
                    &outcome,
                    preview.as_ref(),
                ),
                preface: preface(&args, &script_sha256, &calls, preview.as_ref()),
                dry_run: args.dry_run,
            };
            if let Some(proposed) =
                broker.propose_staged(staging, proposal, run.mode, run.on_pending)
            {
                envelope = with_proposal(envelope, proposed, args.dry_run);
            }
        }
        if args.dry_run
            && let (Some(data), Some(preview)) = (envelope.data.as_mut(), &preview)
        {
            data["preview"] = preview.json.clone();
        }
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

    fn declarations(
        &self,
        broker: &airlock_broker::Broker,
        profile: Option<&str>,
        narrowed_to: Option<&str>,
    ) -> String {
        let tools = broker.script_tools(profile, narrowed_to);
        dts::declarations(&tools, discovery_listed(broker, profile, narrowed_to))
    }

    fn listing(
        &self,
        broker: &airlock_broker::Broker,
        name: &str,
        profile: Option<&str>,
        narrowed_to: Option<&str>,
    ) -> ListedTool {
        let tools = broker.script_tools(profile, narrowed_to);
        let discovery = discovery_listed(broker, profile, narrowed_to);
        let catalogue = dts::catalogue(&tools, discovery);
        let scope = match narrowed_to {
            Some(narrowed) => format!(
                " Its calls answer to profile `{narrowed}` as well as to the endpoint's: it can only narrow what the script may do."
            ),
            None => String::new(),
        };
        ListedTool {
            name: name.to_owned(),
            description: format!(
                "Runs a short JavaScript (or TypeScript) program that calls tools as `await codemode.<tool>(args)` and returns the value of its last expression (or of a top-level `return`). Every call is checked by airlock's policy like a direct call: a refused call throws a catchable ToolCallDeniedError {{tool, code, reason}}; a call a human denies ends the run. File writes (write_file, edit_file, apply_patch, delete_file, move_file) are staged, not written: later reads, greps and globs of the script see them, and when the script ends they are proposed as one change, approved once and applied together (`dry_run: true` shows the diff and proposes nothing). console.log lines come back in `logs`. No network, files, timers or eval: only codemode.*, console.* and the result.{scope}{catalogue}"
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "code": {"type": "string", "description": "The script: JavaScript, or TypeScript whose types are erased; the body of an async function (top-level await and return work)."},
                    "description": {"type": "string", "description": "What the script does, shown to the human who approves its calls."},
                    "dry_run": {"type": "boolean", "description": "Run the script and return the diff of its staged changes; propose nothing."},
                    "resume": {"type": "string", "description": "The run_id of a run that stopped with hitl_required at a call waiting for a human: once the human has decided, the script runs again, its earlier calls answered from the log, and the waiting call is carried out once. `code` may be left out."},
                    "session_id": {"type": "string", "description": "The session the script and its calls run in (session_open's id); default: this connection's last opened session."}
                },
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
    /// What the script's writes staged.
    staging: &'a Staging,
    /// `search_tools` and `get_tools` are offered.
    discovery: bool,
    /// What a human asked about one of the run's calls reads of the run
    /// (its script, description and static preview), before the calls so
    /// far and the staged diff.
    about: String,
    /// A resumed run's log and the call it stopped at.
    replay: Option<Replay>,
    /// What this run's calls were answered, for a later resume.
    kept: Mutex<BTreeMap<u32, Logged>>,
}

/// What a resumed run replays.
struct Replay {
    log: BTreeMap<u32, Logged>,
    waiting: WaitingCall,
}

// The broker's callbacks are called from the call threads; what they
// touch is shared through locks.
fn settle_failed(tool: &str, code: ErrorCode, message: &str) -> Reply {
    Reply::Settle {
        kind: Settled::Failed,
        payload: json!({"tool": tool, "code": code.as_str(), "message": message}).to_string(),
    }
}

impl BrokerHost<'_> {
    /// `search_tools({query})` and `get_tools({names})`, answered from the
    /// tools this run may call.
    fn discover(&self, tool: &str, args: &str) -> Reply {
        let listed: Vec<ListedTool> = self.tools.values().cloned().collect();
        let value: Value = serde_json::from_str(args).unwrap_or(Value::Null);
        let answer = if tool == dts::SEARCH_TOOLS {
            match value.get("query").and_then(Value::as_str) {
                Some(query) => dts::search(&listed, query),
                None => {
                    return settle_failed(
                        tool,
                        ErrorCode::InvalidInput,
                        "/: `query` (a string) is required",
                    );
                }
            }
        } else {
            match value.get("names").and_then(Value::as_array) {
                Some(names) => {
                    let names: Vec<String> = names
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect();
                    dts::get(&listed, &names)
                }
                None => {
                    return settle_failed(
                        tool,
                        ErrorCode::InvalidInput,
                        "/: `names` (a list of strings) is required",
                    );
                }
            }
        };
        Reply::Settle {
            kind: Settled::Ok,
            payload: answer.to_string(),
        }
    }
}

/// Whether both profiles let a script use `search_tools` and `get_tools`.
fn discovery_listed(
    broker: &airlock_broker::Broker,
    profile: Option<&str>,
    narrowed_to: Option<&str>,
) -> bool {
    [dts::SEARCH_TOOLS, dts::GET_TOOLS].iter().all(|name| {
        broker.policy().lists_tool(profile, name)
            && narrowed_to.is_none_or(|narrowed| broker.policy().lists_tool(Some(narrowed), name))
    })
}

impl BrokerHost<'_> {
    /// Whether a call of `tool` may run again on replay: it only reads or
    /// stages (a built-in file tool, discovery).
    fn repeatable(&self, tool: &str) -> bool {
        matches!(self.broker.script_tool_origin(tool), ToolOrigin::Builtin(_))
            || tool == dts::SEARCH_TOOLS
            || tool == dts::GET_TOOLS
    }

    /// Carries out call `seq` through the broker (or discovery) and says
    /// how the script is answered.
    fn carry_out(
        &self,
        seq: u32,
        tool: &str,
        args: &str,
        args_sha256: &str,
        human: &HumanClock,
    ) -> Reply {
        let started = Instant::now();
        let args_sha256 = args_sha256.to_owned();
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
        if self.discovery && (tool == dts::SEARCH_TOOLS || tool == dts::GET_TOOLS) {
            let reply = self.discover(tool, args);
            let status = match &reply {
                Reply::Settle {
                    kind: Settled::Ok, ..
                } => "allowed",
                _ => "error",
            };
            record(entry(status, None, None));
            return reply;
        }
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
        let inner = inner_call(
            self.broker,
            self.outer,
            self.run_id,
            self.narrowed_to,
            seq,
            tool,
            value,
        );
        let waiting: Mutex<Option<crate::driver::Waiting>> = Mutex::new(None);
        let envelope = self.broker.submit_staged(
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
            self.staging,
            &|| self.context(seq),
        );
        drop(waiting);
        let hitl_id = envelope.hitl.as_ref().map(|hitl| hitl.hitl_id.clone());
        let code = envelope.error.as_ref().map(|error| error.code);
        let staged = envelope
            .data
            .as_ref()
            .and_then(|data| data.get("staged"))
            .is_some_and(|flag| flag == &Value::Bool(true));
        let status = if staged {
            "staged"
        } else {
            envelope.status.as_str()
        };
        record(entry(status, code, hitl_id.clone()));
        reply_of(tool, listed, &envelope)
    }

    /// A resumed run's call `seq`, answered from the log or through the
    /// approval it stopped at; `None` where it runs as in a new run.
    fn replayed(&self, replay: &Replay, seq: u32, tool: &str, args_sha256: &str) -> Option<Reply> {
        let entry = |status: &str, code: Option<ErrorCode>, hitl_id: Option<String>| CallEntry {
            seq,
            tool: tool.to_owned(),
            args_sha256: args_sha256.to_owned(),
            status: status.to_owned(),
            code: code.map(|code| code.as_str().to_owned()),
            hitl_id,
            ms: 0,
        };
        let record = |entry: CallEntry| {
            if let Ok(mut log) = self.log.lock() {
                log.push(entry);
            }
        };
        let (was_tool, was_args) = match replay.log.get(&seq) {
            Some(logged) => (logged.tool.as_str(), logged.args_sha256.as_str()),
            None if seq == replay.waiting.seq => (
                replay.waiting.tool.as_str(),
                replay.waiting.args_sha256.as_str(),
            ),
            // A call made before the one the run stopped at, with no
            // answer logged: it was under way when the run stopped, and
            // whether it took effect is unknown. Only a call that reads or
            // stages may run again.
            None if seq < replay.waiting.seq && !self.repeatable(tool) => {
                record(entry("error", Some(ErrorCode::ReplayDivergence), None));
                return Some(Reply::End {
                    status: "replay_divergence".to_owned(),
                    message: format!(
                        "call {seq} (codemode.{}) was under way when the run stopped, so whether it took effect is unknown; it is not made again, and the run cannot be resumed",
                        safe_line(tool)
                    ),
                });
            }
            None => return None,
        };
        if was_tool != tool || was_args != args_sha256 {
            record(entry("error", Some(ErrorCode::ReplayDivergence), None));
            let what = if was_tool == tool {
                format!("codemode.{} with other arguments", safe_line(tool))
            } else {
                format!("codemode.{}", safe_line(tool))
            };
            return Some(Reply::End {
                status: "replay_divergence".to_owned(),
                message: format!(
                    "the resumed script took another path: its call {seq} was codemode.{} and is {what} now; nothing after it was done",
                    safe_line(was_tool)
                ),
            });
        }
        if let Some(logged) = replay.log.get(&seq) {
            let reply = logged.reply.clone()?;
            record(entry("replayed", None, None));
            return Some(reply);
        }
        // The call the run stopped at: carried out once its approval is
        // decided (the broker applies an approval once), or stopped at again.
        let hitl_id = replay.waiting.hitl_id.clone();
        let Some(listed) = self.tools.get(tool) else {
            record(entry("error", Some(ErrorCode::UnknownTool), None));
            return Some(settle_failed(
                tool,
                ErrorCode::UnknownTool,
                "no such tool in this run",
            ));
        };
        match self.broker.approval(&hitl_id) {
            Ok(approval) if approval.status == airlock_broker::ApprovalStatus::Pending => {
                record(entry("hitl_required", None, Some(hitl_id)));
                Some(Reply::End {
                    status: "hitl_required".to_owned(),
                    message: format!(
                        "call {seq} (codemode.{}) still waits for a human",
                        safe_line(tool)
                    ),
                })
            }
            Ok(_) => {
                let envelope = self.broker.wait(&hitl_id);
                record(entry(
                    envelope.status.as_str(),
                    envelope.error.as_ref().map(|e| e.code),
                    Some(hitl_id),
                ));
                Some(reply_of(tool, listed, &envelope))
            }
            Err(error) => {
                record(entry("error", Some(error.code()), Some(hitl_id)));
                Some(settle_failed(tool, error.code(), &error.to_string()))
            }
        }
    }

    /// The run so far, for a human asked about its call `seq`.
    fn context(&self, seq: u32) -> String {
        let mut text = format!("This is call {seq} of a code-mode script.\n{}", self.about);
        let calls = self.log.lock().map(|log| sorted(&log)).unwrap_or_default();
        if calls.is_empty() {
            text.push_str("It has made no other call so far.\n");
        } else {
            text.push_str(&format!("Its calls so far ({}):\n", calls.len()));
            for entry in calls.iter().rev().take(30).rev() {
                text.push_str(&format!(
                    "  {}. {} ({})\n",
                    entry.seq,
                    airlock_core::display::safe_line(&entry.tool),
                    entry.status
                ));
            }
        }
        text
    }
}

/// What every ask of a run says of it: the run, what the script says it
/// does, its hash and its static preview.
fn about_run(
    run_id: &str,
    args: &EvalArgs,
    script_sha256: &str,
    preview: Option<&crate::preview::RunPreview>,
) -> String {
    let mut text = format!("Run {run_id}, script sha256 {script_sha256}.\n");
    if let Some(description) = &args.description {
        text.push_str(&format!(
            "What it says it does: {}\n",
            airlock_core::display::safe_line(description)
        ));
    }
    if let Some(preview) = preview {
        text.push_str(&preview.text);
    }
    text
}

impl Host for BrokerHost<'_> {
    fn call(&self, seq: u32, tool: &str, args: &str, human: &HumanClock) -> Reply {
        let args_sha256 = airlock_core::canonical::sha256_hex(args.as_bytes());
        let reply = match self
            .replay
            .as_ref()
            .and_then(|replay| self.replayed(replay, seq, tool, &args_sha256))
        {
            Some(reply) => reply,
            None => self.carry_out(seq, tool, args, &args_sha256, human),
        };
        // Kept for a resume: what the script was answered, except where the
        // call runs again (a built-in file tool, discovery) or the run ends.
        if let Reply::Settle { .. } = &reply
            && let Ok(mut kept) = self.kept.lock()
        {
            let again = self.repeatable(tool);
            kept.insert(
                seq,
                Logged {
                    tool: tool.to_owned(),
                    args_sha256: args_sha256.clone(),
                    reply: (!again).then(|| reply.clone()),
                },
            );
        }
        reply
    }

    fn quick(&self, tool: &str) -> bool {
        // Discovery, reads (which never ask: a read that needs approval is
        // refused) and staged writes (decided, never asked mid-run).
        (self.discovery && (tool == dts::SEARCH_TOOLS || tool == dts::GET_TOOLS))
            || matches!(
                self.broker.script_tool_origin(tool),
                ToolOrigin::Builtin(
                    BuiltinTool::ReadFile
                        | BuiltinTool::Grep
                        | BuiltinTool::Glob
                        | BuiltinTool::ListDir
                        | BuiltinTool::Stat
                        | BuiltinTool::Exists
                        | BuiltinTool::WriteFile
                        | BuiltinTool::EditFile
                        | BuiltinTool::ApplyPatch
                        | BuiltinTool::DeleteFile
                        | BuiltinTool::MoveFile
                )
            )
    }

    fn console(&self, level: &str, text: &str) {
        airlock_broker::progress::say(&format!("console.{level}: {text}"));
    }

    fn progress(&self, seq: u32, tool: &str, ended: Option<&Reply>) {
        if !airlock_broker::progress::listening() {
            return;
        }
        let message = match ended {
            None => format!("call {seq}: codemode.{tool} …"),
            Some(Reply::Settle { kind, .. }) => {
                let outcome = match kind {
                    Settled::Ok => "done",
                    Settled::Denied => "refused",
                    Settled::Failed => "failed",
                };
                format!("call {seq}: codemode.{tool} {outcome}")
            }
            Some(Reply::End { status, .. }) => {
                format!("call {seq}: codemode.{tool} {status}, the run ends")
            }
        };
        airlock_broker::progress::say(&message);
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

/// The call a script's call to `tool` with `value` is, as `seq` of the
/// run: the outer call's principal, session and profile, and `via`.
fn inner_call(
    broker: &airlock_broker::Broker,
    outer: &ToolCall,
    run_id: &str,
    narrowed_to: Option<&str>,
    seq: u32,
    tool: &str,
    value: Value,
) -> ToolCall {
    let mut inner = ToolCall::new(
        tool,
        value,
        broker.script_tool_origin(tool),
        broker.now_ms(),
    );
    inner.principal = outer.principal.clone();
    inner.session = outer.session.clone();
    // The run's session binds its calls (DESIGN §5.3).
    inner.scope = outer.scope.clone();
    inner.profile = outer.profile.clone();
    inner.context_id = outer.context_id.clone();
    inner.requester = outer.requester.clone();
    inner.tool_call_id = Some(format!("{run_id}:{seq}"));
    inner.via = Some(Via {
        run_id: run_id.to_owned(),
        seq,
        narrowed_to: narrowed_to.map(str::to_owned),
    });
    inner
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
fn envelope_of(call: &ToolCall, run_id: &str, outcome: &Outcome, calls: &[CallEntry]) -> Envelope {
    let calls: Vec<Value> = sorted(calls)
        .iter()
        .map(|entry| {
            let mut object = Map::new();
            object.insert("seq".to_owned(), json!(entry.seq));
            object.insert("tool".to_owned(), json!(entry.tool));
            object.insert("args_sha256".to_owned(), json!(entry.args_sha256));
            object.insert("status".to_owned(), json!(entry.status));
            if let Some(code) = &entry.code {
                object.insert("code".to_owned(), json!(code));
            }
            if let Some(hitl_id) = &entry.hitl_id {
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
        End::Stopped { status, message } if status == "replay_divergence" => {
            data["status"] = json!("error");
            data["error"] =
                json!({"code": ErrorCode::ReplayDivergence.as_str(), "message": message});
            Envelope::failure(
                Status::Error,
                METHOD,
                &call.tool,
                None,
                ErrorCode::ReplayDivergence,
                message.clone(),
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

fn sorted(calls: &[CallEntry]) -> Vec<CallEntry> {
    let mut calls = calls.to_vec();
    calls.sort_by_key(|entry| entry.seq);
    calls
}

/// The most of the console a proposal keeps.
const CONSOLE_EXCERPT_BYTES: usize = 4096;

/// The run, as its proposal's report keeps it.
fn run_report(
    run_id: &str,
    script_sha256: &str,
    args: &EvalArgs,
    code: &str,
    calls: &[CallEntry],
    outcome: &Outcome,
    preview: Option<&crate::preview::RunPreview>,
) -> Map<String, Value> {
    let mut console = String::new();
    for (level, text) in &outcome.logs {
        let line = format!("[{level}] {text}\n");
        if console.len() + line.len() > CONSOLE_EXCERPT_BYTES {
            console.push_str("…\n");
            break;
        }
        console.push_str(&line);
    }
    let calls: Vec<Value> = sorted(calls)
        .iter()
        .map(|entry| json!({"seq": entry.seq, "tool": entry.tool, "args_sha256": entry.args_sha256, "status": entry.status}))
        .collect();
    let mut report = Map::new();
    report.insert("run_id".to_owned(), json!(run_id));
    report.insert("script_sha256".to_owned(), json!(script_sha256));
    report.insert("script".to_owned(), json!(code));
    report.insert("description".to_owned(), json!(args.description));
    report.insert("calls".to_owned(), json!(calls));
    report.insert("console".to_owned(), json!(console));
    if let Some(preview) = preview {
        report.insert("preview".to_owned(), preview.json.clone());
    }
    report
}

/// What the human reads before the run's diff.
fn preface(
    args: &EvalArgs,
    script_sha256: &str,
    calls: &[CallEntry],
    preview: Option<&crate::preview::RunPreview>,
) -> String {
    let mut text = String::from("A code-mode script wants to make these changes, all at once.\n");
    if let Some(description) = &args.description {
        text.push_str(&format!(
            "What it says it does: {}\n",
            airlock_core::display::safe_line(description)
        ));
    }
    text.push_str(&format!("Script: {script_sha256}\n"));
    let calls = sorted(calls);
    text.push_str(&format!("Its {} calls:\n", calls.len()));
    for entry in calls.iter().take(50) {
        text.push_str(&format!(
            "  {}. {} ({})\n",
            entry.seq, entry.tool, entry.status
        ));
    }
    if calls.len() > 50 {
        text.push_str(&format!("  … and {} more\n", calls.len() - 50));
    }
    if let Some(preview) = preview {
        text.push_str(&preview.text);
    }
    text.push('\n');
    text
}

/// The run's envelope once its changes were proposed: applied, waiting
/// for a human, refused or failed, with what was staged.
fn with_proposal(run: Envelope, proposed: Envelope, dry_run: bool) -> Envelope {
    let mut data = run.data.clone().unwrap_or(Value::Null);
    let mut staged = json!({});
    if let Some(found) = proposed.data.as_ref() {
        for key in [
            "changed_paths",
            "summary",
            "plan_hash",
            "patch_hash",
            "diff",
            "dry_run",
        ] {
            if let Some(value) = found.get(key) {
                staged[key] = value.clone();
            }
        }
    }
    if let Some(hitl) = &proposed.hitl {
        staged["hitl_id"] = json!(hitl.hitl_id);
    }
    staged["status"] = json!(proposed.status.as_str());
    if dry_run {
        staged["dry_run"] = json!(true);
    }
    data["staged"] = staged;
    let status = match proposed.status {
        Status::Allowed => "completed",
        Status::HitlRequired => "hitl_required",
        Status::Denied => "denied",
        Status::Error => "error",
    };
    data["status"] = json!(status);
    if let Some(error) = &proposed.error {
        data["error"] = json!({"code": error.code.as_str(), "message": error.message});
    }
    Envelope {
        status: proposed.status,
        data: Some(data),
        hitl: proposed.hitl,
        error: proposed.error,
        decision: proposed.decision,
        audit: proposed.audit,
        ..run
    }
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
