//! Durable sessions (DESIGN §5.3): opened by one principal, ended by a
//! close or by their time; each change writes its event.

use crate::feed::{EventKind, NewEvent, write_event};
use crate::sql::{Row, args};
use crate::{Millis, Store, StoreError};

/// One session as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    pub id: String,
    /// `Principal::owner_key` of who opened it: only they use it.
    pub owner: String,
    pub user: Option<String>,
    pub agent: Option<String>,
    pub profile: Option<String>,
    /// The effective authority, JSON (`airlock_core::session::Authority`).
    pub authority: String,
    pub authority_hash: String,
    /// JSON object of strings.
    pub labels: String,
    pub status: SessionStatus,
    pub created_ms: Millis,
    pub expires_ms: Millis,
    pub idle_ttl_ms: Millis,
    pub last_used_ms: Millis,
    pub ended_ms: Option<Millis>,
    pub end_reason: Option<String>,
    /// The git worktree the session works in, absolute.
    pub worktree: Option<String>,
}

impl SessionRow {
    /// When the session ends by itself unless used: its absolute end or
    /// its idle end, whichever comes first.
    pub fn ends_ms(&self) -> Millis {
        self.expires_ms
            .min(self.last_used_ms.saturating_add(self.idle_ttl_ms))
    }
}

/// Where a session is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionStatus {
    Open,
    Closed,
    Expired,
}

impl SessionStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Open => "open",
            SessionStatus::Closed => "closed",
            SessionStatus::Expired => "expired",
        }
    }

    fn parse(text: &str) -> Result<SessionStatus, StoreError> {
        match text {
            "open" => Ok(SessionStatus::Open),
            "closed" => Ok(SessionStatus::Closed),
            "expired" => Ok(SessionStatus::Expired),
            other => Err(StoreError::Corrupt(format!(
                "unknown session status {other}"
            ))),
        }
    }
}

const COLUMNS: &str = "id, owner, \"user\", agent, profile, authority, authority_hash, labels, \
     status, created_ms, expires_ms, idle_ttl_ms, last_used_ms, ended_ms, end_reason, worktree";

fn millis(row: &Row, column: &str) -> Result<Millis, StoreError> {
    Ok(row.get::<i64>(column)?.max(0) as u64)
}

fn row_of(row: &Row) -> Result<SessionRow, StoreError> {
    Ok(SessionRow {
        id: row.get("id")?,
        owner: row.get("owner")?,
        user: row.get("user")?,
        agent: row.get("agent")?,
        profile: row.get("profile")?,
        authority: row.get("authority")?,
        authority_hash: row.get("authority_hash")?,
        labels: row.get("labels")?,
        status: SessionStatus::parse(&row.get::<String>("status")?)?,
        created_ms: millis(row, "created_ms")?,
        expires_ms: millis(row, "expires_ms")?,
        idle_ttl_ms: millis(row, "idle_ttl_ms")?,
        last_used_ms: millis(row, "last_used_ms")?,
        ended_ms: row
            .get::<Option<i64>>("ended_ms")?
            .map(|ms| ms.max(0) as u64),
        end_reason: row.get("end_reason")?,
        worktree: row.get("worktree")?,
    })
}

fn ms(value: Millis) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

impl Store {
    /// Stores a new open session, unless its owner already has `max_open`
    /// open ones (`Ok(false)`).
    pub fn insert_session(&self, session: &SessionRow, max_open: u64) -> Result<bool, StoreError> {
        self.changing(|conn| {
            let open = conn.query(
                "SELECT COUNT(*) AS n FROM sessions WHERE status = 'open' AND owner = ?1 \
                 AND expires_ms > ?2",
                args![session.owner, ms(session.created_ms)],
            )?;
            let count = open
                .first()
                .map(|row| row.get::<i64>("n"))
                .transpose()?
                .unwrap_or(0);
            if u64::try_from(count).unwrap_or(u64::MAX) >= max_open {
                return Ok(false);
            }
            conn.execute(
                &format!(
                    "INSERT INTO sessions ({COLUMNS}) VALUES \
                     (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"
                ),
                args![
                    session.id,
                    session.owner,
                    session.user,
                    session.agent,
                    session.profile,
                    session.authority,
                    session.authority_hash,
                    session.labels,
                    session.status.as_str(),
                    ms(session.created_ms),
                    ms(session.expires_ms),
                    ms(session.idle_ttl_ms),
                    ms(session.last_used_ms),
                    session.ended_ms.map(ms),
                    session.end_reason,
                    session.worktree,
                ],
            )?;
            write_event(
                conn,
                NewEvent {
                    kind: EventKind::SessionOpened,
                    subject: Some(&session.id),
                    owner: Some(&session.owner),
                    at_ms: session.created_ms,
                    data: serde_json::json!({"authority_hash": session.authority_hash}),
                },
            )?;
            Ok(true)
        })
    }

    /// The session `id`, whoever holds it.
    pub fn session(&self, id: &str) -> Result<Option<SessionRow>, StoreError> {
        self.with(|conn| {
            conn.query(
                &format!("SELECT {COLUMNS} FROM sessions WHERE id = ?1"),
                args![id],
            )?
            .first()
            .map(row_of)
            .transpose()
        })
    }

    /// Sessions, newest first: `owner`'s (or everyone's), open ones only or
    /// all; at most `limit`.
    pub fn sessions(
        &self,
        owner: Option<&str>,
        open_only: bool,
        limit: usize,
    ) -> Result<Vec<SessionRow>, StoreError> {
        let open = if open_only {
            " AND status = 'open'"
        } else {
            ""
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.with(|conn| {
            let rows = match owner {
                Some(owner) => conn.query(
                    &format!(
                        "SELECT {COLUMNS} FROM sessions WHERE owner = ?1{open} \
                         ORDER BY created_ms DESC, id LIMIT ?2"
                    ),
                    args![owner, limit],
                )?,
                None => conn.query(
                    &format!(
                        "SELECT {COLUMNS} FROM sessions WHERE 1 = 1{open} \
                         ORDER BY created_ms DESC, id LIMIT ?1"
                    ),
                    args![limit],
                )?,
            };
            rows.iter().map(row_of).collect()
        })
    }

    /// Records a use of an open session at `now` (its idle time starts
    /// again); whether it was open.
    pub fn touch_session(&self, id: &str, now: Millis) -> Result<bool, StoreError> {
        self.with(|conn| {
            Ok(conn.execute(
                "UPDATE sessions SET last_used_ms = ?2 WHERE id = ?1 AND status = 'open' \
                 AND last_used_ms < ?2",
                args![id, ms(now)],
            )? > 0)
        })
    }

    /// `open -> closed | expired`, with its event; `Ok(None)` when it had
    /// ended already.
    pub fn end_session(
        &self,
        id: &str,
        status: SessionStatus,
        reason: Option<&str>,
        at_ms: Millis,
    ) -> Result<Option<SessionRow>, StoreError> {
        self.changing(|conn| {
            let changed = conn.execute(
                "UPDATE sessions SET status = ?2, ended_ms = ?3, end_reason = ?4 \
                 WHERE id = ?1 AND status = 'open'",
                args![id, status.as_str(), ms(at_ms), reason],
            )?;
            if changed != 1 {
                return Ok(None);
            }
            let session = conn
                .query(
                    &format!("SELECT {COLUMNS} FROM sessions WHERE id = ?1"),
                    args![id],
                )?
                .first()
                .map(row_of)
                .transpose()?
                .ok_or_else(|| StoreError::Corrupt(format!("session {id} vanished")))?;
            write_event(
                conn,
                NewEvent {
                    kind: EventKind::SessionEnded,
                    subject: Some(id),
                    owner: Some(&session.owner),
                    at_ms,
                    data: serde_json::json!({"status": status.as_str(), "reason": reason}),
                },
            )?;
            Ok(Some(session))
        })
    }

    /// Open sessions whose time is up at `now` (absolute or idle).
    pub fn overdue_sessions(&self, now: Millis) -> Result<Vec<SessionRow>, StoreError> {
        self.with(|conn| {
            conn.query(
                &format!(
                    "SELECT {COLUMNS} FROM sessions WHERE status = 'open' \
                     AND (expires_ms <= ?1 OR last_used_ms + idle_ttl_ms <= ?1) ORDER BY id"
                ),
                args![ms(now)],
            )?
            .iter()
            .map(row_of)
            .collect()
        })
    }

    /// When the next open session ends by itself, if one is open.
    pub fn next_session_end(&self) -> Result<Option<Millis>, StoreError> {
        self.with(|conn| {
            let rows = conn.query(
                "SELECT MIN(CASE WHEN expires_ms < last_used_ms + idle_ttl_ms \
                 THEN expires_ms ELSE last_used_ms + idle_ttl_ms END) AS next \
                 FROM sessions WHERE status = 'open'",
                args![],
            )?;
            Ok(rows
                .first()
                .map(|row| row.get::<Option<i64>>("next"))
                .transpose()?
                .flatten()
                .map(|ms| ms.max(0) as u64))
        })
    }
}
