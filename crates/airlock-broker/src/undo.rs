//! Undo: an applied change reverted through the same engine, if the files
//! still hold what it wrote.

use airlock_core::ErrorCode;
use airlock_core::envelope::{Envelope, Status};
use airlock_fs::{CommitOptions, UndoFile};
use airlock_store::ApprovalStatus;
use serde_json::{Value, json};

use crate::broker::Broker;
use crate::error::BrokerError;
use crate::record::Record;

impl Broker {
    /// Restores the before-content of an applied change if the file still holds
    /// what the change wrote; otherwise `conflict`. Audited.
    pub fn undo(&self, id: &str, user: &str) -> Result<Envelope, BrokerError> {
        let approval = self.store.get(id)?;
        if approval.plan.is_upstream() {
            return Err(BrokerError::refused(
                ErrorCode::InvalidInput,
                format!(
                    "{id} is an upstream tool call; airlock cannot undo what another server did"
                ),
            ));
        }
        if approval.status != ApprovalStatus::Applied {
            return Err(BrokerError::refused(
                ErrorCode::InvalidInput,
                format!("approval {id} is {}, not applied", approval.status),
            ));
        }
        let snapshot = self.store.snapshot(id)?;
        if snapshot.undone {
            return Err(BrokerError::refused(
                ErrorCode::AlreadyDecided,
                format!("{id} was already undone"),
            ));
        }
        let files: Vec<UndoFile> = snapshot
            .files
            .iter()
            .map(|file| UndoFile {
                path: file.path.clone(),
                expected: file.after_hash.clone(),
                restore: file.before.clone(),
                mode: file.mode,
            })
            .collect();
        self.recover_journals()?;
        let label = format!("{id}:undo");
        let options = CommitOptions {
            journal_dir: Some(&self.journal_dir),
            label: Some(&label),
            interrupt_after: None,
        };
        let result = self
            .store
            .with_apply_lock(|| airlock_fs::undo(&self.sandbox, &files, options))?;
        let path = approval.path.as_deref();
        let record = Record::for_approval(&approval)
            .event("undo")
            .text("user", user);
        match result {
            Ok(done) => {
                if !self.store.mark_undone(id, self.now_ms())? {
                    return Err(BrokerError::refused(
                        ErrorCode::AlreadyDecided,
                        format!("{id} was already undone"),
                    ));
                }
                let mut envelope = Envelope::new(Status::Allowed, "fs.undo", &approval.tool, path);
                let restored: Vec<Value> = snapshot
                    .files
                    .iter()
                    .map(|file| {
                        json!({
                            "path": file.path,
                            "restored_hash": file.before_hash,
                            "removed": file.before.is_none(),
                        })
                    })
                    .collect();
                let mut data = json!({"path": path, "hitl_id": id});
                if let (Some(object), [one]) = (data.as_object_mut(), snapshot.files.as_slice()) {
                    object.insert("restored_hash".to_owned(), json!(one.before_hash));
                    object.insert("removed".to_owned(), json!(one.before.is_none()));
                } else if let Some(object) = data.as_object_mut() {
                    object.insert("files".to_owned(), Value::Array(restored));
                }
                envelope.data = Some(data);
                let (before_hash, after_hash) = match done.as_slice() {
                    [one] => (one.before_hash.clone(), one.after_hash.clone()),
                    _ => (None, None),
                };
                Ok(self.audited(
                    envelope,
                    record
                        .text("status", "allowed")
                        .value("before_hash", before_hash.map(Value::String))
                        .value("after_hash", after_hash.map(Value::String))
                        .value("files", (done.len() > 1).then(|| json!(done))),
                ))
            }
            Err(error) => {
                let envelope = Envelope::failure(
                    Status::Error,
                    "fs.undo",
                    &approval.tool,
                    path,
                    error.code(),
                    error.to_string(),
                );
                Ok(self.audited(
                    envelope,
                    record
                        .text("status", "error")
                        .text("code", error.code().as_str()),
                ))
            }
        }
    }
}
