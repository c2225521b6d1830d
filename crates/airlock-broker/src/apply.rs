//! Apply: an approved approval is claimed once (compare-and-set), committed
//! through the one apply engine and settled; recovery finishes what a crash
//! interrupted.

use airlock_core::ErrorCode;
use airlock_core::envelope::{DecisionInfo, Envelope, ErrorReason, Status};
use airlock_core::{ChangePlan, Plan};
use airlock_fs::CommitOptions;
use airlock_store::{Approval, ApprovalStatus, Snapshot, SnapshotFile};
use serde_json::{Value, json};

use crate::broker::Broker;
use crate::envelopes::{decision_info, failure_for, failure_status, hitl_ref};
use crate::error::BrokerError;
use crate::record::Record;

/// One file's hashes in an apply's data and audit record.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct FileHashes {
    path: String,
    before_hash: Option<String>,
    after_hash: Option<String>,
}

impl Broker {
    /// Rolls forward approvals a crash left half way: approved but never
    /// claimed, or claimed but never finished, by a process that no longer runs.
    pub(crate) fn recover_applies(&self) -> Result<(), BrokerError> {
        // Multi-file applies (and undos) interrupted after their commit point
        // are finished first: then the files say whether an apply happened.
        self.recover_journals()?;
        let alive = |holder| self.store.alive(holder);
        for (orphan, owner) in self.store.orphaned(&alive)? {
            if orphan.plan.is_upstream() && orphan.waiter_pid.is_some_and(alive) {
                // Its holder is alive and will carry it out.
                continue;
            }
            let Some(approval) = self.store.take_over(&orphan.id, owner)? else {
                continue;
            };
            let decision = decision_info(&approval);
            match approval.status {
                ApprovalStatus::Approved => {
                    self.settle(&approval.id);
                }
                ApprovalStatus::Applying => {
                    self.commit_claimed(&approval, decision, true);
                }
                ApprovalStatus::Pending
                | ApprovalStatus::Applied
                | ApprovalStatus::Failed
                | ApprovalStatus::Denied
                | ApprovalStatus::Expired
                | ApprovalStatus::Cancelled => {}
            }
        }
        Ok(())
    }

    /// Finishes journaled commits that were interrupted, and audits each.
    pub(crate) fn recover_journals(&self) -> Result<(), BrokerError> {
        let recovered = self
            .store
            .with_apply_lock(|| airlock_fs::recover(&self.sandbox, &self.journal_dir))??;
        for recovered in recovered {
            let label = recovered.label.clone().unwrap_or_default();
            let (id, kind) = label.rsplit_once(':').unwrap_or((label.as_str(), ""));
            if kind == "undo" {
                self.store.mark_undone(id, self.now_ms())?;
            }
            let logged = self.log(
                Record::new("journal_recovered")
                    .value(
                        "hitl_id",
                        (!id.is_empty()).then(|| Value::String(id.to_owned())),
                    )
                    .text("kind", kind)
                    .value("skipped", Some(json!(recovered.skipped)))
                    .text(
                        "status",
                        if recovered.skipped.is_empty() {
                            "allowed"
                        } else {
                            "error"
                        },
                    ),
            );
            if logged.is_none() {
                return Err(BrokerError::refused(
                    ErrorCode::IoError,
                    "a recovered apply could not be recorded in the audit log",
                ));
            }
        }
        Ok(())
    }

    /// Applies an approved approval (if this process wins the claim) or waits for
    /// whoever did, and returns the final envelope.
    pub(crate) fn settle(&self, id: &str) -> Envelope {
        match self.store.get(id) {
            Ok(approval) if !self.can_apply(&approval) => return self.wait(id),
            Ok(_) => {}
            Err(error) => return failure_for(id, &BrokerError::from(error)),
        }
        match self.store.claim_apply(id) {
            Ok(Some(approval)) => {
                let decision = decision_info(&approval);
                self.commit_claimed(&approval, decision, false)
            }
            Ok(None) => self.wait(id),
            Err(error) => failure_for(id, &BrokerError::from(error)),
        }
    }

    /// Commits the plan of an approval this process has claimed, and settles it.
    pub(crate) fn commit_claimed(
        &self,
        approval: &Approval,
        decision: DecisionInfo,
        recovering: bool,
    ) -> Envelope {
        // Part of the call's trace, in whichever process applies it.
        let trace = crate::telemetry::trace_of_approval(&approval.id);
        let _apply = match trace {
            Some(trace_id) if crate::telemetry::current_trace() == Some(trace_id) => {
                (Some(crate::telemetry::child("apply")), None)
            }
            Some(trace_id) => (
                None,
                Some(crate::telemetry::CallTrace::resume(
                    trace_id, "apply", false,
                )),
            ),
            None => (None, None),
        };
        let plan = match &approval.plan {
            Plan::Upstream(call) => {
                return self.commit_forward(approval, call, decision, recovering);
            }
            Plan::ExecRun(run) => {
                return self.commit_exec_run(approval, run, decision, recovering);
            }
            Plan::Agent(plan) => return self.commit_agent(approval, plan, decision),
            Plan::Session(plan) => return self.commit_session(approval, plan, decision),
            plan => plan.change(),
        };
        let Some(plan) = plan else {
            return self.apply_failed(
                approval,
                &decision,
                ErrorCode::IoError,
                "the stored plan is not a change to files".to_owned(),
            );
        };
        self.commit_change(approval, plan, decision, recovering)
    }

    /// An apply that failed: the error envelope, audited and stored.
    pub(crate) fn apply_failed(
        &self,
        approval: &Approval,
        decision: &DecisionInfo,
        code: ErrorCode,
        message: String,
    ) -> Envelope {
        let path = approval.path.as_deref();
        let fail = |code: ErrorCode, message: String| {
            let reason = ErrorReason::of_tool_refusal(code, &message, Some(approval.risk));
            let mut envelope = Envelope::failure(
                failure_status(code),
                crate::envelopes::apply_method(&approval.plan),
                &approval.tool,
                path,
                code,
                message,
            )
            .with_reason(reason);
            envelope.hitl = Some(hitl_ref(approval));
            envelope.decision = Some(decision.clone());
            let envelope = self.audited(
                envelope,
                Record::for_approval(approval)
                    .event("write_file_apply")
                    .text("decided_by", decision.by.as_str())
                    .text("status", "error")
                    .text("code", code.as_str()),
            );
            self.store_result(&approval.id, ApprovalStatus::Failed, &envelope);
            envelope
        };
        fail(code, message)
    }

    /// Applies `plan` for a claimed approval: snapshot for undo, commit
    /// (journaled), settle.
    pub(crate) fn commit_change(
        &self,
        approval: &Approval,
        plan: &ChangePlan,
        decision: DecisionInfo,
        recovering: bool,
    ) -> Envelope {
        let fail = |code: ErrorCode, message: String| {
            self.apply_failed(approval, &decision, code, message)
        };
        // An earlier apply interrupted after its commit point is finished (and
        // audited) before this one compares hashes.
        if let Err(error) = self.recover_journals() {
            return fail(error.code(), error.to_string());
        }
        // A change proposed in a session lands only inside its roots.
        let sandbox = match self.apply_sandbox(approval) {
            Ok(sandbox) => sandbox,
            Err(error) => return fail(error.code(), error.to_string()),
        };
        let hashes = |plan: &ChangePlan| -> Vec<FileHashes> {
            plan.changes
                .iter()
                .map(|change| FileHashes {
                    path: change.path.clone(),
                    before_hash: change.before_hash.clone(),
                    after_hash: change.after_hash(),
                })
                .collect()
        };
        if recovering {
            // A crash may have come after the renames: if every file already holds
            // its new content, the apply happened.
            if let Ok(true) = airlock_fs::already_applied(&sandbox, plan) {
                let files = hashes(plan);
                return self.applied(approval, plan, files, decision, true);
            }
        }
        // Keep the before-content first, so undo survives a crash after the write.
        let before = match airlock_fs::snapshot(&sandbox, plan) {
            Ok(before) => before,
            Err(error) => return fail(error.code(), error.to_string()),
        };
        let snapshot = Snapshot {
            approval_id: approval.id.clone(),
            files: plan
                .changes
                .iter()
                .zip(before)
                .map(|(change, before)| SnapshotFile {
                    path: change.path.clone(),
                    mode: before.as_ref().map(|(_, mode)| *mode),
                    before: before.map(|(bytes, _)| bytes),
                    before_hash: change.before_hash.clone(),
                    after_hash: change.after_hash(),
                })
                .collect(),
            undone: false,
        };
        if let Err(error) = self.store.insert_snapshot(&snapshot) {
            return fail(ErrorCode::IoError, error.to_string());
        }
        #[cfg(feature = "test-clock")]
        test_stall::at("claimed");
        let label = format!("{}:apply", approval.id);
        let options = CommitOptions {
            journal_dir: Some(&self.journal_dir),
            label: Some(&label),
            interrupt_after: None,
        };
        #[cfg(feature = "test-clock")]
        let options = CommitOptions {
            interrupt_after: test_stall::committing(options.interrupt_after),
            ..options
        };
        let committed = match self.store.with_apply_lock(|| {
            // A code run's changes also need the files its script read
            // to hold what it read.
            if matches!(approval.plan, airlock_core::plan::Plan::Code(_)) {
                self.check_reads(plan)?;
            }
            airlock_fs::commit(&sandbox, plan, options)
        }) {
            Ok(committed) => committed,
            Err(error) => return fail(ErrorCode::IoError, error.to_string()),
        };
        #[cfg(feature = "test-clock")]
        {
            test_stall::at("journaled");
            test_stall::at("committed");
        }
        match committed {
            Ok(done) => {
                let files = done
                    .into_iter()
                    .map(|file| FileHashes {
                        path: file.path,
                        before_hash: file.before_hash,
                        after_hash: file.after_hash,
                    })
                    .collect();
                self.applied(approval, plan, files, decision, recovering)
            }
            Err(error) => fail(error.code(), error.to_string()),
        }
    }

    pub(crate) fn applied(
        &self,
        approval: &Approval,
        plan: &ChangePlan,
        files: Vec<FileHashes>,
        decision: DecisionInfo,
        recovered: bool,
    ) -> Envelope {
        let path = plan.primary_path();
        let method = crate::envelopes::apply_method(&approval.plan);
        let mut envelope = Envelope::new(Status::Allowed, method, &approval.tool, path);
        let (before_hash, after_hash) = match files.as_slice() {
            [one] => (one.before_hash.clone(), one.after_hash.clone()),
            _ => (None, None),
        };
        // Spec 003's receipt: applied, the bytes written and, for one file,
        // its modification time as the disk now holds it.
        let written_bytes: u64 = plan
            .changes
            .iter()
            .filter_map(|change| change.after.as_ref())
            .map(|after| after.len() as u64)
            .sum();
        let new_mtime_ns = match plan.changes.as_slice() {
            [one] if one.after.is_some() => airlock_fs::mtime_ns(&self.sandbox, &one.path),
            _ => None,
        };
        let mut data = json!({
            "path": path,
            "created": plan.creates_only(),
            "before_hash": before_hash,
            "after_hash": after_hash,
            "hitl_id": approval.id,
            "applied": true,
            "written_bytes": written_bytes,
        });
        if let (Some(object), Some(mtime)) = (data.as_object_mut(), new_mtime_ns) {
            object.insert("new_mtime_ns".to_owned(), json!(mtime));
        }
        if let Some(object) = data.as_object_mut() {
            if files.len() > 1 {
                object.insert("files".to_owned(), json!(files));
            }
            for (key, value) in &plan.report {
                object.insert(key.clone(), value.clone());
            }
        }
        envelope.data = Some(data);
        envelope.hitl = Some(hitl_ref(approval));
        let mut record = Record::for_approval(approval)
            .event("write_file_apply")
            .text("decision", "approve")
            .text("decided_by", decision.by.as_str())
            .value("user", decision.user.clone().map(Value::String))
            .value(
                "channel",
                decision
                    .channel
                    .map(|channel| Value::from(channel.as_str())),
            )
            .flag("created", plan.creates_only())
            .value("before_hash", before_hash.map(Value::String))
            .value("after_hash", after_hash.map(Value::String))
            .value("files", (files.len() > 1).then(|| json!(files)))
            .text("patch_hash", &plan.patch_hash)
            .value("edited", plan.is_edited().then_some(Value::Bool(true)))
            .text("status", "allowed");
        envelope.decision = Some(decision);
        // A crash after the record was written but before the row was settled
        // must not record the apply twice: the existing record stands.
        let logged = if recovered {
            self.logged_apply(&approval.id)
        } else {
            None
        };
        let envelope = match logged {
            Some(audit) => {
                envelope.audit = Some(audit);
                envelope
            }
            None => {
                if recovered {
                    record = record.flag("recovered", true);
                }
                self.audited(envelope, record)
            }
        };
        self.store_result(&approval.id, ApprovalStatus::Applied, &envelope);
        envelope
    }

    /// The audit record of a successful apply of `id`, if the log has one.
    pub(crate) fn logged_apply(&self, id: &str) -> Option<airlock_core::envelope::AuditRef> {
        let query = airlock_audit::Query {
            event_type: Some("write_file_apply".to_owned()),
            filters: vec![
                ("hitl_id".to_owned(), id.to_owned()),
                ("status".to_owned(), "allowed".to_owned()),
            ],
            since: None,
        };
        let records = self.audit_source().query(&query).ok()?;
        let record = records.last()?;
        Some(airlock_core::envelope::AuditRef {
            prev_hash: record.get("prev_hash")?.as_str()?.to_owned(),
            event_hash: record.get("event_hash")?.as_str()?.to_owned(),
        })
    }

    /// The value of a store call whose failure leaves nothing to answer
    /// (a sweep, an expiry someone else may have done): a failure is logged
    /// with what was being done, never dropped silently.
    pub(crate) fn logged<T>(
        &self,
        doing: impl std::fmt::Display,
        result: Result<T, airlock_store::StoreError>,
    ) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(error) => {
                eprintln!("airlock: {doing}: {error}");
                None
            }
        }
    }

    /// Stores the final envelope of `id` with its status. A failure is
    /// logged, not dropped: the call's own answer stands, and whoever reads
    /// the approval later gets its outcome from the row.
    pub(crate) fn store_result(&self, id: &str, status: ApprovalStatus, envelope: &Envelope) {
        if let Err(error) = self.store.finish(id, status, envelope, self.now_ms()) {
            eprintln!("airlock: the result of {id} could not be stored: {error}");
        }
    }
}

/// Testing crash recovery across processes (`test-clock` builds only):
/// `AIRLOCK_TEST_STALL_APPLY=POINT:MARKER` makes an apply stop at `POINT`
/// for good, after creating the file `MARKER`, so a test can kill the
/// process there. Points: `claimed` (the approval claimed, nothing written),
/// `journaled` (a multi-file commit past its commit point, half its renames
/// done), `committed` (the files written, nothing settled or audited).
#[cfg(feature = "test-clock")]
mod test_stall {
    fn wanted() -> Option<(String, std::path::PathBuf)> {
        let value = std::env::var("AIRLOCK_TEST_STALL_APPLY").ok()?;
        let (point, marker) = value.split_once(':')?;
        Some((point.to_owned(), std::path::PathBuf::from(marker)))
    }

    /// Stops here for good when `point` is the one asked for.
    pub(super) fn at(point: &str) {
        if let Some((wanted, marker)) = wanted()
            && wanted == point
        {
            let _ = std::fs::write(&marker, std::process::id().to_string());
            loop {
                std::thread::park();
            }
        }
    }

    /// For `journaled`: the commit stops after its first step (past the
    /// commit point), and the process stays there.
    pub(super) fn committing(asked: Option<usize>) -> Option<usize> {
        match wanted() {
            Some((point, _)) if point == "journaled" => Some(1),
            _ => asked,
        }
    }
}
