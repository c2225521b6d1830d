//! Always-allow grants: made with a decision, listed, revoked; each ends.

use airlock_core::{Channel, ErrorCode};
use airlock_store::{Approval, GrantRow};
use serde_json::Value;

use crate::broker::Broker;
use crate::decide::AlwaysAllow;
use crate::error::BrokerError;
use crate::record::Record;

/// The longest an always-allow with an expiry may last (10 years).
pub(crate) const MAX_GRANT_MS: u64 = 10 * 365 * 24 * 60 * 60 * 1000;

/// What an always-allow grants: the session it is limited to (`None`: every
/// session) and how long it lasts (`None`: no expiry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewGrant {
    session: Option<String>,
    for_ms: Option<u64>,
}

/// The grant `always` asks for on `approval`, or why it is refused: only with
/// an approval, where the risk allows skipping, for at most
/// [`MAX_GRANT_MS`], and session-scoped only for a call made in a session.
pub(crate) fn grant_scope(
    approval: &Approval,
    always: AlwaysAllow,
    approve: bool,
    allow_skip: bool,
) -> Result<NewGrant, BrokerError> {
    let refuse = |message: String| Err(BrokerError::refused(ErrorCode::InvalidInput, message));
    if !allow_skip {
        return refuse(format!(
            "always-allow is not permitted for {} risk",
            approval.risk
        ));
    }
    if always.for_ms.is_some_and(|for_ms| for_ms > MAX_GRANT_MS) {
        return refuse(
            "an always-allow lasts at most 10 years (leave the duration out for approvals.grant_ttl)"
                .to_owned(),
        );
    }
    let session = match (always.persistent, &approval.session) {
        (true, _) => None,
        (false, Some(session)) => Some(session.clone()),
        (false, None) => {
            return refuse(
                "this call was made in no session, so an always-allow for it can only be persistent (every session)".to_owned(),
            );
        }
    };
    if !approve {
        return refuse("always-allow applies to approvals".to_owned());
    }
    Ok(NewGrant {
        session,
        for_ms: always.for_ms,
    })
}

/// What an always-allow would allow, in the words every face shows before
/// the grant is made: a grant lets later calls of one tool (on one path,
/// with any content; or with any arguments, for a tool that names no path)
/// through unasked, for the user who asked, in one session or in all, until
/// it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantTerms {
    pub tool: String,
    pub path: Option<String>,
    pub user: Option<String>,
    /// `None`: every session.
    pub session: Option<String>,
    /// How long it lasts; `None`: until revoked.
    pub lasts_ms: Option<u64>,
}

impl GrantTerms {
    /// The terms of a stored grant.
    pub fn of(grant: &GrantRow) -> GrantTerms {
        GrantTerms {
            tool: grant.tool.clone(),
            path: grant.path_glob.as_deref().map(globset_unescape),
            user: grant.user.clone(),
            session: grant.session.clone(),
            lasts_ms: grant
                .expires_ms
                .map(|at| at.saturating_sub(grant.created_ms)),
        }
    }

    /// One sentence, e.g. "allow write_file on notes.md with any content,
    /// for user tester, in session s1 only, for 8h, without asking".
    pub fn statement(&self) -> String {
        let what = match &self.path {
            Some(path) => format!("{} on {path} with any content", self.tool),
            None => format!("{} with any arguments", self.tool),
        };
        let user = match &self.user {
            Some(user) => format!(", for user {user}"),
            None => ", for calls made for no user".to_owned(),
        };
        let scope = match &self.session {
            Some(session) => format!("in session {session} only"),
            None => "in every session".to_owned(),
        };
        let lasts = match self.lasts_ms {
            Some(ms) => format!("for {}", duration_words(ms)),
            None => "until revoked".to_owned(),
        };
        format!("allow {what}{user}, {scope}, {lasts}, without asking")
    }
}

/// `90000` as "1m30s", `28800000` as "8h".
pub fn duration_words(ms: u64) -> String {
    let mut seconds = ms / 1000;
    if seconds == 0 {
        return format!("{ms}ms");
    }
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if seconds >= size {
            out.push_str(&format!("{}{unit}", seconds / size));
            seconds %= size;
        }
    }
    out
}

/// The path a grant's glob (made by [`globset_escape`]) covers.
fn globset_unescape(glob: &str) -> String {
    let mut out = String::with_capacity(glob.len());
    let mut chars = glob.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            other => out.push(other),
        }
    }
    out
}

/// Escapes glob metacharacters so a grant covers exactly one path.
pub(crate) fn globset_escape(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl Broker {
    /// What `always` would grant on `approval`, or why it cannot be made
    /// (the same refusal deciding would give).
    pub fn grant_terms(
        &self,
        approval: &Approval,
        always: AlwaysAllow,
    ) -> Result<GrantTerms, BrokerError> {
        let scope = grant_scope(approval, always, true, approval.terms.allow_skip)?;
        Ok(GrantTerms {
            tool: approval.tool.clone(),
            path: approval.path.clone(),
            user: approval.user.clone(),
            session: scope.session,
            lasts_ms: scope
                .for_ms
                .or_else(|| self.config.approvals.grant_ttl_ms()),
        })
    }

    /// The terms of a grant in force, as [`GrantTerms::statement`] says them.
    pub fn terms_of(&self, grant: &GrantRow) -> GrantTerms {
        GrantTerms::of(grant)
    }

    /// The always-allows a person may choose on `approval` now, each with
    /// its statement: `{"session": …, "persistent": …}` (`session` only for a
    /// call made in a session), or `null` where none may be made.
    pub fn always_offers(&self, approval: &Approval) -> Value {
        if approval.status != airlock_store::ApprovalStatus::Pending || !approval.terms.allow_skip {
            return Value::Null;
        }
        let offer = |persistent| {
            self.grant_terms(
                approval,
                AlwaysAllow {
                    persistent,
                    for_ms: None,
                },
            )
            .ok()
            .map(|terms| Value::String(terms.statement()))
        };
        serde_json::json!({
            "session": offer(false),
            "persistent": offer(true),
        })
    }

    pub(crate) fn grant(
        &self,
        approval: &Approval,
        scope: NewGrant,
        user: &str,
        now: u64,
    ) -> Result<(), BrokerError> {
        let persistent = scope.session.is_none();
        let row = GrantRow {
            id: format!("grant-{}", uuid::Uuid::new_v4()),
            tool: approval.tool.clone(),
            path_glob: approval.path.as_deref().map(globset_escape),
            // For the user who asked; a session grant only for the very
            // principal whose session it is.
            user: approval.user.clone(),
            owner: if persistent {
                None
            } else {
                approval.owner.clone()
            },
            session: scope.session,
            // Every grant ends: after --for, else after approvals.grant_ttl.
            expires_ms: scope
                .for_ms
                .or_else(|| self.config.approvals.grant_ttl_ms())
                .map(|ms| now.saturating_add(ms)),
            created_ms: now,
            created_by: Some(user.to_owned()),
            approval_id: Some(approval.id.clone()),
        };
        self.store.insert_grant(&row)?;
        let logged = self.log(
            Record::for_approval(approval)
                .event("grant_created")
                .text("grant_id", &row.id)
                .value("path_glob", row.path_glob.clone().map(Value::String))
                .text("scope", if persistent { "persistent" } else { "session" })
                .value("expires_ms", row.expires_ms.map(Value::from))
                .text("user", user),
        );
        match logged {
            Some(_) => Ok(()),
            None => {
                // No grant is in force that the log does not show.
                if let Err(error) = self.store.delete_grant(&row.id, self.now_ms()) {
                    eprintln!(
                        "airlock: grant {} could not be audited nor removed: {error}",
                        row.id
                    );
                }
                Err(BrokerError::refused(
                    ErrorCode::IoError,
                    "the grant could not be recorded in the audit log; it was not made",
                ))
            }
        }
    }

    /// The "always allow" grants in force, oldest first.
    pub fn grants(&self) -> Result<Vec<GrantRow>, BrokerError> {
        Ok(self.store.grants(self.now_ms())?)
    }

    /// Revokes the grant in force whose id is `id` or starts with it (a
    /// unique prefix), as `by` through `channel`; audited as `grant_revoked`.
    pub fn revoke_grant(
        &self,
        id: &str,
        by: &str,
        channel: Channel,
    ) -> Result<GrantRow, BrokerError> {
        let grants = self.grants()?;
        let matching: Vec<&GrantRow> = grants
            .iter()
            .filter(|grant| grant.id == id || (!id.is_empty() && grant.id.starts_with(id)))
            .collect();
        let grant = match matching[..] {
            [grant] => grant.clone(),
            [] => {
                return Err(BrokerError::refused(
                    ErrorCode::NotFound,
                    format!(
                        "no grant in force is named `{id}` (`airlock grants` or GET /hitl/grants lists them)"
                    ),
                ));
            }
            _ => {
                return Err(BrokerError::refused(
                    ErrorCode::Ambiguous,
                    format!(
                        "`{id}` names {} grants; give more of the id",
                        matching.len()
                    ),
                ));
            }
        };
        self.revoke(&grant, by, channel)?;
        Ok(grant)
    }

    /// Revokes every grant in force; the ones revoked.
    /// One that another process revoked (or that ended) meanwhile is skipped;
    /// one whose record fails does not stop the rest from being revoked (the
    /// first such failure is reported after all of them).
    pub fn revoke_all_grants(
        &self,
        by: &str,
        channel: Channel,
    ) -> Result<Vec<GrantRow>, BrokerError> {
        let mut revoked = Vec::new();
        let mut failure = None;
        for grant in self.grants()? {
            match self.revoke(&grant, by, channel) {
                Ok(()) => revoked.push(grant),
                Err(error) if error.code() == ErrorCode::NotFound => {}
                Err(error) => {
                    revoked.push(grant);
                    failure.get_or_insert(error);
                }
            }
        }
        match failure {
            Some(error) => Err(error),
            None => Ok(revoked),
        }
    }

    /// Removes `grant` first (the safe direction), then records it.
    pub(crate) fn revoke(
        &self,
        grant: &GrantRow,
        by: &str,
        channel: Channel,
    ) -> Result<(), BrokerError> {
        if !self.store.delete_grant(&grant.id, self.now_ms())? {
            return Err(BrokerError::refused(
                ErrorCode::NotFound,
                format!("grant `{}` is no longer in force", grant.id),
            ));
        }
        let logged = self.log(
            Record::new("grant_revoked")
                .text("grant_id", &grant.id)
                .text("tool", &grant.tool)
                .value("path_glob", grant.path_glob.clone().map(Value::String))
                .value("session", grant.session.clone().map(Value::String))
                .value("approval_id", grant.approval_id.clone().map(Value::String))
                .text("decided_by", by)
                .text("channel", channel.as_str()),
        );
        match logged {
            Some(_) => Ok(()),
            None => Err(BrokerError::refused(
                ErrorCode::IoError,
                format!(
                    "grant `{}` was revoked, but the audit log could not record it",
                    grant.id
                ),
            )),
        }
    }
}
