//! A code-mode run's writes, staged (DESIGN §5.2): each write call of the
//! script is decided by the policy and planned against what the run staged
//! so far, and nothing is written; its later reads, greps and globs see the
//! staged files. When the script ends, everything it staged becomes one
//! change over every file, proposed once (one approval, one diff, one
//! decision), applied atomically without running the script again, and
//! stale if a file the script read or wrote changed in the meantime.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use airlock_core::envelope::{Envelope, Status};
use airlock_core::plan::{ChangePlan, FileChange};
use airlock_core::tools::BuiltinTool;
use airlock_core::{Decision, Disposition, ErrorCode, ToolCall, ToolOrigin};
use airlock_fs::{FsError, Overlay, StagedFile};
use serde_json::{Map, Value, json};

use crate::broker::Broker;
use crate::envelopes::{call_path, method_of};
use crate::propose::Planned;
use crate::record::Record;
use crate::submit::Mode;
use crate::{Approval, Cancel};

/// The key of the read set in a code run's plan report.
pub(crate) const READS: &str = "reads";

/// The most of a run's staged diff shown with one of its calls.
const STAGED_SHOWN: u64 = 4000;

thread_local! {
    /// What an approval made on this thread shows after its own text.
    static ASK_CONTEXT: std::cell::RefCell<Option<String>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` with `context` added to the text of any approval it makes on
/// this thread; what was there before comes back however `f` ends.
fn with_ask_context<R>(context: Option<String>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<String>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let before = self.0.take();
            ASK_CONTEXT.with(|slot| {
                slot.replace(before);
            });
        }
    }
    let _restore = Restore(ASK_CONTEXT.with(|slot| slot.replace(context)));
    f()
}

/// `diff` with what a run says of itself, when an approval is made for one
/// of its calls.
pub(crate) fn with_run_context(diff: String) -> String {
    ASK_CONTEXT.with(|slot| match slot.borrow().as_ref() {
        Some(context) => format!("{diff}\n{context}"),
        None => diff,
    })
}

/// Each file the run changed, from what the disk held to what the run
/// left (their contents before), and the files it read, with what it
/// changed and changed back counted as read.
#[expect(
    clippy::type_complexity,
    reason = "three views of one state, used together"
)]
fn changes_of(
    state: &State,
) -> (
    Vec<FileChange>,
    Vec<Option<Vec<u8>>>,
    BTreeMap<String, Option<String>>,
) {
    let mut changes = Vec::new();
    let mut olds: Vec<Option<Vec<u8>>> = Vec::new();
    let mut reads = state.reads.clone();
    for (resolved, staged) in state.overlay.entries() {
        let Some(base) = state.bases.get(resolved) else {
            continue;
        };
        let after = staged.as_ref().map(|file| file.content.clone());
        let before_hash = base.content.as_deref().map(airlock_fs::sha256_hex);
        if after == base.content {
            // Changed and changed back: nothing to write, but what it
            // holds still counts.
            reads.entry(base.path.clone()).or_insert(before_hash);
            continue;
        }
        changes.push(FileChange {
            path: base.path.clone(),
            resolved_path: resolved.to_owned(),
            before_hash,
            after,
            create_parents: true,
            moved_from: None,
            mode: staged.as_ref().and_then(|file| file.mode),
        });
        olds.push(base.content.clone());
    }
    (changes, olds, reads)
}

/// What one run staged.
#[derive(Debug, Default)]
pub struct Staging {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    overlay: Arc<Overlay>,
    /// Per resolved path the run changed: the path as first named, and what
    /// the disk held when the run first changed it.
    bases: BTreeMap<String, Base>,
    /// Files the script read from the disk: path -> content hash (`None`:
    /// it was absent).
    reads: BTreeMap<String, Option<String>>,
    /// The strictest decision among the staged calls.
    decision: Option<Decision>,
}

#[derive(Debug, Clone)]
struct Base {
    path: String,
    content: Option<Vec<u8>>,
}

impl Staging {
    pub fn new() -> Staging {
        Staging::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the run staged nothing.
    pub fn is_empty(&self) -> bool {
        self.state().overlay.is_empty()
    }
}

/// What a run's one proposal carries besides its changes.
#[derive(Debug, Clone)]
pub struct RunProposal<'a> {
    /// The `codemode_eval*` call.
    pub call: &'a ToolCall,
    /// The run, for the human and the audit (run id, script hash,
    /// description, calls, console excerpt).
    pub report: Map<String, Value>,
    /// What the human reads before the diff (the script, its calls).
    pub preface: String,
    /// Return the diff; propose nothing.
    pub dry_run: bool,
}

impl Broker {
    /// One call of a code-mode run: a write is decided and staged, a read
    /// sees what the run staged; anything else is submitted as usual.
    ///
    /// A call that asks a human shows, after its own text, what `context`
    /// says of the run so far and the diff the run has staged so far (both
    /// made only when the policy asks).
    pub fn submit_staged(
        &self,
        call: &ToolCall,
        mode: &Mode,
        on_pending: &(dyn Fn(&Approval) + Sync),
        cancel: &Cancel,
        staging: &Staging,
        context: &dyn Fn() -> String,
    ) -> Envelope {
        use BuiltinTool::{
            ApplyPatch, DeleteFile, EditFile, Exists, Glob, Grep, ListDir, MoveFile, ReadFile,
            Stat, WriteFile,
        };
        match &call.origin {
            ToolOrigin::Builtin(WriteFile | EditFile | ApplyPatch | DeleteFile | MoveFile) => {
                self.stage_write(call, staging)
            }
            ToolOrigin::Builtin(ReadFile | Grep | Glob | ListDir | Stat | Exists) => {
                self.staged_read(call, staging)
            }
            _ => {
                let shown = (self.decide_only(call).disposition == Disposition::Ask).then(|| {
                    let mut text = context();
                    text.push_str(&self.staged_so_far(staging));
                    text
                });
                with_ask_context(shown, || {
                    self.submit_cancellable(call, mode, on_pending, cancel)
                })
            }
        }
    }

    /// The diff of what a run has staged so far, for a human asked about
    /// one of its calls; shortened past `STAGED_SHOWN` characters.
    fn staged_so_far(&self, staging: &Staging) -> String {
        let state = staging.state();
        let (changes, olds, _) = changes_of(&state);
        if changes.is_empty() {
            return "The script has staged no change so far.\n".to_owned();
        }
        let old_slices: Vec<Option<&[u8]>> = olds.iter().map(Option::as_deref).collect();
        let plan = airlock_fs::new_plan(
            crate::code::CODEMODE_TOOL,
            String::new(),
            changes,
            &old_slices,
            Map::new(),
        );
        let paths: Vec<String> = plan
            .changed_paths()
            .iter()
            .map(|path| airlock_core::display::safe_line(path).into_owned())
            .collect();
        let mut text = format!(
            "What the script has staged so far ({}; proposed as one change when it ends):\n",
            paths.join(", ")
        );
        text.push_str(&airlock_fs::preview(&plan.diff, STAGED_SHOWN));
        text
    }

    /// The policy's decision on a patch's files as `plan` placed them.
    fn patch_decision(
        &self,
        call: &ToolCall,
        plan: &airlock_core::ChangePlan,
    ) -> airlock_core::Decision {
        let resolved = airlock_core::policy::ResolvedPaths {
            arguments: Vec::new(),
            patch: Some(
                plan.changes
                    .iter()
                    .map(|change| change.resolved_path.clone())
                    .collect(),
            ),
        };
        let now = self.now_ms();
        let grants = airlock_core::policy::LazyGrants::new(|| self.live_grants(now));
        airlock_core::policy::evaluate_resolved(&self.policy, call, &grants, &resolved)
    }

    /// Whether the patch's files as placed are denied where its text's
    /// were not.
    fn patch_denied(
        &self,
        call: &ToolCall,
        plan: &airlock_core::ChangePlan,
        decision: &airlock_core::Decision,
    ) -> bool {
        decision.disposition != Disposition::Deny
            && self.patch_decision(call, plan).disposition == Disposition::Deny
    }

    fn stage_write(&self, call: &ToolCall, staging: &Staging) -> Envelope {
        let decision = self.decide_only(call);
        let base = Record::for_call(call, &decision);
        if decision.disposition == Disposition::Deny {
            return self.denied_by_policy(call, &decision, base);
        }
        let path = call_path(call);
        let failed = |base: Record, error: &FsError| {
            self.propose_failed(
                &call.tool,
                &decision,
                base,
                path,
                error.code(),
                &error.to_string(),
            )
        };
        // One staged call at a time, so each plans against the last.
        let mut state = staging.state();
        let sandbox = match self
            .sandbox_for(call)
            .and_then(|sandbox| sandbox.with_overlay(state.overlay.clone()))
        {
            Ok(sandbox) => sandbox,
            Err(error) => {
                return failed(base, &error);
            }
        };
        let plan = match self.plan_in(&sandbox, call) {
            // A patch's files, where the plan placed them (through symlinks,
            // from a session's working directory), decided on too.
            Ok(Planned::Plan(plan) | Planned::DryRun(plan))
                if call.tool == BuiltinTool::ApplyPatch.name()
                    && self.patch_denied(call, &plan, &decision) =>
            {
                let real = self.patch_decision(call, &plan);
                return self.denied_by_policy(call, &real, Record::for_call(call, &real));
            }
            Ok(Planned::Plan(plan)) => plan,
            Ok(Planned::DryRun(plan)) => return self.dry_run(call, &decision, &plan, base),
            Ok(_) => return self.invalid(call, path, "not a write tool", base),
            Err(FsError::InvalidInput { message }) => {
                return self.invalid(call, path, &message, base);
            }
            Err(error) => {
                return failed(base, &error);
            }
        };
        // What the disk holds where the run changes a file the first time:
        // the run's change is shown, checked and applied against it.
        let mut firsts = Vec::new();
        for change in &plan.changes {
            if state.bases.contains_key(&change.resolved_path) {
                continue;
            }
            let content = match airlock_fs::current_content(&self.sandbox, &change.path) {
                Ok(content) => content.map(|(bytes, _)| bytes),
                Err(error) => {
                    return failed(base, &error);
                }
            };
            if content.as_deref().map(airlock_fs::sha256_hex) != change.before_hash {
                return self.propose_failed(
                    &call.tool,
                    &decision,
                    base,
                    path,
                    ErrorCode::Stale,
                    &format!("`{}` changed while the script ran", change.path),
                );
            }
            firsts.push((
                change.resolved_path.clone(),
                Base {
                    path: change.path.clone(),
                    content,
                },
            ));
        }
        let record = base
            .event("tool_call")
            .text("decision", decision.disposition.as_str())
            .text("status", "staged")
            .value("changed_paths", Some(json!(plan.changed_paths())))
            .text("patch_hash", &plan.patch_hash);
        // Staging changes nothing on disk: the record is written now and
        // synced with the next durable one (the run's proposal at the
        // latest), as a read's is.
        if self
            .log_with(record, airlock_audit::Durability::Soon)
            .is_none()
        {
            return Envelope::failure(
                Status::Error,
                method_of(&call.tool),
                &call.tool,
                path,
                ErrorCode::IoError,
                "the audit log could not be written; nothing was staged",
            );
        }
        state.bases.extend(firsts);
        let now = self.now_ms();
        // The sandbox that read through the overlay is done with it: staged
        // in place, without a copy.
        drop(sandbox);
        let overlay = Arc::make_mut(&mut state.overlay);
        for change in &plan.changes {
            let previous_mode = match overlay.get(&change.resolved_path) {
                Some(Some(staged)) => staged.mode,
                _ => None,
            };
            overlay.stage(
                &change.resolved_path,
                change.after.clone().map(|content| StagedFile {
                    content,
                    mode: change.mode.or(previous_mode),
                    mtime_ms: now,
                }),
            );
        }
        let stricter = state.decision.as_ref().is_none_or(|kept| {
            (decision.disposition, decision.risk) > (kept.disposition, kept.risk)
        });
        if stricter {
            state.decision = Some(decision.clone());
        }
        let mut envelope = Envelope::new(Status::Allowed, method_of(&call.tool), &call.tool, path);
        let mut data = json!({
            "staged": true,
            "summary": plan.summary,
            "changed_paths": plan.changed_paths(),
            "diff": plan.diff_preview(self.config.file_broker.diff_preview_max_chars),
        });
        if let Some(object) = data.as_object_mut() {
            if let Some(path) = plan.primary_path() {
                object.insert("path".to_owned(), json!(path));
            }
            for (key, value) in &plan.report {
                object.insert(key.clone(), value.clone());
            }
        }
        envelope.data = Some(data);
        envelope
    }

    fn staged_read(&self, call: &ToolCall, staging: &Staging) -> Envelope {
        let decision = self.decide_only(call);
        let base = Record::for_call(call, &decision);
        if decision.disposition == Disposition::Deny {
            return self.denied_by_policy(call, &decision, base);
        }
        let overlay = staging.state().overlay.clone();
        let overlay_empty = overlay.is_empty();
        // Nothing staged yet: the disk as it is.
        let through;
        let scoped = match self.sandbox_for(call) {
            Ok(scoped) => scoped,
            Err(error) => {
                let message = error.to_string();
                return self.propose_failed(
                    &call.tool,
                    &decision,
                    base,
                    call_path(call),
                    error.code(),
                    &message,
                );
            }
        };
        let sandbox = if overlay.is_empty() {
            &*scoped
        } else {
            through = match scoped.with_overlay(overlay) {
                Ok(sandbox) => sandbox,
                Err(error) => {
                    let message = error.to_string();
                    return self.propose_failed(
                        &call.tool,
                        &decision,
                        base,
                        call_path(call),
                        error.code(),
                        &message,
                    );
                }
            };
            &through
        };
        if call.tool != BuiltinTool::ReadFile.name() {
            return self.look(sandbox, call, &decision, base);
        }
        let envelope = self.read(sandbox, call, &decision, base);
        // A file read from the disk joins the read set: the run's changes
        // are applied only if it still holds what the script saw. The read
        // answers with the path as its caller sees it (from a session's
        // working directory); the set keeps it root-relative.
        let from_disk = |path: &str| {
            let target = sandbox
                .resolve("path", path, airlock_fs::Access::Read)
                .ok()?;
            // Nothing staged: from the disk without asking the overlay.
            (overlay_empty || target.staged().is_none()).then(|| target.requested().to_owned())
        };
        let data = envelope.data.as_ref();
        let read_path = data
            .and_then(|data| data.get("path"))
            .and_then(Value::as_str);
        let hash = data
            .and_then(|data| data.get("base_hash"))
            .and_then(Value::as_str);
        if envelope.status == Status::Allowed
            && let (Some(path), Some(hash)) = (read_path, hash)
            && let Some(path) = from_disk(path)
        {
            staging
                .state()
                .reads
                .entry(path)
                .or_insert_with(|| Some(hash.to_owned()));
        }
        envelope
    }

    /// The run's one proposal: every file it staged, from what the disk
    /// held to what the run left, with the files it read. `None` when it
    /// changed nothing. A dry run returns the diff and proposes nothing.
    pub fn propose_staged(
        &self,
        staging: Staging,
        proposal: RunProposal<'_>,
        mode: &Mode,
        on_pending: &(dyn Fn(&Approval) + Sync),
    ) -> Option<Envelope> {
        let state = staging
            .state
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        let (changes, olds, mut reads) = changes_of(&state);
        if changes.is_empty() {
            return None;
        }
        // A file the run read and then changed is checked by its change.
        for change in &changes {
            reads.remove(&change.path);
        }
        let call = proposal.call;
        let mut report = proposal.report;
        report.insert(READS.to_owned(), json!(reads));
        let summary = format!(
            "CODE RUN: {}",
            changes
                .iter()
                .map(FileChange::summary)
                .collect::<Vec<_>>()
                .join(", ")
        );
        let old_slices: Vec<Option<&[u8]>> = olds.iter().map(Option::as_deref).collect();
        let plan: ChangePlan =
            airlock_fs::new_plan(&call.tool, summary, changes, &old_slices, report);
        let decision = state.decision.clone()?;
        let record = Record::for_call(call, &decision)
            .event("code_run_propose")
            .value("run_id", plan.report.get("run_id").cloned())
            .value("changed_paths", Some(json!(plan.changed_paths())))
            .text("patch_hash", &plan.patch_hash)
            .value("reads", plan.report.get(READS).cloned())
            .flag("dry_run", proposal.dry_run);
        if self.log(record).is_none() {
            return Some(Envelope::failure(
                Status::Error,
                crate::code::CODE_METHOD,
                &call.tool,
                None,
                ErrorCode::IoError,
                "the audit log could not be written; nothing was proposed",
            ));
        }
        if proposal.dry_run {
            let mut envelope =
                Envelope::new(Status::Allowed, crate::code::CODE_METHOD, &call.tool, None);
            envelope.data = Some(json!({
                "dry_run": true,
                "summary": plan.summary,
                "changed_paths": plan.changed_paths(),
                "diff": plan.diff,
                "plan_hash": plan.patch_hash,
            }));
            return Some(envelope);
        }
        let base = Record::for_call(call, &decision);
        let now = self.now_ms();
        Some(self.write_planned(
            call,
            &decision,
            Ok(Planned::Code(plan, proposal.preface)),
            mode,
            on_pending,
            base,
            now,
        ))
    }

    /// Before a code run's changes are applied: every file the script read
    /// holds what it read.
    pub(crate) fn check_reads(&self, plan: &ChangePlan) -> Result<(), FsError> {
        let Some(Value::Object(reads)) = plan.report.get(READS) else {
            return Ok(());
        };
        for (path, expected) in reads {
            let now =
                airlock_fs::current_hash(&self.sandbox, path).or_else(|error| match error {
                    FsError::NotFound { .. } => Ok(None),
                    error => Err(error),
                })?;
            if now.as_deref() != expected.as_str() {
                return Err(FsError::Stale {
                    path: path.clone(),
                    reason: "the script read it, and it changed since".to_owned(),
                });
            }
        }
        Ok(())
    }
}
