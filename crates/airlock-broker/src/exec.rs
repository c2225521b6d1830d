//! The shell tool (DESIGN §5.1): an allowed command runs for real in the
//! sandbox; an asking one runs first in a copy-on-write overlay of the
//! workspace, and its file changes become the plan a human approves, applied
//! through the change engine without running it again.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use airlock_core::ToolCall;
use airlock_core::config::{ExecPreview, ExecSandbox};
use airlock_core::envelope::{DecisionInfo, Envelope, HitlInfo, Status};
use airlock_core::error_code::ErrorCode;
use airlock_core::plan::{ExecRun, Plan};
use airlock_core::policy::{Decision, Disposition, Protected};
use airlock_core::session::{self, Authority, Network, RootMode};
use airlock_core::tools::BuiltinTool;
use airlock_fs::{Access, CommandChange, FileKind, FsError, OutputMode};

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::broker::Broker;
use crate::propose::{Planned, Shown};
use crate::record::Record;
use crate::submit::Handling;
use crate::{Approval, Mode};
use airlock_exec::Cancel;
use airlock_store::Created;

const METHOD: &str = "exec.run";

/// `exec`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecParams {
    /// A bash command line.
    #[serde(default)]
    pub command: Option<String>,
    /// A program and its arguments, run without a shell.
    #[serde(default)]
    pub argv: Option<Vec<String>>,
    /// The working directory, relative to the workspace root.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Variables added to the environment (each one asks).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Text fed to the command's standard input.
    #[serde(default)]
    pub stdin: Option<String>,
    /// At most `exec.timeout`.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub output_mode: OutputMode,
}

/// The most entries beside a session's roots its commands can be kept from.
const MAX_HIDDEN: usize = 4096;

/// Where a command runs.
pub(crate) struct Place {
    /// The root of its sandbox: writable unless in `read_only`.
    root: PathBuf,
    /// `root`, workspace-relative (`""`: the workspace).
    prefix: String,
    /// Hidden from it beside airlock's own state.
    hidden: Vec<PathBuf>,
    /// Read-only for it beside the configuration and `.git`.
    read_only: Vec<PathBuf>,
    /// Its default working directory.
    workdir: PathBuf,
}

impl Broker {
    /// An `exec` call the policy did not deny. Cancelling `cancel` kills
    /// the command it runs (or previews).
    #[expect(clippy::too_many_arguments, reason = "the steps of one call")]
    pub(crate) fn exec(
        &self,
        call: &ToolCall,
        decision: &Decision,
        mode: &Mode,
        on_pending: &dyn Fn(&Approval),
        base: Record,
        now: u64,
        cancel: &Cancel,
    ) -> Envelope {
        let params: ExecParams = match serde_json::from_value(call.args.clone()) {
            Ok(params) => params,
            Err(error) => return self.invalid(call, None, &error.to_string(), base),
        };
        let network = self.config.exec.network
            || self
                .policy
                .exec_verdict(&call.args)
                .is_some_and(|verdict| verdict.network);
        let scope = call.scope.as_deref();
        // A session's commands are reached by its signal and its close.
        if let (Some(_), Some(session)) = (scope, call.session.as_deref()) {
            self.sessions.cancel_of(session).reach(cancel);
        }
        let place = match self.exec_place(scope) {
            Ok(place) => place,
            Err(message) => return self.invalid(call, None, &message, base),
        };
        let run = match self.exec_run(&params, network, cancel, scope, &place) {
            Ok(run) => run,
            Err(message) => return self.invalid(call, None, &message, base),
        };
        let sandbox = match self.exec_sandbox(&place) {
            Ok(sandbox) => sandbox,
            Err(error) => {
                return self.exec_failure(
                    call,
                    decision,
                    ErrorCode::SandboxUnavailable,
                    &error.to_string(),
                    None,
                    base,
                );
            }
        };
        if decision.disposition == Disposition::Allow {
            return match sandbox.run(&run) {
                Ok(output) => self.exec_ran(call, decision, &output, params.output_mode, base),
                Err(error) => self.exec_failure(
                    call,
                    decision,
                    ErrorCode::ExecFailed,
                    &error.to_string(),
                    None,
                    base,
                ),
            };
        }

        // It asks: previewed, and its changes proposed; or, where it cannot
        // be previewed, proposed as the command, run once approved.
        let exec = &self.config.exec;
        if exec.preview != ExecPreview::Overlay || run.network || exec.sandbox == ExecSandbox::None
        {
            let why = if run.network {
                "it may use the network"
            } else if exec.sandbox == ExecSandbox::None {
                "exec.sandbox is none"
            } else {
                "exec.preview is not overlay"
            };
            return self.propose_exec_run(
                call, decision, mode, on_pending, base, now, &params, network, why, cancel,
            );
        }
        let preview = match sandbox.preview(&run) {
            Ok(preview) => preview,
            Err(error) => {
                return self.exec_failure(
                    call,
                    decision,
                    ErrorCode::ExecFailed,
                    &error.to_string(),
                    None,
                    base,
                );
            }
        };
        if preview.output.cancelled {
            return self.exec_cancelled(call, decision, base);
        }
        if preview.output.timed_out {
            let data = self.exec_data(&preview.output, params.output_mode).ok();
            return self.exec_failure(
                call,
                decision,
                ErrorCode::ExecTimeout,
                &format!(
                    "the command ran past its {} s timeout while it was previewed and was killed; nothing was proposed",
                    run.timeout.as_secs()
                ),
                data,
                base,
            );
        }
        let exit_code = preview.output.exit_code;
        let preamble = output_preamble(&shown_command(&params), &preview.output);
        let (changes, mut report) =
            match self.exec_changes(preview, params.output_mode, &place.prefix) {
                Ok(found) => found,
                Err(error) => {
                    return self.exec_failure(
                        call,
                        decision,
                        error.code(),
                        &error.to_string(),
                        None,
                        base,
                    );
                }
            };
        report.insert("previewed".to_owned(), Value::Bool(true));
        let shown = airlock_core::display::safe_line(&shown_command(&params)).into_owned();
        let summary = format!(
            "RUN {} (exit {}; {} file{} changed)",
            shorten(&shown, 160),
            exit_code.map_or_else(|| "by signal".to_owned(), |code| code.to_string()),
            changes.len(),
            if changes.len() == 1 { "" } else { "s" }
        );
        // In a session, a change outside its roots is refused here.
        let planned = self
            .sandbox_of_roots(call.scope.as_deref())
            .and_then(|sandbox| {
                airlock_fs::prepare_command_changes(&sandbox, summary, changes, report)
            })
            // What the human reads first: the command and what it printed,
            // then the changes.
            .map(|plan| Planned::Command(plan, preamble));
        self.write_planned(call, decision, planned, mode, on_pending, base, now)
    }

    /// Proposes running `call` once approved (it cannot be previewed):
    /// the approval shows the command, marked as not previewed.
    #[expect(clippy::too_many_arguments, reason = "the steps of one call")]
    fn propose_exec_run(
        &self,
        call: &ToolCall,
        decision: &Decision,
        mode: &Mode,
        on_pending: &dyn Fn(&Approval),
        base: Record,
        now: u64,
        params: &ExecParams,
        network: bool,
        why: &str,
        cancel: &Cancel,
    ) -> Envelope {
        let handling = self.handling(mode, decision);
        match handling {
            Handling::Refuse => {
                return self.refused_by_fallback(
                    call,
                    decision,
                    None,
                    METHOD,
                    base.event("tool_call"),
                );
            }
            // `elicitation_fallback: allow`: it runs as if allowed.
            Handling::Allow => {
                let scope = call.scope.as_deref();
                let run = match self.exec_place(scope).and_then(|place| {
                    Ok((
                        self.exec_run(params, network, cancel, scope, &place)?,
                        place,
                    ))
                }) {
                    Ok(run) => run,
                    Err(message) => return self.invalid(call, None, &message, base),
                };
                let (run, place) = run;
                return match self
                    .exec_sandbox(&place)
                    .map_err(|error| error.to_string())
                    .and_then(|sandbox| sandbox.run(&run).map_err(|error| error.to_string()))
                {
                    Ok(output) => self.exec_ran(call, decision, &output, params.output_mode, base),
                    Err(message) => self.exec_failure(
                        call,
                        decision,
                        ErrorCode::ExecFailed,
                        &message,
                        None,
                        base,
                    ),
                };
            }
            _ => {}
        }
        let shown = airlock_core::display::safe_line(&shown_command(params)).into_owned();
        let plan = Plan::ExecRun(ExecRun {
            args: call.args.clone(),
            network,
            unpreviewed: why.to_owned(),
            scope: call.scope.as_deref().cloned(),
        });
        let new = self.new_approval(
            call,
            decision,
            Shown {
                path: None,
                summary: format!(
                    "RUN {} (not previewed: {why}; it runs once approved)",
                    shorten(&shown, 160)
                ),
                diff: shown,
                plan,
            },
            now,
            self.ttl_seconds(true, handling, decision),
            None,
        );
        let (approval, deduplicated) = match self.store.create_approval(&new, self.pending_limits())
        {
            Ok(Created::New(approval)) => (approval, false),
            Ok(Created::Existing(approval)) => (approval, true),
            Err(error) => {
                let error = crate::BrokerError::from(error);
                return self.exec_failure(
                    call,
                    decision,
                    error.code(),
                    &error.to_string(),
                    None,
                    base,
                );
            }
        };
        let mut record = base
            .event("tool_call_propose")
            .text("hitl_id", &approval.id)
            .text("status", "hitl_required")
            .flag("previewed", false);
        if deduplicated {
            record = record.flag("deduplicated", true);
        }
        let propose_audit = match self.append_record(record, airlock_audit::Durability::Now) {
            Ok(audit) => audit,
            Err(error) => {
                if !deduplicated {
                    self.cancel_unaudited(&approval.id);
                }
                return crate::envelopes::audit_unwritable(METHOD, &call.tool, None, &error);
            }
        };
        match handling {
            Handling::Wait => {
                on_pending(&approval);
                self.wait(&approval.id)
            }
            Handling::ApproveNow { user, reason } => {
                self.approve_now(call, None, METHOD, &approval, user, reason)
            }
            Handling::Defer | Handling::Rounds | Handling::Refuse | Handling::Allow => {
                let mut envelope = Envelope::new(Status::HitlRequired, METHOD, &call.tool, None);
                let ttl = approval
                    .expires_ms
                    .saturating_sub(self.now_ms())
                    .div_ceil(1000);
                envelope.hitl = Some(HitlInfo {
                    hitl_id: approval.id.clone(),
                    ttl_seconds: Some(ttl),
                    risk: Some(decision.risk),
                    summary: Some(approval.summary.clone()),
                    diff_preview: None,
                });
                envelope.data = Some(json!({"previewed": false, "why": why}));
                envelope.audit = Some(propose_audit);
                envelope
            }
        }
    }

    /// Runs an approved command that was not previewed: over an overlay
    /// (with the network if it may use it), its file changes then applied
    /// through the change engine (so they can be undone); without a sandbox,
    /// for real.
    pub(crate) fn commit_exec_run(
        &self,
        approval: &Approval,
        plan: &ExecRun,
        decision: DecisionInfo,
        recovering: bool,
    ) -> Envelope {
        let fail = |code: ErrorCode, message: String| {
            self.apply_failed(approval, &decision, code, message)
        };
        if recovering {
            // A process died while running it: whether it ran is unknown,
            // and it never runs twice.
            return fail(
                ErrorCode::ExecFailed,
                "the process running this command went away; it is not run again".to_owned(),
            );
        }
        let params: ExecParams = match serde_json::from_value(plan.args.clone()) {
            Ok(params) => params,
            Err(error) => return fail(ErrorCode::InvalidInput, error.to_string()),
        };
        // Approved: it runs to its end or its timeout, whoever waits, under
        // the authority of the session it was proposed in (never when it
        // was proposed after that session ended).
        if let Err(error) = self.apply_sandbox(approval) {
            return fail(error.code(), error.to_string());
        }
        let scope = plan.scope.as_ref();
        let place = match self.exec_place(scope) {
            Ok(place) => place,
            Err(message) => return fail(ErrorCode::RootNotAllowed, message),
        };
        let run = match self.exec_run(&params, plan.network, &Cancel::new(), scope, &place) {
            Ok(run) => run,
            Err(message) => return fail(ErrorCode::InvalidInput, message),
        };
        let sandbox = match self.exec_sandbox(&place) {
            Ok(sandbox) => sandbox,
            Err(error) => return fail(ErrorCode::SandboxUnavailable, error.to_string()),
        };
        if self.config.exec.sandbox == ExecSandbox::None {
            let output = match sandbox.run(&run) {
                Ok(output) => output,
                Err(error) => return fail(ErrorCode::ExecFailed, error.to_string()),
            };
            let data = self
                .exec_data(&output, params.output_mode)
                .unwrap_or(Value::Null);
            let change = airlock_fs::new_plan(
                "exec",
                approval.summary.clone(),
                Vec::new(),
                &[],
                match data {
                    Value::Object(map) => map,
                    _ => Map::new(),
                },
            );
            return self.applied(approval, &change, Vec::new(), decision, false);
        }
        let preview = match sandbox.preview(&run) {
            Ok(preview) => preview,
            Err(error) => return fail(ErrorCode::ExecFailed, error.to_string()),
        };
        let (changes, mut report) =
            match self.exec_changes(preview, params.output_mode, &place.prefix) {
                Ok(found) => found,
                Err(error) => return fail(error.code(), error.to_string()),
            };
        report.insert("previewed".to_owned(), Value::Bool(false));
        let sandbox = match self.sandbox_of_roots(scope) {
            Ok(sandbox) => sandbox,
            Err(error) => return fail(error.code(), error.to_string()),
        };
        match airlock_fs::prepare_command_changes(
            &sandbox,
            approval.summary.clone(),
            changes,
            report,
        ) {
            Ok(change) => self.commit_change(approval, &change, decision, false),
            Err(error) => fail(error.code(), error.to_string()),
        }
    }

    /// A finished overlay run as the changes to apply and the report (its
    /// output, what is not applied).
    fn exec_changes(
        &self,
        preview: airlock_exec::Preview,
        mode: OutputMode,
        prefix: &str,
    ) -> Result<(Vec<CommandChange>, Map<String, Value>), FsError> {
        let mut report = match self.exec_data(&preview.output, mode)? {
            Value::Object(report) => report,
            _ => Map::new(),
        };
        let mut changes = Vec::new();
        let mut not_applied = Vec::new();
        for change in preview.changes {
            // Relative to where the command ran: the workspace, or the root
            // of a session's.
            let path = change.path().to_string_lossy().into_owned();
            let path = if prefix.is_empty() {
                path
            } else {
                format!("{prefix}/{path}")
            };
            match change {
                airlock_exec::Change::Write {
                    content,
                    executable,
                    ..
                } => changes.push(CommandChange {
                    path,
                    after: Some(content),
                    executable,
                }),
                airlock_exec::Change::Delete { .. } => changes.push(CommandChange {
                    path,
                    after: None,
                    executable: false,
                }),
                airlock_exec::Change::Unsupported { what, .. } => {
                    not_applied.push(json!({"path": path, "what": what}));
                }
            }
        }
        if !not_applied.is_empty() {
            report.insert("not_applied".to_owned(), Value::Array(not_applied));
        }
        Ok((changes, report))
    }

    /// The run `params` ask for, within `exec:`'s limits.
    fn exec_run(
        &self,
        params: &ExecParams,
        network: bool,
        cancel: &Cancel,
        scope: Option<&Authority>,
        place: &Place,
    ) -> Result<airlock_exec::Run, String> {
        let exec = &self.config.exec;
        let program = match (&params.command, &params.argv) {
            (Some(command), None) => airlock_exec::Program::Shell(command.clone()),
            (None, Some(argv)) if !argv.is_empty() => airlock_exec::Program::Argv(argv.clone()),
            (None, Some(_)) => return Err("argv is empty".to_owned()),
            _ => return Err("give command (a string) or argv (a list), not both".to_owned()),
        };
        if [params.command.as_deref(), params.stdin.as_deref()]
            .into_iter()
            .flatten()
            .chain(params.argv.iter().flatten().map(String::as_str))
            .any(|text| text.contains('\0'))
        {
            return Err("the command holds a NUL byte".to_owned());
        }
        let cwd = match params.cwd.as_deref() {
            None | Some("") | Some(".") => place.workdir.clone(),
            Some(cwd) => {
                let target = self
                    .sandbox_in(scope)
                    .and_then(|sandbox| sandbox.resolve("cwd", cwd, Access::Read))
                    .map_err(|error| error.to_string())?;
                if target.kind() != Some(FileKind::Directory) {
                    return Err(format!("cwd `{cwd}` is not a directory"));
                }
                self.root.join(target.resolved())
            }
        };
        let mut env: Vec<(String, String)> = exec
            .env_allow
            .iter()
            .filter_map(|name| std::env::var(name).ok().map(|value| (name.clone(), value)))
            .collect();
        // A session's variables, filtered when it was opened.
        for (name, value) in scope.iter().flat_map(|scope| &scope.env) {
            env.retain(|(existing, _)| existing != name);
            env.push((name.clone(), value.clone()));
        }
        for (name, value) in &params.env {
            let valid = !name.is_empty()
                && name.bytes().enumerate().all(|(i, b)| {
                    b == b'_' || b.is_ascii_alphabetic() || (i > 0 && b.is_ascii_digit())
                });
            if !valid || value.contains('\0') {
                return Err(format!("env `{name}` is not a variable name and value"));
            }
            env.retain(|(existing, _)| existing != name);
            env.push((name.clone(), value.clone()));
        }
        let mut limit = exec.timeout_seconds().unwrap_or(120).saturating_mul(1000);
        let mut max_output = exec.max_output_bytes;
        // A session only narrows: its network (a list of domains cannot be
        // held to in the sandbox, so it is none there), its limits.
        let network = match scope.map(|scope| &scope.network) {
            None | Some(Network::Full) => network,
            Some(Network::None | Network::Allow(_)) => false,
        };
        if let Some(scope) = scope {
            limit = scope.exec_timeout_ms(limit);
            if let Some(most) = scope.limits.max_output_bytes {
                max_output = max_output.min(most);
            }
        }
        let timeout_ms = params.timeout_ms.unwrap_or(limit).clamp(1, limit.max(1));
        Ok(airlock_exec::Run {
            program,
            cwd,
            env,
            stdin: params.stdin.clone().unwrap_or_default().into_bytes(),
            timeout: Duration::from_millis(timeout_ms),
            max_output_bytes: usize::try_from(max_output).unwrap_or(usize::MAX),
            network,
            max_processes: exec.max_processes,
            max_memory_bytes: exec.max_memory_bytes,
            cancel: cancel.clone(),
        })
    }

    /// The sandbox a command runs in at `place` (`exec.sandbox: none`:
    /// none).
    fn exec_sandbox(
        &self,
        place: &Place,
    ) -> Result<airlock_exec::Sandbox, airlock_exec::ExecError> {
        if self.config.exec.sandbox == ExecSandbox::None {
            return airlock_exec::Sandbox::unconfined(&place.root);
        }
        let mut hidden = place.hidden.clone();
        let mut read_only = place.read_only.clone();
        for (path, what) in self.policy.protected_paths() {
            let path = self.root.join(PathBuf::from(path));
            match what {
                Protected::StateDir | Protected::AuditLog => hidden.push(path),
                Protected::ConfigFile | Protected::Git => read_only.push(path),
            }
        }
        airlock_exec::Sandbox::new(&place.root, &hidden, &read_only)
    }

    /// Where a command of a call in `scope` runs (DESIGN §5.3): without a
    /// session, the workspace; in one, the root holding its working
    /// directory (writable only if that root is), the session's other
    /// roots readable, and everything else of the workspace hidden.
    pub(crate) fn exec_place(&self, scope: Option<&Authority>) -> Result<Place, String> {
        let Some(scope) = scope else {
            return Ok(Place {
                root: self.root.clone(),
                prefix: String::new(),
                hidden: Vec::new(),
                read_only: Vec::new(),
                workdir: self.root.clone(),
            });
        };
        let partial = !scope.roots.iter().any(|root| root.path.is_empty());
        if partial && self.config.exec.sandbox == ExecSandbox::None {
            return Err(
                "exec.sandbox is none: a session over part of the workspace cannot keep a command to its roots, so it runs none"
                    .to_owned(),
            );
        }
        let Some(home) = scope.root_of(&scope.workdir) else {
            return Err(format!(
                "the session's workdir `{}` is in none of its roots",
                scope.workdir
            ));
        };
        let absolute = |rel: &str| {
            if rel.is_empty() {
                self.root.clone()
            } else {
                self.root.join(rel)
            }
        };
        let mut read_only: Vec<PathBuf> = scope
            .roots
            .iter()
            .filter(|root| root.mode == RootMode::Ro && session::is_within(&root.path, &home.path))
            .map(|root| absolute(&root.path))
            .collect();
        if home.mode == RootMode::Ro {
            read_only.push(absolute(&home.path));
        }
        // A partial session's commands see git's directory (read-only, as
        // every command does: git works from a sub-directory) and nothing
        // else of airlock's beside its roots: the configuration is hidden.
        let protected = [".git".to_owned()];
        if home.path.is_empty() || !self.root.join(".git").exists() {
            // The workspace's own `.git` is the exec sandbox's business.
        } else {
            read_only.push(self.root.join(".git"));
        }
        let roots: Vec<&str> = scope.roots.iter().map(|root| root.path.as_str()).collect();
        let mut hidden = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for root in &roots {
            let mut dir = String::new();
            for part in root.split('/').filter(|part| !part.is_empty()) {
                if seen.insert(dir.clone()) {
                    let entries = std::fs::read_dir(absolute(&dir))
                        .map_err(|error| format!("cannot list `{dir}`: {error}"))?;
                    for entry in entries.flatten() {
                        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                            // A name that is no UTF-8 cannot be in a root.
                            hidden.push(entry.path());
                            continue;
                        };
                        let rel = if dir.is_empty() {
                            name
                        } else {
                            format!("{dir}/{name}")
                        };
                        let kept = roots.iter().any(|root| {
                            session::is_within(root, &rel) || session::is_within(&rel, root)
                        }) || protected.contains(&rel);
                        // A symlink is not followed by a mount; what it
                        // leads to is hidden or kept under its own name.
                        let link = entry.file_type().is_ok_and(|kind| kind.is_symlink());
                        if !kept && !link {
                            hidden.push(entry.path());
                        }
                    }
                    if hidden.len() > MAX_HIDDEN {
                        return Err(format!(
                            "more than {MAX_HIDDEN} entries beside the session's roots would have to be hidden from its commands; open it on roots nearer the workspace root"
                        ));
                    }
                }
                dir = if dir.is_empty() {
                    part.to_owned()
                } else {
                    format!("{dir}/{part}")
                };
            }
        }
        Ok(Place {
            root: absolute(&home.path),
            prefix: home.path.clone(),
            hidden,
            read_only,
            workdir: absolute(&scope.workdir),
        })
    }

    /// The data of a finished run: exit code or signal, output (a blob
    /// beyond `max_inline_bytes`), duration, truncation.
    fn exec_data(&self, output: &airlock_exec::Output, mode: OutputMode) -> Result<Value, FsError> {
        let mut data = Map::new();
        data.insert("exit_code".to_owned(), json!(output.exit_code));
        if let Some(signal) = output.signal {
            data.insert("signal".to_owned(), json!(signal));
        }
        for (name, bytes) in [("stdout", &output.stdout), ("stderr", &output.stderr)] {
            let text = String::from_utf8_lossy(bytes).into_owned();
            match airlock_fs::shape_text(&self.sandbox, text, mode)? {
                (Some(text), _) => {
                    data.insert(name.to_owned(), Value::String(text));
                }
                (None, Some(blob)) => {
                    data.insert(
                        format!("{name}_blob"),
                        serde_json::to_value(blob).unwrap_or(Value::Null),
                    );
                }
                (None, None) => {}
            }
        }
        data.insert(
            "duration_ms".to_owned(),
            json!(u64::try_from(output.duration.as_millis()).unwrap_or(u64::MAX)),
        );
        data.insert(
            "truncated_stdout".to_owned(),
            json!(output.truncated_stdout),
        );
        data.insert(
            "truncated_stderr".to_owned(),
            json!(output.truncated_stderr),
        );
        Ok(Value::Object(data))
    }

    /// An allowed command that ran: its output, audited.
    fn exec_ran(
        &self,
        call: &ToolCall,
        decision: &Decision,
        output: &airlock_exec::Output,
        mode: OutputMode,
        base: Record,
    ) -> Envelope {
        let data = match self.exec_data(output, mode) {
            Ok(data) => data,
            Err(error) => {
                return self.exec_failure(
                    call,
                    decision,
                    error.code(),
                    &error.to_string(),
                    None,
                    base,
                );
            }
        };
        if output.cancelled {
            return self.exec_cancelled(call, decision, base);
        }
        if output.timed_out {
            return self.exec_failure(
                call,
                decision,
                ErrorCode::ExecTimeout,
                &format!(
                    "the command ran past its timeout ({} ms) and was killed with everything it started",
                    output.duration.as_millis()
                ),
                Some(data),
                base,
            );
        }
        let record = base
            .event("tool_call")
            .text("decision", "allow")
            .text(
                "decided_by",
                crate::envelopes::decided_by_policy_or_grant(decision),
            )
            .text("status", "allowed")
            .value("exit_code", Some(json!(output.exit_code)))
            .value("signal", output.signal.map(|signal| json!(signal)));
        let mut envelope = Envelope::new(Status::Allowed, METHOD, BuiltinTool::Exec.name(), None);
        envelope.data = Some(data);
        self.audited(envelope, record)
    }

    /// A command whose caller went away while it ran: killed, with
    /// everything it started; nothing proposed or kept.
    fn exec_cancelled(&self, call: &ToolCall, decision: &Decision, base: Record) -> Envelope {
        self.exec_refused(
            call,
            decision,
            ErrorCode::ExecFailed,
            "the call was cancelled: the command was killed with everything it started",
            Some(json!({"cancelled": true})),
            base,
            "cancelled",
        )
    }

    /// A command that could not run, or did not finish: the error, with
    /// what it printed when it ran at all, audited.
    fn exec_failure(
        &self,
        call: &ToolCall,
        decision: &Decision,
        code: ErrorCode,
        message: &str,
        data: Option<Value>,
        base: Record,
    ) -> Envelope {
        self.exec_refused(call, decision, code, message, data, base, "error")
    }

    /// [`Broker::exec_failure`], audited with `status`.
    #[expect(clippy::too_many_arguments, reason = "the parts of one answer")]
    fn exec_refused(
        &self,
        call: &ToolCall,
        decision: &Decision,
        code: ErrorCode,
        message: &str,
        data: Option<Value>,
        base: Record,
        status: &str,
    ) -> Envelope {
        let mut envelope = Envelope::failure(
            crate::envelopes::failure_status(code),
            METHOD,
            &call.tool,
            None,
            code,
            message,
        )
        .with_reason(airlock_core::envelope::ErrorReason::of_tool_refusal(
            code,
            message,
            Some(decision.risk),
        ));
        envelope.data = data;
        self.audited(
            envelope,
            base.event("tool_call")
                .text("status", status)
                .text("code", code.as_str()),
        )
    }
}

/// Lines of each stream shown at its head and at its tail.
const SHOWN_LINES: usize = 10;
/// Characters of one output line shown.
const SHOWN_WIDTH: usize = 200;

/// The head of a previewed command's proposal: the command, how it ended,
/// and the head and tail of what it printed, every output line behind `| `
/// (so no output line can pass for a line of the diff below it) and with
/// control characters escaped.
pub(crate) fn output_preamble(command: &str, output: &airlock_exec::Output) -> String {
    use std::fmt::Write as _;
    let mut text = format!(
        "$ {}\n",
        shorten(&airlock_core::display::safe_line(command), 400)
    );
    let ended = match (output.exit_code, output.signal) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "ended".to_owned(),
    };
    let _ = writeln!(text, "{ended}, {} ms", output.duration.as_millis());
    for (name, bytes, truncated) in [
        ("stdout", &output.stdout, output.truncated_stdout),
        ("stderr", &output.stderr, output.truncated_stderr),
    ] {
        let printed = String::from_utf8_lossy(bytes);
        let lines: Vec<&str> = printed.lines().collect();
        let cut = if truncated {
            ", cut at the output limit"
        } else {
            ""
        };
        if lines.is_empty() {
            let _ = writeln!(text, "{name}: empty{cut}");
            continue;
        }
        let shown: Vec<Option<&str>> = if lines.len() <= 2 * SHOWN_LINES {
            lines.iter().copied().map(Some).collect()
        } else {
            lines[..SHOWN_LINES]
                .iter()
                .copied()
                .map(Some)
                .chain(std::iter::once(None))
                .chain(lines[lines.len() - SHOWN_LINES..].iter().copied().map(Some))
                .collect()
        };
        let _ = writeln!(
            text,
            "{name}: {} line{}{cut}",
            lines.len(),
            if lines.len() == 1 { "" } else { "s" }
        );
        for line in shown {
            match line {
                Some(line) => {
                    let _ = writeln!(
                        text,
                        "| {}",
                        shorten(&airlock_core::display::safe_line(line), SHOWN_WIDTH)
                    );
                }
                None => {
                    let _ = writeln!(
                        text,
                        "| … {} lines not shown …",
                        lines.len() - 2 * SHOWN_LINES
                    );
                }
            }
        }
    }
    text.push('\n');
    text
}

/// The command as a human reads it.
fn shown_command(params: &ExecParams) -> String {
    match (&params.command, &params.argv) {
        (Some(command), _) => command.clone(),
        (None, Some(argv)) => airlock_core::exec::parse::shown_argv(argv),
        (None, None) => String::new(),
    }
}

fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
