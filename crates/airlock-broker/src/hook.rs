//! Agent hooks (DESIGN §9.1): an agent's own tool call, decided before it
//! runs as airlock's tool of the same kind would be, and checked after.
//!
//! Before: the call is mapped onto airlock's tools ([`hooks::map`]) and
//! decided by the policy (path rules for edits and reads, the exec rules
//! for shell commands, the upstream rules for MCP tools; anything else is
//! an unknown tool). A refusal is a deny. A call that changes files is
//! planned as airlock's own would be (its diff, the hashes it expects), and
//! recorded as an approval of an [`AgentPlan`], whether the policy allows
//! it or a human must: a human decides on any channel until the hook's
//! time is up (a timeout denies), and approving it lets the agent go ahead
//! (the agent writes the files itself). Its before-content is kept then,
//! so `airlock undo` can revert what the agent wrote.
//!
//! After: for an exact plan, every file must hold what was approved; any
//! difference is audited as `apply_mismatch` and told to the model.

use std::time::Duration;

use airlock_core::ToolCall;
use airlock_core::ToolOrigin;
use airlock_core::envelope::{DecisionInfo, Envelope, Status};
use airlock_core::hooks::{self, AgentEvent, HookVerdict, Mapped, Phase};
use airlock_core::plan::{AgentPlan, ChangePlan, Plan};
use airlock_core::policy::{Decision, Disposition};
use airlock_core::tools::BuiltinTool;
use airlock_fs::FsError;
use airlock_store::{ApprovalStatus, Snapshot, SnapshotFile};
use serde_json::{Map, Value, json};

use crate::broker::Broker;
use crate::propose::Planned;
use crate::record::Record;
use crate::submit::Mode;
use crate::{Approval, envelopes};

/// A hook's wait for a human ends this long before the agent's own
/// timeout, so the answer (a denial, if nobody decided) reaches it.
pub const HOOK_MARGIN: Duration = Duration::from_secs(5);

impl Broker {
    /// airlock's verdict on `event`; a human is waited for at most `wait`.
    pub fn hook(&self, event: &AgentEvent, wait: Duration) -> HookVerdict {
        match event.phase {
            Phase::Pre | Phase::Permission => self.hook_before(event, wait),
            Phase::Post => self.hook_after(event),
        }
    }

    fn hook_before(&self, event: &AgentEvent, wait: Duration) -> HookVerdict {
        let now = self.now_ms();
        let mapped = match hooks::map(event, &self.root) {
            Ok(mapped) => mapped,
            Err(error) => return self.hook_refused(event, None, &error.to_string()),
        };
        let call = self.hook_call(event, &mapped, now);
        let mut decision = self.decide_only(&call);
        if matches!(mapped, Mapped::Unknown { .. }) && decision.disposition == Disposition::Allow {
            // A tool airlock knows nothing of is never let through unasked.
            decision.disposition = Disposition::Ask;
        }
        let base = hook_record(Record::for_call(&call, &decision), event);
        if decision.disposition == Disposition::Deny {
            let reason = envelopes::first_denial(&decision);
            self.log(
                base.event("hook")
                    .text("decision", "deny")
                    .text("status", "denied"),
            );
            return HookVerdict::Deny {
                reason: format!("airlock: {reason}"),
            };
        }
        let change = match self.hook_change(&call, &mapped) {
            Ok(change) => change,
            Err(error) => {
                return self.hook_refused(event, Some(&call), &error.to_string());
            }
        };
        let Some((change, exact)) = change else {
            if decision.disposition == Disposition::Allow {
                let recorded = self.log(
                    base.event("hook")
                        .text("decision", "allow")
                        .text(
                            "decided_by",
                            envelopes::decided_by_policy_or_grant(&decision),
                        )
                        .text("status", "allowed"),
                );
                if recorded.is_none() {
                    return HookVerdict::Deny {
                        reason: "airlock: the audit log cannot be written; nothing is allowed"
                            .to_owned(),
                    };
                }
                return HookVerdict::Allow {
                    reason: Some("allowed by airlock's policy".to_owned()),
                    updated_input: None,
                };
            }
            // Asks, and changes no file airlock can compute: the approval
            // shows the call.
            let shown = shown_call(event, &mapped);
            let plan = airlock_fs::new_plan("agent", shown.0, Vec::new(), &[], Map::new());
            return self.hook_propose(event, &call, decision, base, plan, false, shown.1, wait);
        };
        // A patch names its files in its text: where they really are is
        // known once it is planned, and decided on too (as for airlock's
        // own apply_patch).
        if call.tool == BuiltinTool::ApplyPatch.name() {
            let resolved = airlock_core::policy::ResolvedPaths {
                arguments: Vec::new(),
                patch: Some(
                    change
                        .changes
                        .iter()
                        .map(|file| file.resolved_path.clone())
                        .collect(),
                ),
            };
            let grants = airlock_core::policy::LazyGrants::new(|| self.live_grants(now));
            let real =
                airlock_core::policy::evaluate_resolved(&self.policy, &call, &grants, &resolved);
            if (real.disposition, real.risk) > (decision.disposition, decision.risk) {
                decision = real;
                if decision.disposition == Disposition::Deny {
                    let reason = envelopes::first_denial(&decision);
                    self.log(
                        hook_record(Record::for_call(&call, &decision), event)
                            .event("hook")
                            .text("decision", "deny")
                            .text("status", "denied"),
                    );
                    return HookVerdict::Deny {
                        reason: format!("airlock: {reason}"),
                    };
                }
            }
        }
        let base = hook_record(Record::for_call(&call, &decision), event);
        let preface = match &mapped {
            Mapped::OpaqueWrite { what, .. } => {
                format!("{}\n\n", airlock_core::display::safe_text(what))
            }
            _ => String::new(),
        };
        self.hook_propose(event, &call, decision, base, change, exact, preface, wait)
    }

    /// The call as airlock's policy sees it.
    fn hook_call(&self, event: &AgentEvent, mapped: &Mapped, now: u64) -> ToolCall {
        let (tool, args, origin) = match mapped {
            Mapped::Builtin { tool, args } => (
                tool.name().to_owned(),
                args.clone(),
                ToolOrigin::Builtin(*tool),
            ),
            Mapped::Edits { path, .. } | Mapped::OpaqueWrite { path, .. } => (
                BuiltinTool::WriteFile.name().to_owned(),
                json!({"path": path, "content": ""}),
                ToolOrigin::Builtin(BuiltinTool::WriteFile),
            ),
            Mapped::Upstream { server, tool, args } => (
                format!("{server}__{tool}"),
                args.clone(),
                ToolOrigin::Upstream {
                    upstream: server.as_str().into(),
                    annotations: None,
                },
            ),
            Mapped::Unknown { name, args } => (name.clone(), args.clone(), ToolOrigin::Unknown),
        };
        let mut call = ToolCall::new(tool, args, origin, now);
        call.session = event.session_id.clone();
        call.tool_call_id = Some(event.call_key());
        call
    }

    /// The change to files `mapped` makes, as airlock's own tool would make
    /// it, and whether it is exactly what the agent writes; `None` for a
    /// call that changes no file.
    fn hook_change(
        &self,
        call: &ToolCall,
        mapped: &Mapped,
    ) -> Result<Option<(ChangePlan, bool)>, FsError> {
        match mapped {
            Mapped::Builtin {
                tool: BuiltinTool::EditFile | BuiltinTool::WriteFile | BuiltinTool::ApplyPatch,
                ..
            } => match self.plan(call)? {
                Planned::Plan(plan)
                | Planned::DryRun(plan)
                | Planned::Command(plan, _)
                | Planned::Code(plan, _) => Ok(Some((plan, true))),
                Planned::Agent(plan, _) => Ok(Some((plan.change, plan.exact))),
            },
            Mapped::Edits { path, edits } => {
                let first = edits.first().ok_or_else(|| FsError::InvalidInput {
                    message: "no edits".to_owned(),
                })?;
                let plan = airlock_fs::prepare_edit(
                    &self.sandbox,
                    &airlock_fs::EditParams {
                        path: path.clone(),
                        old_string: first.old_string.clone(),
                        new_string: first.new_string.clone(),
                        replace_all: first.replace_all,
                    },
                )?;
                let mut text = plan
                    .changes
                    .first()
                    .and_then(|change| change.after.clone())
                    .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
                    .unwrap_or_default();
                for edit in &edits[1..] {
                    text = airlock_core::edit::apply_edit(
                        &text,
                        &edit.old_string,
                        &edit.new_string,
                        edit.replace_all,
                    )
                    .map_err(|error| FsError::InvalidInput {
                        message: error.to_string(),
                    })?
                    .content;
                }
                let mut whole = airlock_fs::prepare_write(
                    &self.sandbox,
                    &airlock_fs::WriteParams::text(path, &text),
                )?;
                // The file must still hold what the first edit was made on.
                if let (Some(change), Some(first)) =
                    (whole.changes.first_mut(), plan.changes.first())
                {
                    change.before_hash.clone_from(&first.before_hash);
                }
                whole.summary = format!("EDIT {path} ({} edits)", edits.len());
                Ok(Some((whole, true)))
            }
            Mapped::OpaqueWrite { path, .. } => {
                // What it writes is the agent's to compute: the approval
                // shows the request, and the file is kept as it was for
                // undo.
                let plan = airlock_fs::prepare_write(
                    &self.sandbox,
                    &airlock_fs::WriteParams::text(path, ""),
                )?;
                Ok(Some((plan, false)))
            }
            _ => Ok(None),
        }
    }

    /// Records the call as an approval of an [`AgentPlan`]: allowed at once
    /// if the policy allows it, else waited on for a human until `wait`.
    #[expect(clippy::too_many_arguments, reason = "the parts of one proposal")]
    fn hook_propose(
        &self,
        event: &AgentEvent,
        call: &ToolCall,
        mut decision: Decision,
        base: Record,
        change: ChangePlan,
        exact: bool,
        preface: String,
        wait: Duration,
    ) -> HookVerdict {
        decision.timeout_seconds = decision.timeout_seconds.min(wait.as_secs().max(1));
        let plan = AgentPlan {
            agent: event.agent.name().to_owned(),
            tool: event.tool_name.clone(),
            call_key: event.call_key(),
            change,
            exact,
            input: event.tool_input.clone(),
        };
        let envelope = self.write_planned(
            call,
            &decision,
            Ok(Planned::Agent(plan, preface)),
            &Mode::Wait,
            &|_| {},
            base,
            self.now_ms(),
        );
        verdict_of(&envelope)
    }

    /// A call airlock cannot decide on (its input, its plan): denied,
    /// audited.
    fn hook_refused(
        &self,
        event: &AgentEvent,
        call: Option<&ToolCall>,
        message: &str,
    ) -> HookVerdict {
        let record = match call {
            Some(call) => Record::for_call(call, &self.decide_only(call)),
            None => Record::new("hook").text("tool", &event.tool_name),
        };
        self.log(
            hook_record(record, event)
                .event("hook")
                .text("decision", "deny")
                .text("status", "error")
                .text("message", message),
        );
        HookVerdict::Deny {
            reason: format!("airlock: {message}"),
        }
    }

    /// An approved agent call: its before-content kept for undo, and
    /// marked applied (the agent writes the files once told to go ahead).
    pub(crate) fn commit_agent(
        &self,
        approval: &Approval,
        plan: &AgentPlan,
        decision: DecisionInfo,
    ) -> Envelope {
        let change = &plan.change;
        let mut updated_input = None;
        if !change.changes.is_empty() {
            let before = match airlock_fs::snapshot(&self.sandbox, change) {
                Ok(before) => before,
                Err(error) => {
                    return self.apply_failed(approval, &decision, error.code(), error.to_string());
                }
            };
            // An approver's edited version goes back to the agent as its
            // tool's input.
            if approval
                .decision
                .as_ref()
                .is_some_and(|decided| decided.edited)
                && plan.editable()
            {
                let old = before
                    .first()
                    .and_then(Option::as_ref)
                    .map(|(bytes, _)| String::from_utf8_lossy(bytes).into_owned());
                let new = change
                    .changes
                    .first()
                    .and_then(|file| file.after.as_deref())
                    .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
                    .unwrap_or_default();
                updated_input = airlock_core::hooks::edited_input(
                    &plan.agent,
                    &plan.tool,
                    &plan.input,
                    old.as_deref(),
                    &new,
                );
                if updated_input.is_none() {
                    return self.apply_failed(
                        approval,
                        &decision,
                        airlock_core::ErrorCode::InvalidInput,
                        format!(
                            "{}'s {} cannot take the edited version",
                            plan.agent, plan.tool
                        ),
                    );
                }
            }
            let snapshot = Snapshot {
                approval_id: approval.id.clone(),
                files: change
                    .changes
                    .iter()
                    .zip(before)
                    .map(|(file, before)| SnapshotFile {
                        path: file.path.clone(),
                        mode: before.as_ref().map(|(_, mode)| *mode),
                        before: before.map(|(bytes, _)| bytes),
                        before_hash: file.before_hash.clone(),
                        after_hash: file.after_hash(),
                    })
                    .collect(),
                undone: false,
            };
            if let Err(error) = self.store.insert_snapshot(&snapshot) {
                return self.apply_failed(
                    approval,
                    &decision,
                    airlock_core::ErrorCode::IoError,
                    error.to_string(),
                );
            }
        }
        let mut envelope = Envelope::new(
            Status::Allowed,
            "agent.tool",
            &approval.tool,
            approval.path.as_deref(),
        );
        envelope.data = Some(json!({
            "agent": plan.agent,
            "agent_tool": plan.tool,
            "agent_applies": true,
            "changed_paths": change.changed_paths(),
            "updated_input": updated_input,
        }));
        envelope.hitl = Some(envelopes::hitl_ref(approval));
        envelope.decision = Some(decision.clone());
        let envelope = self.audited(
            envelope,
            Record::for_approval(approval)
                .event("hook_allowed")
                .text("decided_by", decision.by.as_str())
                .text("agent", &plan.agent)
                .text("agent_tool", &plan.tool)
                .text("status", "allowed"),
        );
        self.store_result(&approval.id, ApprovalStatus::Applied, &envelope);
        envelope
    }

    /// After the agent's tool ran: an exact plan's files must hold what
    /// was approved.
    fn hook_after(&self, event: &AgentEvent) -> HookVerdict {
        let key = event.call_key();
        let approval = match self.store.by_tool_call_id(&key) {
            Ok(Some(approval)) => approval,
            Ok(None) => {
                self.log(
                    hook_record(Record::new("hook").text("tool", &event.tool_name), event)
                        .event("hook_after")
                        .text("status", "unrecorded"),
                );
                return HookVerdict::Pass;
            }
            Err(error) => {
                return HookVerdict::Notice {
                    message: format!("airlock could not check this call: {error}"),
                };
            }
        };
        let Plan::Agent(plan) = &approval.plan else {
            return HookVerdict::Pass;
        };
        if !plan.exact || plan.change.changes.is_empty() {
            // What the agent wrote (which airlock could not compute before)
            // is what undo will expect to find.
            let mut files = Vec::new();
            for change in &plan.change.changes {
                let now = airlock_fs::current_hash(&self.sandbox, &change.path)
                    .ok()
                    .flatten();
                if let Err(error) =
                    self.store
                        .set_snapshot_after(&approval.id, &change.path, now.as_deref())
                {
                    return HookVerdict::Notice {
                        message: format!("airlock could not record this call's result: {error}"),
                    };
                }
                files.push(json!({"path": change.path, "after_hash": now}));
            }
            self.log(
                Record::for_approval(&approval)
                    .event("hook_after")
                    .text("status", "recorded")
                    .value("files", (!files.is_empty()).then_some(Value::Array(files))),
            );
            return HookVerdict::Pass;
        }
        let mut differ = Vec::new();
        for change in &plan.change.changes {
            let now = airlock_fs::current_hash(&self.sandbox, &change.path)
                .ok()
                .flatten();
            if now != change.after_hash() {
                differ.push(json!({
                    "path": change.path,
                    "expected": change.after_hash(),
                    "found": now,
                }));
            }
        }
        if differ.is_empty() {
            self.log(
                Record::for_approval(&approval)
                    .event("hook_after")
                    .text("status", "verified"),
            );
            return HookVerdict::Pass;
        }
        let paths: Vec<String> = differ
            .iter()
            .filter_map(|file| file["path"].as_str().map(str::to_owned))
            .collect();
        let files = Value::Array(differ);
        self.log(
            Record::for_approval(&approval)
                .event("apply_mismatch")
                .text("status", "apply_mismatch")
                .value("files", Some(files.clone())),
        );
        if let Err(error) = self
            .store
            .mark_apply_mismatch(&approval.id, &files, self.now_ms())
        {
            eprintln!(
                "airlock: recording the apply_mismatch of {}: {error}",
                approval.id
            );
        }
        HookVerdict::Notice {
            message: format!(
                "airlock: {} does not hold the content that was approved ({}); the difference is on record as apply_mismatch",
                paths.join(", "),
                approval.id
            ),
        }
    }
}

/// The hook's fields on an audit record.
fn hook_record(record: Record, event: &AgentEvent) -> Record {
    record
        .text("agent", event.agent.name())
        .text("hook_event", &event.event_name)
        .text("agent_tool", &event.tool_name)
        .value("agent_session", event.session_id.clone().map(Value::String))
        .value("tool_use_id", event.tool_use_id.clone().map(Value::String))
}

/// A call that writes no file, for a human: its summary and what it shows.
fn shown_call(event: &AgentEvent, mapped: &Mapped) -> (String, String) {
    let agent = event.agent.name();
    match mapped {
        Mapped::Builtin {
            tool: BuiltinTool::Exec,
            args,
        } => {
            let command = args["command"].as_str().unwrap_or_default();
            let line = airlock_core::display::safe_line(command).into_owned();
            (
                format!(
                    "RUN {} ({agent}'s {})",
                    shorten(&line, 160),
                    event.tool_name
                ),
                format!("$ {line}\n(the agent runs it once approved)\n"),
            )
        }
        _ => {
            // The agent's names are its own strings: one line each, escaped.
            let tool = shorten(&airlock_core::display::safe_line(&event.tool_name), 160);
            let input = serde_json::to_string_pretty(&event.tool_input).unwrap_or_default();
            (
                format!("CALL {tool} ({agent})"),
                format!("{tool}\n{}\n", airlock_core::display::safe_text(&input)),
            )
        }
    }
}

fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// The hook's answer from the envelope of its approval.
fn verdict_of(envelope: &Envelope) -> HookVerdict {
    match (envelope.status, &envelope.error) {
        (Status::Allowed, None) => HookVerdict::Allow {
            reason: Some(match &envelope.decision {
                Some(decision) => match &decision.user {
                    Some(user) => format!("approved by {user} in airlock"),
                    None => "allowed by airlock's policy".to_owned(),
                },
                None => "allowed by airlock's policy".to_owned(),
            }),
            updated_input: envelope
                .data
                .as_ref()
                .and_then(|data| data.get("updated_input"))
                .filter(|input| input.is_object())
                .cloned(),
        },
        (_, Some(error)) => HookVerdict::Deny {
            reason: format!("airlock: {}", error.message),
        },
        _ => HookVerdict::Deny {
            reason: "airlock: not allowed".to_owned(),
        },
    }
}
