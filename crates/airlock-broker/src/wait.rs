//! Wait: a call blocks until its approval is settled or expires; expiry and
//! cancellation of approvals nobody decided.

use airlock_core::ErrorCode;
use airlock_core::envelope::{DecidedBy, DecisionInfo, Envelope, ErrorReason, Status};
use airlock_store::ApprovalStatus;

use crate::broker::Broker;
use crate::envelopes::{failure_for, hitl_ref, settled_from_row};
use crate::error::BrokerError;
use crate::record::Record;

/// Waiting out a shared store that cannot be reached: with a growing pause,
/// for a minute, or until the approval's expiry as last seen when that is
/// later.
struct Away {
    until_ms: u64,
    pause: std::time::Duration,
}

impl Away {
    fn new(now_ms: u64) -> Away {
        Away {
            until_ms: now_ms.saturating_add(60_000),
            pause: std::time::Duration::from_millis(50),
        }
    }

    fn back(&mut self, expires_ms: u64, now_ms: u64) {
        self.until_ms = expires_ms.max(now_ms.saturating_add(60_000));
        self.pause = std::time::Duration::from_millis(50);
    }

    /// Whether to look again after a pause (taken here): the store is only
    /// away, and there is time left.
    fn wait_out(&mut self, error: &BrokerError, now_ms: u64) -> bool {
        if error.code() != ErrorCode::StoreUnavailable || now_ms >= self.until_ms {
            return false;
        }
        std::thread::sleep(self.pause);
        self.pause = (self.pause * 2).min(std::time::Duration::from_secs(1));
        true
    }
}

/// The approvals a thread of this process waits on in [`Broker::wait`], and
/// the first such thread of each. An approved upstream call is carried out
/// by that thread, not by whoever decided it: the waiting thread runs for
/// the client the call came from (an MCP face keeps which client in a
/// thread-local), which a sampling request must be put to and an upstream's
/// progress routed to. Process-wide, since a reload makes a new broker while
/// calls wait on the old one.
static WAITED: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<String, std::thread::ThreadId>>,
> = std::sync::LazyLock::new(Default::default);

/// This thread's place in [`WAITED`], given up when its wait ends.
struct Waiting(Option<String>);

impl Waiting {
    fn enter(id: &str) -> Waiting {
        let Ok(mut waited) = WAITED.lock() else {
            return Waiting(None);
        };
        if waited.contains_key(id) {
            return Waiting(None);
        }
        waited.insert(id.to_owned(), std::thread::current().id());
        Waiting(Some(id.to_owned()))
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(id) = &self.0
            && let Ok(mut waited) = WAITED.lock()
        {
            waited.remove(id);
        }
    }
}

/// Whether another thread of this process waits on approval `id` (and so
/// carries it out once approved).
pub(crate) fn waited_elsewhere(id: &str) -> bool {
    WAITED.lock().is_ok_and(|waited| {
        waited
            .get(id)
            .is_some_and(|thread| *thread != std::thread::current().id())
    })
}

impl Broker {
    /// Blocks until the approval is settled or its time is up (then it expires,
    /// which denies: a timeout never approves). It never waits for a process that
    /// is gone: a settled approval without a stored result is answered from its
    /// row, and an apply whose owner died is recovered here.
    pub fn wait(&self, id: &str) -> Envelope {
        let _waiting = Waiting::enter(id);
        // The call waiting for a person (or whoever applies it).
        let mut decide = Some(crate::telemetry::child("decide"));
        let mut last_recovery = std::time::Instant::now();
        // A shared store that is away for a moment (a database restart) is
        // waited out, up to the approval's expiry as last seen.
        let mut away = Away::new(self.now_ms());
        loop {
            let looked = self
                .cursor()
                .and_then(|cursor| Ok((cursor, self.store.get(id)?)));
            let (cursor, approval) = match looked {
                Ok(looked) => {
                    away.back(looked.1.expires_ms, self.now_ms());
                    looked
                }
                Err(error) => {
                    if away.wait_out(&error, self.now_ms()) {
                        continue;
                    }
                    return failure_for(id, &error);
                }
            };
            match approval.status {
                ApprovalStatus::Pending => {
                    if self.now_ms() >= approval.expires_ms {
                        if let Some(envelope) = self.expire(id) {
                            return envelope;
                        }
                        continue;
                    }
                }
                ApprovalStatus::Approved if self.can_apply(&approval) => {
                    // Decided: the wait is over, and the apply is a step
                    // of the call of its own, whichever process wins it.
                    drop(decide.take());
                    return self.settle(id);
                }
                ApprovalStatus::Approved => {
                    // Only the process holding the upstream connection can carry
                    // this out; if it is gone, nobody can.
                    if !approval
                        .waiter_pid
                        .is_some_and(|holder| self.store.alive(holder))
                        && let Some(envelope) = self.abandon_forward(&approval)
                    {
                        return envelope;
                    }
                }
                ApprovalStatus::Applying => {
                    if last_recovery.elapsed() >= std::time::Duration::from_secs(1) {
                        last_recovery = std::time::Instant::now();
                        if let Err(error) = self.recover_applies() {
                            return failure_for(id, &error);
                        }
                    }
                }
                ApprovalStatus::Applied
                | ApprovalStatus::Failed
                | ApprovalStatus::Denied
                | ApprovalStatus::Expired
                | ApprovalStatus::Cancelled => {
                    return approval
                        .result
                        .clone()
                        .unwrap_or_else(|| settled_from_row(&approval));
                }
            }
            let deadline =
                (approval.status == ApprovalStatus::Pending).then_some(approval.expires_ms);
            self.park(cursor, deadline);
        }
    }

    /// Expires a pending approval whose time is up. `None` when someone decided
    /// it first.
    pub fn expire(&self, id: &str) -> Option<Envelope> {
        let expired = self.store.expire(id, self.now_ms());
        let approval = self
            .logged(format_args!("expiring {id}"), expired)
            .flatten()?;
        let mut envelope = Envelope::failure(
            Status::Denied,
            crate::envelopes::approval_method(&approval.plan),
            &approval.tool,
            approval.path.as_deref(),
            ErrorCode::Expired,
            "no decision before the timeout: denied",
        )
        .with_reason(Some(ErrorReason::new(
            "timeout",
            "timeout",
            Some(approval.risk),
        )));
        envelope.hitl = Some(hitl_ref(&approval));
        envelope.decision = Some(DecisionInfo {
            by: DecidedBy::Timeout,
            user: None,
            channel: None,
            reason: None,
        });
        let envelope = self.audited(
            envelope,
            Record::for_approval(&approval)
                .event("hitl_timeout")
                .text("decision", "timeout")
                .text("decided_by", "timeout")
                .number(
                    "duration_ms",
                    self.now_ms().saturating_sub(approval.created_ms),
                )
                .text("status", "denied"),
        );
        self.store_result(id, ApprovalStatus::Expired, &envelope);
        Some(envelope)
    }

    /// Cancels a pending approval whose waiting call went away (wait mode).
    /// `None` when it was no longer pending.
    pub fn cancel(&self, id: &str) -> Option<Envelope> {
        self.cancel_because(id, "the waiting call went away: cancelled")
    }

    /// Cancels a pending approval, saying `why` in its answer.
    pub(crate) fn cancel_because(&self, id: &str, why: &str) -> Option<Envelope> {
        let cancelled = self.store.cancel(id, self.now_ms());
        let approval = self
            .logged(format_args!("cancelling {id}"), cancelled)
            .flatten()?;
        let mut envelope = Envelope::failure(
            Status::Denied,
            crate::envelopes::approval_method(&approval.plan),
            &approval.tool,
            approval.path.as_deref(),
            ErrorCode::PolicyDenied,
            why,
        )
        .with_reason(Some(ErrorReason::new(
            "hitl",
            "cancelled",
            Some(approval.risk),
        )));
        envelope.hitl = Some(hitl_ref(&approval));
        let envelope = self.audited(
            envelope,
            Record::for_approval(&approval)
                .event("hitl_cancelled")
                .text("decision", "cancel")
                .number(
                    "duration_ms",
                    self.now_ms().saturating_sub(approval.created_ms),
                )
                .text("status", "denied"),
        );
        self.store_result(id, ApprovalStatus::Cancelled, &envelope);
        Some(envelope)
    }

    /// Cancels every pending approval this process waits for: an interrupted
    /// call, even one interrupted between creating its approval and reporting
    /// it. Returns their ids.
    /// Cancels a new approval whose proposal could not be audited, so none
    /// stays pending that the log does not show. The audit and the store
    /// fail together when a shared store is away: the cancel is tried again
    /// for a while, until the approval is no longer pending.
    pub(crate) fn cancel_unaudited(&self, id: &str) {
        let mut pause = std::time::Duration::from_millis(50);
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if self.cancel(id).is_some() {
                return;
            }
            match self.store.get(id) {
                Ok(approval) if approval.status != ApprovalStatus::Pending => return,
                Err(airlock_store::StoreError::NotFound(_)) => return,
                _ => {}
            }
            if std::time::Instant::now() >= give_up {
                eprintln!("airlock: {id} stays pending without its proposal's audit record");
                return;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_secs(1));
        }
    }

    pub fn cancel_own_waits(&self) -> Vec<String> {
        let me = self.store.me();
        let abandoned = self.store.abandoned(&|holder| holder != me);
        self.logged("listing abandoned approvals", abandoned)
            .unwrap_or_default()
            .iter()
            .filter_map(|approval| self.cancel(&approval.id).map(|_| approval.id.clone()))
            .collect()
    }

    /// When the next pending approval expires, if any is pending.
    pub fn next_expiry(&self) -> Result<Option<u64>, BrokerError> {
        Ok(self.store.next_expiry()?)
    }

    /// Expires every pending approval whose time is up (for `pending`, `watch`).
    pub fn expire_overdue(&self) -> Result<usize, BrokerError> {
        let overdue = self.store.overdue(self.now_ms())?;
        let expired = overdue
            .iter()
            .filter_map(|approval| self.expire(&approval.id))
            .count();
        let abandoned = self.store.abandoned(&|holder| self.store.alive(holder))?;
        let cancelled = abandoned
            .iter()
            .filter_map(|approval| self.cancel(&approval.id))
            .count();
        Ok(expired + cancelled)
    }
}
