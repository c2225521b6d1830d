//! Batch decisions (specs 000, 001 and 002 phase 2): several pending
//! approvals decided in one step, each still its own decision and audit
//! record, applied in creation order, stopping at the first whose change
//! could not be applied (the files moved underneath it).

use airlock_core::ErrorCode;
use airlock_core::envelope::{Envelope, Status};

use crate::broker::Broker;
use crate::decide::DecideRequest;
use crate::error::BrokerError;

/// The most approvals one batch decides.
pub const MAX_BATCH: usize = 200;

/// What became of one approval of a batch.
#[derive(Debug)]
pub enum BatchOutcome {
    /// Decided (and, when approved, applied or failed): the envelope.
    Decided(Box<Envelope>),
    /// Not decided: who may decide, already decided, expired, unknown.
    Refused(BrokerError),
    /// Not looked at: an earlier approval of the batch failed to apply.
    Skipped,
}

impl Broker {
    /// Decides `ids` (each once, duplicates ignored) with `request`, in the
    /// order the approvals were created. An approval whose change fails to
    /// apply stops the batch: the ones after it are left pending
    /// ([`BatchOutcome::Skipped`]). An "always allow" or an edited content
    /// is never part of a batch.
    pub fn decide_batch(
        &self,
        ids: &[String],
        request: &DecideRequest,
    ) -> Result<Vec<(String, BatchOutcome)>, BrokerError> {
        if ids.is_empty() || ids.len() > MAX_BATCH {
            return Err(BrokerError::refused(
                ErrorCode::InvalidInput,
                format!("a batch decides 1 to {MAX_BATCH} approvals"),
            ));
        }
        if request.always.is_some() || request.content.is_some() {
            return Err(BrokerError::refused(
                ErrorCode::InvalidInput,
                "a batch decision carries no always-allow and no edited content",
            ));
        }
        // Known ones in creation order, then the unknown ones as given.
        let mut known = Vec::new();
        let mut unknown = Vec::new();
        for id in ids {
            if known.iter().any(|(_, seen): &(i64, String)| seen == id) || unknown.contains(id) {
                continue;
            }
            match self.store.get(id) {
                Ok(approval) => known.push((approval.seq, id.clone())),
                Err(_) => unknown.push(id.clone()),
            }
        }
        known.sort();
        let mut outcomes = Vec::new();
        let mut stopped = false;
        for (_, id) in known {
            if stopped {
                outcomes.push((id, BatchOutcome::Skipped));
                continue;
            }
            match self.decide(&id, request) {
                Ok(envelope) => {
                    stopped = request.approve && envelope.status == Status::Error;
                    outcomes.push((id, BatchOutcome::Decided(Box::new(envelope))));
                }
                Err(error) => outcomes.push((id, BatchOutcome::Refused(error))),
            }
        }
        for id in unknown {
            let error = self
                .approval(&id)
                .err()
                .unwrap_or_else(|| BrokerError::refused(ErrorCode::NotFound, "no such approval"));
            outcomes.push((id, BatchOutcome::Refused(error)));
        }
        Ok(outcomes)
    }

    /// The pending approvals a batch over `session` and `tool` would take
    /// (both optional filters), oldest first.
    pub fn pending_matching(
        &self,
        session: Option<&str>,
        tool: Option<&str>,
    ) -> Result<Vec<String>, BrokerError> {
        Ok(self
            .pending(session)?
            .into_iter()
            .filter(|approval| tool.is_none_or(|tool| approval.tool == tool))
            .map(|approval| approval.id.clone())
            .collect())
    }
}
