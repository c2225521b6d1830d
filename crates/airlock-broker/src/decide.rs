//! Decide: a human approves or denies a pending approval (with a reason,
//! an edited version, an always-allow).

use airlock_core::config::ApprovalMode;
use airlock_core::envelope::{DecidedBy, Envelope, ErrorReason, Status};
use airlock_core::plan::NotEditable;
use airlock_core::{Channel, ErrorCode, Plan, Risk};
use airlock_store::{Approval, ApprovalStatus, EditedPlan, StoreError, Verdict};
use serde_json::Value;

use crate::broker::Broker;
use crate::envelopes::{hitl_ref, human};
use crate::error::BrokerError;
use crate::grants::grant_scope;
use crate::record::Record;

/// What an approver channel shows, and what it may offer, for one pending
/// approval.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AskForm {
    pub hitl_id: String,
    pub tool: String,
    pub risk: Risk,
    pub summary: String,
    pub diff_preview: String,
    /// "Always allow" may be offered.
    pub allow_skip: bool,
    /// What "always allow" would allow (a grant for the call's session),
    /// said before it is chosen; `None` where it cannot be offered (the risk
    /// does not allow skipping, or the call was made in no session).
    pub always: Option<String>,
    /// A reason is required to approve.
    pub require_reason: bool,
    /// The client's human may decide it (no `approvers` restriction, and
    /// `approval_mode` is not `defer`).
    pub client_may_decide: bool,
    pub expires_ms: u64,
}

/// On whose authority a decision is taken. The faces say who asks; who may
/// decide what is the broker's rule ([`Broker::may_decide`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authority {
    /// The person at this machine's terminal (the OS user running airlock):
    /// holds every role.
    Terminal,
    /// The holder of a bearer token: its roles' names and the user it is for.
    Token {
        roles: Vec<String>,
        user: Option<String>,
    },
    /// A signed approve/deny link: only where any approver may decide.
    Link,
    /// The human behind the MCP client that made the call, answering
    /// airlock's own question: only where the client may decide.
    Client,
    /// A chat platform's user, mapped in `channels.<name>.users` to an
    /// airlock user and its roles.
    Chat {
        /// The platform (`Channel::Telegram`, …).
        channel: Channel,
        /// The platform's user id.
        platform_user: String,
        user: String,
        roles: Vec<String>,
    },
}

/// A human's decision on a pending approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecideRequest {
    pub approve: bool,
    pub reason: Option<String>,
    /// "Always allow": only where the risk policy allows skipping.
    pub always: Option<AlwaysAllow>,
    /// Who may decide is checked against this.
    pub authority: Authority,
    pub user: String,
    /// Where the decision is taken.
    pub channel: Channel,
    /// The approver's edited version of a one-file write, applied instead of
    /// the proposal (audited as edited; the agent's result says so).
    pub content: Option<Vec<u8>>,
}

/// The scope and lifetime of an "always allow".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlwaysAllow {
    /// Only the approval's session, or every session.
    pub persistent: bool,
    /// Lifetime; `None`: `approvals.grant_ttl`.
    pub for_ms: Option<u64>,
}

impl Broker {
    /// What a channel asking a human about `id` shows and may offer.
    pub fn ask_form(&self, id: &str) -> Result<AskForm, BrokerError> {
        let approval = self.store.get(id)?;
        let max = self.config.file_broker.diff_preview_max_chars;
        Ok(AskForm {
            hitl_id: approval.id.clone(),
            tool: approval.tool.clone(),
            risk: approval.risk,
            summary: approval.summary.clone(),
            diff_preview: airlock_fs::preview(&approval.diff, max),
            allow_skip: approval.terms.allow_skip,
            always: self
                .grant_terms(
                    &approval,
                    AlwaysAllow {
                        persistent: false,
                        for_ms: None,
                    },
                )
                .ok()
                .map(|terms| terms.statement()),
            require_reason: approval.terms.require_reason,
            client_may_decide: self.client_may_decide(&approval),
            expires_ms: approval.expires_ms,
        })
    }

    /// Whether `authority` may decide `approval`: the terminal always; a
    /// token where its role or user is among the risk's `approvers` (when
    /// it names any) and, where writes are limited to listed users (spec
    /// 001), for the user who made the call only; a link only where any
    /// approver may decide; the MCP client's human only where the client
    /// may decide. `forbidden` otherwise.
    pub fn may_decide(
        &self,
        approval: &Approval,
        authority: &Authority,
    ) -> Result<(), BrokerError> {
        let forbidden = |message: String| Err(BrokerError::refused(ErrorCode::Forbidden, message));
        match authority {
            Authority::Terminal => Ok(()),
            Authority::Token { roles, user } => {
                self.holds_the_risks_right(approval, roles, user.as_deref())?;
                if self.only_the_requester(approval)
                    && (approval.user.is_none() || *user != approval.user)
                {
                    return forbidden(self.who_may_decide(approval));
                }
                Ok(())
            }
            Authority::Chat {
                channel,
                platform_user,
                user,
                roles,
            } => {
                self.holds_the_risks_right(approval, roles, Some(user))?;
                if self.only_the_requester(approval) {
                    // The call's own user, and, when the call names its
                    // requester's account on this platform, that account.
                    let named = approval
                        .requester
                        .as_ref()
                        .filter(|requester| requester.channel == channel.as_str());
                    let same_account = named.is_none_or(|r| r.user == *platform_user);
                    if approval.user.as_deref() != Some(user.as_str()) || !same_account {
                        return forbidden(self.who_may_decide(approval));
                    }
                }
                Ok(())
            }
            Authority::Link if self.open_to_any_approver(approval) => Ok(()),
            Authority::Link => forbidden(
                "this approval must be decided by a named approver, not by a link".to_owned(),
            ),
            Authority::Client if self.client_may_decide(approval) => Ok(()),
            Authority::Client => {
                forbidden("this approval is not decided in the MCP client".to_owned())
            }
        }
    }

    /// Whether `roles` or `user` are among the risk's `approvers` (when it
    /// names any).
    fn holds_the_risks_right(
        &self,
        approval: &Approval,
        roles: &[String],
        user: Option<&str>,
    ) -> Result<(), BrokerError> {
        let approvers = &approval.terms.approvers;
        if approvers.is_empty()
            || approvers.iter().any(|approver| {
                roles.iter().any(|role| role == approver) || user == Some(approver.as_str())
            })
        {
            return Ok(());
        }
        Err(BrokerError::refused(
            ErrorCode::Forbidden,
            format!(
                "{} risk is decided only by {}",
                approval.risk,
                approvers.join(", ")
            ),
        ))
    }

    /// Who may decide `approval`, in words, for a refusal.
    pub fn who_may_decide(&self, approval: &Approval) -> String {
        let approvers = &approval.terms.approvers;
        let by_role = if approvers.is_empty() {
            String::new()
        } else {
            format!(" holding {}", approvers.join(" or "))
        };
        if self.only_the_requester(approval) {
            match &approval.user {
                Some(user) => {
                    format!("only the user who made the call ({user}) may decide it{by_role}")
                }
                None => "only the user who made the call may decide it, and it names none: \
                         decide it at the terminal (airlock approve or deny)"
                    .to_owned(),
            }
        } else if approvers.is_empty() {
            "any approver may decide it".to_owned()
        } else {
            format!(
                "{} risk is decided only by {}",
                approval.risk,
                approvers.join(", ")
            )
        }
    }

    /// Whether anyone with an approver's right may decide `approval`: the
    /// risk names no approvers and not only the requesting user may decide.
    /// Only then are signed links offered.
    pub fn open_to_any_approver(&self, approval: &Approval) -> bool {
        approval.terms.approvers.is_empty() && !self.only_the_requester(approval)
    }

    /// Whether the human behind the calling MCP client may decide: no
    /// approvers are named for the risk and `approval_mode` is not `defer`.
    fn client_may_decide(&self, approval: &Approval) -> bool {
        approval.terms.approvers.is_empty()
            && self.config.security.hitl.approval_mode != ApprovalMode::Defer
            // Only the requester may decide, and the call names nobody:
            // the terminal only.
            && !(self.only_the_requester(approval) && approval.user.is_none())
    }

    /// Whether only the user who made a call may decide it (spec 001:
    /// `approvals.same_user`, or writes limited to listed users). With
    /// `same_user`, a call naming no user is decided at the terminal only.
    fn only_the_requester(&self, approval: &Approval) -> bool {
        self.config.approvals.same_user
            || (self.config.security.write_tool_allowlist.is_some() && approval.user.is_some())
    }

    /// A human decides a pending approval. Approving applies the stored plan
    /// (spec 000's apply_proposal) once; the returned envelope is the call's final
    /// result.
    pub fn decide(&self, id: &str, request: &DecideRequest) -> Result<Envelope, BrokerError> {
        let approval = self.store.get(id)?;
        self.may_decide(&approval, &request.authority)?;
        let terms = &approval.terms;
        let reason = request
            .reason
            .as_deref()
            .map(str::trim)
            .filter(|r| !r.is_empty());
        if request.approve && terms.require_reason && reason.is_none() {
            return Err(BrokerError::refused(
                ErrorCode::InvalidInput,
                format!("approving a {} risk call requires a reason", approval.risk),
            ));
        }
        // Every check of the always-allow before anything is decided: a
        // refused grant must not leave an approval approved and unapplied.
        let grant = match request.always {
            Some(always) => Some(grant_scope(
                &approval,
                always,
                request.approve,
                terms.allow_skip,
            )?),
            None => None,
        };
        if request.content.is_some() && approval.status != ApprovalStatus::Pending {
            return Err(BrokerError::Store(StoreError::AlreadyDecided {
                id: id.to_owned(),
                status: approval.status,
            }));
        }
        let edited = match &request.content {
            Some(_) if !request.approve => {
                return Err(BrokerError::refused(
                    ErrorCode::InvalidInput,
                    "an edited version (content) goes with an approval",
                ));
            }
            Some(_) if request.always.is_some() => {
                return Err(BrokerError::refused(
                    ErrorCode::InvalidInput,
                    "always-allow cannot be given with an edited version",
                ));
            }
            Some(content) => Some(self.edited_plan(&approval, content.clone())?),
            None => None,
        };
        // A call whose waiting process is gone is cancelled, never applied for
        // nobody.
        if approval.status == ApprovalStatus::Pending
            && approval
                .waiter_pid
                .is_some_and(|holder| !self.store.alive(holder))
        {
            self.cancel(id);
            return Err(BrokerError::Store(StoreError::AlreadyDecided {
                id: id.to_owned(),
                status: ApprovalStatus::Cancelled,
            }));
        }
        let now = self.now_ms();
        let verdict = Verdict {
            approve: request.approve,
            by: DecidedBy::Human,
            user: Some(request.user.clone()),
            channel: Some(request.channel),
            reason: reason.map(str::to_owned),
            at_ms: now,
            edited: edited.as_ref().map(|plan| EditedPlan {
                diff: plan
                    .change()
                    .map(|change| change.diff.clone())
                    .unwrap_or_default(),
                plan: plan.clone(),
            }),
        };
        let decided = match self.store.decide(id, &verdict) {
            Ok(decided) => decided,
            Err(StoreError::Expired(_)) => {
                self.expire(id);
                return Err(BrokerError::Store(StoreError::Expired(id.to_owned())));
            }
            Err(error) => return Err(error.into()),
        };
        let logged = self.log(
            Record::for_approval(&decided)
                .event("hitl_decision")
                .text("decision", if request.approve { "approve" } else { "deny" })
                .text("decided_by", "human")
                .text("user", &request.user)
                .text("channel", request.channel.as_str())
                .value(
                    "platform_user",
                    match &request.authority {
                        Authority::Chat { platform_user, .. } => {
                            Some(Value::String(platform_user.clone()))
                        }
                        _ => None,
                    },
                )
                .value("reason", reason.map(|r| Value::String(r.to_owned())))
                .value("edited", edited.as_ref().map(|_| Value::Bool(true)))
                .value(
                    "edited_patch_hash",
                    edited
                        .as_ref()
                        .and_then(Plan::change)
                        .map(|plan| Value::String(plan.patch_hash.clone())),
                )
                .number("duration_ms", now.saturating_sub(decided.created_ms)),
        );
        if logged.is_none() {
            // Nothing is applied on an unrecorded decision. The approval stays
            // decided; a later process recovers it once the log can be written.
            return Err(BrokerError::refused(
                ErrorCode::IoError,
                "the decision is stored but the audit log could not be written; nothing was applied",
            ));
        }
        if let Some(scope) = grant {
            self.grant(&decided, scope, &request.user, now)?;
        }
        if !request.approve {
            let mut envelope = Envelope::failure(
                Status::Denied,
                crate::envelopes::approval_method(&decided.plan),
                &decided.tool,
                decided.path.as_deref(),
                ErrorCode::PolicyDenied,
                match reason {
                    Some(reason) => format!("denied by {}: {reason}", request.user),
                    None => format!("denied by {}", request.user),
                },
            )
            .with_reason(Some(ErrorReason::new("human", "human", Some(decided.risk))));
            envelope.hitl = Some(hitl_ref(&decided));
            envelope.decision = Some(human(request, reason));
            self.store_result(id, ApprovalStatus::Denied, &envelope);
            return Ok(envelope);
        }
        Ok(self.settle(id))
    }

    /// The diff that approving pending `id` with `content` (an approver's
    /// edited version) would apply, computed as deciding would; nothing is
    /// decided or changed.
    pub fn preview_edit(&self, id: &str, content: Vec<u8>) -> Result<String, BrokerError> {
        let approval = self.store.get(id)?;
        if approval.status != ApprovalStatus::Pending {
            return Err(BrokerError::Store(StoreError::AlreadyDecided {
                id: id.to_owned(),
                status: approval.status,
            }));
        }
        let plan = self.edited_plan(&approval, content)?;
        Ok(plan
            .change()
            .map(|change| change.diff.clone())
            .unwrap_or_default())
    }

    /// The plan of `approval` with the approver's `content` in place of the
    /// proposed one.
    pub(crate) fn edited_plan(
        &self,
        approval: &Approval,
        content: Vec<u8>,
    ) -> Result<Plan, BrokerError> {
        let upstream =
            || BrokerError::refused(ErrorCode::InvalidInput, NotEditable::Upstream.to_string());
        let change = approval.plan.change().ok_or_else(upstream)?;
        let edited = airlock_fs::edited(&self.sandbox, change, content)
            .map_err(|error| BrokerError::refused(error.code(), error.to_string()))?;
        approval
            .plan
            .with_change(edited)
            .ok_or_else(|| match &approval.plan {
                Plan::Agent(agent) => BrokerError::refused(
                    ErrorCode::InvalidInput,
                    format!(
                        "{}'s {} takes no edited version back (only Claude Code's and Gemini CLI's one-file writes and edits do)",
                        agent.agent, agent.tool
                    ),
                ),
                _ => upstream(),
            })
    }
}
