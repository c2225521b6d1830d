//! Approvals: the rows of the state machine (pending -> approved | denied |
//! expired | cancelled; approved -> applying -> applied | failed), each
//! transition a compare-and-set that writes its event in the same
//! transaction. The typed parts of a row are written and read here only.

use airlock_core::envelope::{DecidedBy, Envelope};
use airlock_core::{ApprovalTerms, Channel, Decided, Plan, Requester, Risk, StateError};
use serde::{Deserialize, Serialize};

use crate::feed::{EventKind, NewEvent, write_event};
use crate::sql::{Conn, Row, args, first, scalar};
use crate::{Millis, Store, StoreError};

/// The states of DESIGN §7.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    Approved,
    /// Claimed by the process that applies it (between approved and applied).
    Applying,
    Applied,
    Failed,
    Denied,
    Expired,
    Cancelled,
}

impl ApprovalStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Applying => "applying",
            ApprovalStatus::Applied => "applied",
            ApprovalStatus::Failed => "failed",
            ApprovalStatus::Denied => "denied",
            ApprovalStatus::Expired => "expired",
            ApprovalStatus::Cancelled => "cancelled",
        }
    }

    fn parse(text: &str) -> Result<ApprovalStatus, StoreError> {
        [
            ApprovalStatus::Pending,
            ApprovalStatus::Approved,
            ApprovalStatus::Applying,
            ApprovalStatus::Applied,
            ApprovalStatus::Failed,
            ApprovalStatus::Denied,
            ApprovalStatus::Expired,
            ApprovalStatus::Cancelled,
        ]
        .into_iter()
        .find(|status| status.as_str() == text)
        .ok_or_else(|| StoreError::Corrupt(format!("unknown status {text}")))
    }

    /// Whether no further decision can happen.
    pub const fn is_final(self) -> bool {
        matches!(
            self,
            ApprovalStatus::Applied
                | ApprovalStatus::Failed
                | ApprovalStatus::Denied
                | ApprovalStatus::Expired
                | ApprovalStatus::Cancelled
        )
    }
}

impl std::fmt::Display for ApprovalStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a new approval records.
#[derive(Debug, Clone, PartialEq)]
pub struct NewApproval {
    pub id: String,
    pub tool: String,
    /// The exact arguments (JSON), for apply.
    pub args_json: String,
    /// Redacted arguments (JSON), for display.
    pub args_display: String,
    /// Identical pending calls share this key (tool, args, session, owner).
    pub dedup_key: String,
    pub user: Option<String>,
    pub agent: Option<String>,
    /// Who made the call, as the face authenticated it
    /// (`Principal::owner_key`): only they (and an admin) see the approval
    /// from an agent's side. `None` for rows older than the column: nobody's.
    pub owner: Option<String>,
    pub session: Option<String>,
    pub tool_call_id: Option<String>,
    /// The caller's own correlation id (spec 000's `context_id`).
    pub context_id: Option<String>,
    /// Who asked on a chat platform (where its confirmation goes).
    pub requester: Option<Requester>,
    pub risk: Risk,
    /// What the policy's decision binds the approval to (timeout,
    /// allow_skip, require_reason, approvers).
    pub terms: ApprovalTerms,
    pub path: Option<String>,
    pub summary: String,
    pub diff: String,
    /// What is applied on approval.
    pub plan: Plan,
    pub created_ms: Millis,
    pub expires_ms: Millis,
    /// The process blocked waiting for this approval (wait mode); when it is
    /// gone, the approval is cancelled rather than applied for nobody.
    pub waiter_pid: Option<u32>,
}

impl NewApproval {
    /// An approval of `tool` with everything else empty: no principal, no
    /// session, no path, no waiter.
    pub fn new(
        id: &str,
        tool: &str,
        risk: Risk,
        terms: ApprovalTerms,
        plan: Plan,
        created_ms: Millis,
        expires_ms: Millis,
    ) -> NewApproval {
        NewApproval {
            id: id.to_owned(),
            tool: tool.to_owned(),
            args_json: "{}".to_owned(),
            args_display: "{}".to_owned(),
            dedup_key: id.to_owned(),
            user: None,
            agent: None,
            owner: None,
            session: None,
            tool_call_id: None,
            context_id: None,
            requester: None,
            risk,
            terms,
            path: None,
            summary: String::new(),
            diff: String::new(),
            plan,
            created_ms,
            expires_ms,
            waiter_pid: None,
        }
    }
}

/// A stored approval.
#[derive(Debug, Clone, PartialEq)]
pub struct Approval {
    pub new: NewApproval,
    /// Order of creation, for FIFO presentation.
    pub seq: i64,
    pub status: ApprovalStatus,
    /// Who decided it, once someone (or the timeout) did; `None` while
    /// pending and for a cancelled approval.
    pub decision: Option<Decided>,
    /// The final envelope once the call is settled.
    pub result: Option<Envelope>,
    /// The process that decided or is applying it.
    pub owner_pid: Option<u32>,
    /// An applied change whose before-content was put back (`airlock undo`).
    pub undone: bool,
}

impl std::ops::Deref for Approval {
    type Target = NewApproval;
    fn deref(&self) -> &NewApproval {
        &self.new
    }
}

/// Limits on pending approvals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_pending: u64,
    pub max_pending_per_session: u64,
}

/// The outcome of `create_approval`.
#[derive(Debug, Clone, PartialEq)]
pub enum Created {
    New(Approval),
    /// An identical call is already pending: this is it.
    Existing(Approval),
}

/// A decision on a pending approval.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub approve: bool,
    pub by: DecidedBy,
    pub user: Option<String>,
    pub channel: Option<Channel>,
    pub reason: Option<String>,
    pub at_ms: Millis,
    /// An approval of an edited version: the plan (JSON) and diff that replace
    /// the proposal's, in the same update as the decision.
    pub edited: Option<EditedPlan>,
}

/// The plan an approver's edit produced.
#[derive(Debug, Clone, PartialEq)]
pub struct EditedPlan {
    pub plan: Plan,
    pub diff: String,
}
const APPROVAL_COLUMNS: &str = "seq, id, tool, args_json, args_display, dedup_key, \"user\", agent, \
     session, tool_call_id, risk, decision_json, path, summary, diff, plan_json, created_ms, \
     expires_ms, status, decided_by, decided_user, channel, reason, decided_ms, result_json, \
     waiter_pid, owner_pid, owner, context_id, edited, undone, requester_channel, requester_chat, \
     requester_user";
impl Store {
    /// Records a new pending approval, unless an identical call is already
    /// pending (then that one is returned), or the pending limits are reached.
    pub fn create_approval(
        &self,
        new: &NewApproval,
        limits: Limits,
    ) -> Result<Created, StoreError> {
        self.changing(|tx| {
            let now = new.created_ms as i64;
            let existing = first(
                tx,
                &format!(
                    "SELECT {APPROVAL_COLUMNS} FROM approvals \
                     WHERE status = 'pending' AND expires_ms > ?1 AND dedup_key = ?2 \
                     ORDER BY seq LIMIT 1"
                ),
                args![now, new.dedup_key],
            )?;
            if let Some(existing) = existing {
                return Ok(Created::Existing(approval_from_row(&existing)?));
            }
            let pending: i64 = scalar(
                tx,
                "SELECT COUNT(*) FROM approvals WHERE status = 'pending' AND expires_ms > ?1",
                args![now],
            )?;
            let pending = pending.max(0) as u64;
            if pending >= limits.max_pending {
                return Err(StoreError::RateLimited {
                    pending,
                    limit: limits.max_pending,
                    scope: " in the workspace",
                });
            }
            if let Some(session) = &new.session {
                let in_session: i64 = scalar(
                    tx,
                    // One principal's session: another naming the same
                    // string does not eat into its allowance.
                    "SELECT COUNT(*) FROM approvals WHERE status = 'pending' AND expires_ms > ?1 \
                     AND session = ?2 AND owner IS NOT DISTINCT FROM ?3",
                    args![now, session, new.owner],
                )?;
                let in_session = in_session.max(0) as u64;
                if in_session >= limits.max_pending_per_session {
                    return Err(StoreError::RateLimited {
                        pending: in_session,
                        limit: limits.max_pending_per_session,
                        scope: " in this session",
                    });
                }
            }
            tx.execute(
                "INSERT INTO approvals (id, tool, args_json, args_display, dedup_key, \"user\", agent, \
                 session, tool_call_id, risk, decision_json, path, summary, diff, plan_json, \
                 created_ms, expires_ms, status, waiter_pid, owner, context_id, \
                 requester_channel, requester_chat, requester_user) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, 'pending', ?18, ?19, ?20, ?21, ?22, ?23)",
                args![
                    new.id,
                    new.tool,
                    new.args_json,
                    new.args_display,
                    new.dedup_key,
                    new.user,
                    new.agent,
                    new.session,
                    new.tool_call_id,
                    new.risk.as_str(),
                    new.terms.to_stored(),
                    new.path,
                    new.summary,
                    new.diff,
                    new.plan.to_stored(),
                    new.created_ms as i64,
                    new.expires_ms as i64,
                    new.waiter_pid,
                    new.owner,
                    new.context_id,
                    new.requester.as_ref().map(|r| r.channel.as_str()),
                    new.requester.as_ref().map(|r| r.chat.as_str()),
                    new.requester.as_ref().map(|r| r.user.as_str()),
                ],
            )?;
            let created = get_in(tx, &new.id)?;
            write_event(
                tx,
                NewEvent {
                    kind: EventKind::ApprovalCreated,
                    subject: Some(&created.id),
                    owner: created.owner.as_deref(),
                    at_ms: created.created_ms,
                    data: serde_json::json!({"tool": created.tool, "risk": created.risk.as_str()}),
                },
            )?;
            Ok(Created::New(created))
        })
    }

    /// One approval.
    pub fn get(&self, id: &str) -> Result<Approval, StoreError> {
        self.with(|conn| get_in(conn, id))
    }

    /// When the next pending approval expires, if any is pending.
    pub fn next_expiry(&self) -> Result<Option<Millis>, StoreError> {
        self.with(|conn| {
            let next: Option<i64> = scalar(
                conn,
                "SELECT min(expires_ms) FROM approvals WHERE status = 'pending'",
                &[],
            )?;
            Ok(next.map(|ms| ms.max(0) as u64))
        })
    }

    /// How many approvals are pending and not expired.
    pub fn pending_count(&self, now: Millis) -> Result<u64, StoreError> {
        self.with(|conn| {
            let count: i64 = scalar(
                conn,
                "SELECT count(*) FROM approvals WHERE status = 'pending' AND expires_ms > ?1",
                args![i64::try_from(now).unwrap_or(i64::MAX)],
            )?;
            Ok(count.max(0) as u64)
        })
    }

    /// Pending approvals that have not expired, oldest first (per-session FIFO).
    pub fn pending(&self, session: Option<&str>, now: Millis) -> Result<Vec<Approval>, StoreError> {
        self.with(|conn| {
            listing(
                conn,
                &format!(
                    "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE status = 'pending' \
                     AND expires_ms > ?1 AND (CAST(?2 AS TEXT) IS NULL OR session = ?2) ORDER BY seq"
                ),
                args![now as i64, session],
            )
        })
    }

    /// The newest approval of the call the caller names `tool_call_id`.
    pub fn by_tool_call_id(&self, tool_call_id: &str) -> Result<Option<Approval>, StoreError> {
        self.with(|conn| {
            Ok(listing(
                conn,
                &format!(
                    "SELECT {APPROVAL_COLUMNS} FROM approvals \
                     WHERE tool_call_id = ?1 ORDER BY seq DESC LIMIT 1"
                ),
                args![tool_call_id],
            )?
            .into_iter()
            .next())
        })
    }

    /// Settled approvals (decided, applied, failed, expired, cancelled),
    /// newest first: those created at or after `since`, at most `limit`.
    pub fn history(&self, since: Millis, limit: usize) -> Result<Vec<Approval>, StoreError> {
        self.with(|conn| {
            listing(
                conn,
                &format!(
                    "SELECT {APPROVAL_COLUMNS} FROM approvals \
                     WHERE status <> 'pending' AND created_ms >= ?1 ORDER BY seq DESC LIMIT ?2"
                ),
                args![since as i64, i64::try_from(limit).unwrap_or(i64::MAX)],
            )
        })
    }

    /// Ids of approvals that start with `prefix` (at most `limit`), and
    /// failing that the ids of the newest approvals, for a "did you mean".
    pub fn ids_starting_with(&self, prefix: &str, limit: usize) -> Result<Vec<String>, StoreError> {
        self.with(|conn| {
            conn.query(
                "SELECT id FROM approvals WHERE substr(id, 1, length(?1)) = ?1 ORDER BY seq LIMIT ?2",
                args![prefix, i64::try_from(limit).unwrap_or(i64::MAX)],
            )?
            .iter()
            .map(|row| row.at(0))
            .collect()
        })
    }

    /// The ids of the newest `limit` approvals.
    pub fn recent_ids(&self, limit: usize) -> Result<Vec<String>, StoreError> {
        self.with(|conn| {
            conn.query(
                "SELECT id FROM approvals ORDER BY seq DESC LIMIT ?1",
                args![i64::try_from(limit).unwrap_or(i64::MAX)],
            )?
            .iter()
            .map(|row| row.at(0))
            .collect()
        })
    }

    /// Approvals still `pending` whose time is up, oldest first.
    pub fn overdue(&self, now: Millis) -> Result<Vec<Approval>, StoreError> {
        self.with(|conn| {
            listing(
                conn,
                &format!(
                    "SELECT {APPROVAL_COLUMNS} FROM approvals \
                     WHERE status = 'pending' AND expires_ms <= ?1 ORDER BY seq"
                ),
                args![now as i64],
            )
        })
    }

    /// Decides a pending approval: the compare-and-set `pending -> approved|denied`.
    /// Exactly one of several concurrent deciders wins; the others get
    /// `AlreadyDecided`. An approval past its expiry cannot be decided: it becomes
    /// `expired` and the decider gets `Expired`.
    pub fn decide(&self, id: &str, verdict: &Verdict) -> Result<Approval, StoreError> {
        let status = if verdict.approve {
            "approved"
        } else {
            "denied"
        };
        // An edited version goes with an approval only.
        let edited = verdict.edited.as_ref().filter(|_| verdict.approve);
        let me = self.me();
        self.changing(|conn| {
            let changed = conn.execute(
                "UPDATE approvals SET status = ?2, decided_by = ?3, decided_user = ?4, \
                 channel = ?5, reason = ?6, decided_ms = ?7, owner_pid = ?8, \
                 plan_json = coalesce(?9, plan_json), diff = coalesce(?10, diff), edited = ?11 \
                 WHERE id = ?1 AND status = 'pending' AND expires_ms > ?7",
                args![
                    id,
                    status,
                    verdict.by.as_str(),
                    verdict.user,
                    verdict.channel.map(Channel::as_str),
                    verdict.reason,
                    verdict.at_ms as i64,
                    me,
                    edited.map(|edited| edited.plan.to_stored()),
                    edited.map(|edited| edited.diff.as_str()),
                    edited.is_some(),
                ],
            )?;
            if changed == 1 {
                let decided = get_in(conn, id)?;
                write_event(
                    conn,
                    NewEvent {
                        kind: EventKind::ApprovalDecided,
                        subject: Some(id),
                        owner: decided.owner.as_deref(),
                        at_ms: verdict.at_ms,
                        data: serde_json::json!({
                            "status": status,
                            "by": verdict.by.as_str(),
                            "user": verdict.user,
                            "channel": verdict.channel.map(Channel::as_str),
                            "edited": edited.is_some(),
                        }),
                    },
                )?;
                return Ok(decided);
            }
            let current = get_in(conn, id)?;
            if current.status == ApprovalStatus::Pending {
                Err(StoreError::Expired(id.to_owned()))
            } else {
                Err(StoreError::AlreadyDecided {
                    id: id.to_owned(),
                    status: current.status,
                })
            }
        })
    }

    /// `pending -> expired` (a timeout). `Ok(None)` when someone decided first.
    pub fn expire(&self, id: &str, at_ms: Millis) -> Result<Option<Approval>, StoreError> {
        self.cas(
            id,
            "pending",
            "status = 'expired', decided_by = 'timeout', decided_ms = ?3",
            at_ms,
            EventKind::ApprovalExpired,
        )
    }

    /// Brings a pending approval's expiry forward to `until_ms` (never
    /// later than it was); `Ok(None)` when it is no longer pending or
    /// already expires by then.
    pub fn cap_expiry(
        &self,
        id: &str,
        until_ms: Millis,
        at_ms: Millis,
    ) -> Result<Option<Approval>, StoreError> {
        self.changing(|conn| {
            let changed = conn.execute(
                "UPDATE approvals SET expires_ms = ?2 \
                 WHERE id = ?1 AND status = 'pending' AND expires_ms > ?2",
                args![id, until_ms as i64],
            )?;
            if changed != 1 {
                return Ok(None);
            }
            let approval = get_in(conn, id)?;
            write_event(
                conn,
                NewEvent {
                    kind: EventKind::ApprovalExpiryChanged,
                    subject: Some(id),
                    owner: approval.owner.as_deref(),
                    at_ms,
                    data: serde_json::json!({"expires_ms": until_ms}),
                },
            )?;
            Ok(Some(approval))
        })
    }

    /// `pending -> cancelled` (the waiting call went away).
    pub fn cancel(&self, id: &str, at_ms: Millis) -> Result<Option<Approval>, StoreError> {
        self.cas(
            id,
            "pending",
            "status = 'cancelled', decided_ms = ?3",
            at_ms,
            EventKind::ApprovalCancelled,
        )
    }

    /// `approved -> applying`: the caller that gets `Some` applies the plan; any
    /// other gets `None`. This is what keeps an approval from applying twice. The
    /// claiming holder ([`Store::me`]) is recorded as the approval's owner.
    pub fn claim_apply(&self, id: &str) -> Result<Option<Approval>, StoreError> {
        let me = self.me();
        self.with(|conn| {
            let changed = conn.execute(
                "UPDATE approvals SET status = 'applying', owner_pid = ?2 \
                 WHERE id = ?1 AND status = 'approved'",
                args![id, me],
            )?;
            if changed == 1 {
                get_in(conn, id).map(Some)
            } else {
                get_in(conn, id).map(|_| None)
            }
        })
    }

    /// Approved or applying approvals whose owner is gone (`alive` says
    /// which holders still run: [`Store::alive`]), with that owner (0 for
    /// none): a crash left them half way.
    pub fn orphaned(
        &self,
        alive: &dyn Fn(u32) -> bool,
    ) -> Result<Vec<(Approval, u32)>, StoreError> {
        let rows = self.with(|conn| {
            listing(
                conn,
                &format!(
                    "SELECT {APPROVAL_COLUMNS} FROM approvals \
                     WHERE status IN ('approved', 'applying') ORDER BY seq"
                ),
                &[],
            )
        })?;
        Ok(rows
            .into_iter()
            .filter_map(|approval| {
                let owner = approval.owner_pid.unwrap_or(0);
                (owner == 0 || !alive(owner)).then_some((approval, owner))
            })
            .collect())
    }

    /// Approved approvals that `waiter` holds: calls only that holder can
    /// carry out (an upstream tool call goes through the connection it
    /// holds).
    pub fn approved_held_by(&self, waiter: u32) -> Result<Vec<Approval>, StoreError> {
        self.with(|conn| {
            listing(
                conn,
                &format!(
                    "SELECT {APPROVAL_COLUMNS} FROM approvals \
                     WHERE status = 'approved' AND waiter_pid = ?1 ORDER BY seq"
                ),
                args![waiter],
            )
        })
    }

    /// Pending approvals whose waiting call's holder is gone (`alive` says
    /// which holders still run).
    pub fn abandoned(&self, alive: &dyn Fn(u32) -> bool) -> Result<Vec<Approval>, StoreError> {
        let rows = self.with(|conn| {
            listing(
                conn,
                &format!(
                    "SELECT {APPROVAL_COLUMNS} FROM approvals \
                     WHERE status = 'pending' AND waiter_pid IS NOT NULL ORDER BY seq"
                ),
                &[],
            )
        })?;
        Ok(rows
            .into_iter()
            .filter(|approval| approval.waiter_pid.is_some_and(|waiter| !alive(waiter)))
            .collect())
    }

    /// Takes over an orphaned approval from its dead owner (0 for none):
    /// only one holder can. `Some` when this one now owns it (status
    /// unchanged).
    pub fn take_over(&self, id: &str, dead_owner: u32) -> Result<Option<Approval>, StoreError> {
        let me = self.me();
        self.with(|conn| {
            let changed = conn.execute(
                "UPDATE approvals SET owner_pid = ?2 \
                 WHERE id = ?1 AND status IN ('approved', 'applying') \
                 AND (owner_pid IS NOT DISTINCT FROM ?3 OR owner_pid = ?4)",
                args![
                    id,
                    me,
                    if dead_owner == 0 {
                        None
                    } else {
                        Some(dead_owner)
                    },
                    dead_owner
                ],
            )?;
            if changed == 1 {
                get_in(conn, id).map(Some)
            } else {
                Ok(None)
            }
        })
    }

    /// `UPDATE … SET {set} WHERE id = ?1 AND status = ?2`, with `event`;
    /// `set` may use `?3` for `at_ms`. `Ok(None)` when the approval was not
    /// in `from`.
    fn cas(
        &self,
        id: &str,
        from: &str,
        set: &str,
        at_ms: Millis,
        event: EventKind,
    ) -> Result<Option<Approval>, StoreError> {
        self.changing(|conn| {
            let sql = format!("UPDATE approvals SET {set} WHERE id = ?1 AND status = ?2");
            let changed = conn.execute(&sql, args![id, from, at_ms as i64])?;
            let approval = get_in(conn, id)?;
            if changed != 1 {
                return Ok(None);
            }
            write_event(
                conn,
                NewEvent {
                    kind: event,
                    subject: Some(id),
                    owner: approval.owner.as_deref(),
                    at_ms,
                    data: serde_json::json!({"status": approval.status.as_str()}),
                },
            )?;
            Ok(Some(approval))
        })
    }

    /// Settles an approval with its final status and envelope. Only moves forward
    /// from a state that allows it (`applying -> applied|failed`, or records the
    /// envelope of a `denied`/`expired`/`cancelled` one).
    pub fn finish(
        &self,
        id: &str,
        status: ApprovalStatus,
        result: &Envelope,
        at_ms: Millis,
    ) -> Result<(), StoreError> {
        let result_json = serde_json::to_string(result)
            .map_err(|error| StoreError::Corrupt(format!("result of {id}: {error}")))?;
        let from: &[&str] = match status {
            ApprovalStatus::Applied | ApprovalStatus::Failed => &["applying"],
            ApprovalStatus::Denied => &["denied"],
            ApprovalStatus::Expired => &["expired"],
            ApprovalStatus::Cancelled => &["cancelled"],
            ApprovalStatus::Pending | ApprovalStatus::Approved | ApprovalStatus::Applying => &[],
        };
        let event = match status {
            ApprovalStatus::Applied => Some(EventKind::ApprovalApplied),
            ApprovalStatus::Failed => Some(EventKind::ApprovalFailed),
            _ => None,
        };
        self.changing(|conn| {
            let changed = conn.execute(
                "UPDATE approvals SET status = ?2, result_json = ?3 \
                 WHERE id = ?1 AND (status = ?4 OR status = ?5)",
                args![
                    id,
                    status.as_str(),
                    result_json,
                    from.first().copied().unwrap_or(""),
                    from.get(1).copied().unwrap_or("")
                ],
            )?;
            if changed == 1 {
                if let Some(kind) = event {
                    let approval = get_in(conn, id)?;
                    write_event(
                        conn,
                        NewEvent {
                            kind,
                            subject: Some(id),
                            owner: approval.owner.as_deref(),
                            at_ms,
                            data: serde_json::json!({"status": status.as_str()}),
                        },
                    )?;
                }
                Ok(())
            } else {
                let current = get_in(conn, id)?;
                Err(StoreError::AlreadyDecided {
                    id: id.to_owned(),
                    status: current.status,
                })
            }
        })
    }
}

impl Store {
    /// An applied agent call whose files do not hold what was approved:
    /// `files` (path, expected and found hashes) go into its result's
    /// `data.apply_mismatch`, and the feed says so.
    pub fn mark_apply_mismatch(
        &self,
        id: &str,
        files: &serde_json::Value,
        at_ms: Millis,
    ) -> Result<(), StoreError> {
        self.changing(|conn| {
            let approval = get_in(conn, id)?;
            let mut result = approval
                .result
                .as_ref()
                .and_then(|result| serde_json::to_value(result).ok())
                .unwrap_or_else(|| serde_json::json!({}));
            if !result["data"].is_object() {
                result["data"] = serde_json::json!({});
            }
            result["data"]["apply_mismatch"] = files.clone();
            conn.execute(
                "UPDATE approvals SET result_json = ?2 WHERE id = ?1",
                args![id, result.to_string()],
            )?;
            write_event(
                conn,
                NewEvent {
                    kind: EventKind::ApprovalMismatch,
                    subject: Some(id),
                    owner: approval.owner.as_deref(),
                    at_ms,
                    data: serde_json::json!({"files": files}),
                },
            )?;
            Ok(())
        })
    }
}

/// A row of a listing: one whose stored parts cannot be read (written by a
/// newer airlock, or damaged) is left out of the list, with a line on stderr
/// naming it, so it holds up no other approval; asked for by its id, it is
/// the error.
fn readable(row: Result<Approval, StoreError>) -> Option<Approval> {
    match row {
        Ok(approval) => Some(approval),
        Err(error) => {
            eprintln!("airlock: an approval that cannot be read is left out: {error}");
            None
        }
    }
}

/// The approvals a query selects (`APPROVAL_COLUMNS`), each readable one.
fn listing(
    conn: &mut dyn Conn,
    sql: &str,
    args: &[crate::sql::Value],
) -> Result<Vec<Approval>, StoreError> {
    Ok(conn
        .query(sql, args)?
        .iter()
        .filter_map(|row| readable(approval_from_row(row)))
        .collect())
}

pub(crate) fn get_in(conn: &mut dyn Conn, id: &str) -> Result<Approval, StoreError> {
    let row = first(
        conn,
        &format!("SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = ?1"),
        args![id],
    )?
    .ok_or_else(|| StoreError::NotFound(id.to_owned()))?;
    approval_from_row(&row)
}

fn approval_from_row(row: &Row) -> Result<Approval, StoreError> {
    let millis = |value: i64| value.max(0) as u64;
    let id: String = row.get("id")?;
    let tool: String = row.get("tool")?;
    let state = |source: StateError| StoreError::State {
        id: id.clone(),
        source,
    };
    let status: String = row.get("status")?;
    let status = ApprovalStatus::parse(&status)?;
    let risk: String = row.get("risk")?;
    let risk = match risk.parse::<Risk>() {
        Ok(risk) => risk,
        Err(error) => return Err(StoreError::Corrupt(format!("approval {id}: {error}"))),
    };
    let terms = match ApprovalTerms::from_stored(&row.get::<String>("decision_json")?) {
        Ok(terms) => terms,
        Err(error) => return Err(state(error)),
    };
    let plan = match Plan::from_stored(&row.get::<String>("plan_json")?, &tool) {
        Ok(plan) => plan,
        Err(error) => return Err(state(error)),
    };
    let decided_by: Option<String> = row.get("decided_by")?;
    let channel: Option<String> = row.get("channel")?;
    let decision = match decided_by {
        None => None,
        Some(by) => {
            let by = match by.parse::<DecidedBy>() {
                Ok(by) => by,
                Err(error) => return Err(state(error)),
            };
            let channel = match channel.as_deref().map(str::parse::<Channel>).transpose() {
                Ok(channel) => channel,
                Err(error) => return Err(state(error)),
            };
            Some(Decided {
                by,
                user: row.get("decided_user")?,
                channel,
                reason: row.get("reason")?,
                at_ms: row.get::<Option<i64>>("decided_ms")?.map_or(0, millis),
                edited: row.get::<i64>("edited")? != 0,
            })
        }
    };
    let result = match row.get::<Option<String>>("result_json")? {
        None => None,
        Some(text) => match serde_json::from_str::<Envelope>(&text) {
            Ok(envelope) => Some(envelope),
            Err(error) => {
                return Err(state(StateError::Unreadable {
                    what: "result",
                    message: error.to_string(),
                }));
            }
        },
    };
    Ok(Approval {
        seq: row.get("seq")?,
        new: NewApproval {
            args_json: row.get("args_json")?,
            args_display: row.get("args_display")?,
            dedup_key: row.get("dedup_key")?,
            user: row.get("user")?,
            agent: row.get("agent")?,
            session: row.get("session")?,
            tool_call_id: row.get("tool_call_id")?,
            context_id: row.get("context_id")?,
            requester: match (
                row.get::<Option<String>>("requester_channel")?,
                row.get::<Option<String>>("requester_chat")?,
                row.get::<Option<String>>("requester_user")?,
            ) {
                (Some(channel), Some(chat), Some(user)) => Some(Requester {
                    channel,
                    chat,
                    user,
                }),
                _ => None,
            },
            risk,
            terms,
            path: row.get("path")?,
            summary: row.get("summary")?,
            diff: row.get("diff")?,
            plan,
            created_ms: millis(row.get("created_ms")?),
            expires_ms: millis(row.get("expires_ms")?),
            waiter_pid: row
                .get::<Option<i64>>("waiter_pid")?
                .and_then(|pid| u32::try_from(pid).ok()),
            owner: row.get("owner")?,
            id,
            tool,
        },
        status,
        decision,
        result,
        owner_pid: row
            .get::<Option<i64>>("owner_pid")?
            .and_then(|pid| u32::try_from(pid).ok()),
        undone: row.get::<i64>("undone")? != 0,
    })
}
