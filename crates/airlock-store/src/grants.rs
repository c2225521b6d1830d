//! "Always allow" grants: made with an approval, ended by their time or
//! revoked; each change writes its event.

use crate::feed::{EventKind, NewEvent, write_event};
use crate::sql::args;
use crate::{Millis, Store, StoreError};

/// An "always allow" grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantRow {
    pub id: String,
    pub tool: String,
    pub path_glob: Option<String>,
    /// `None` for a persistent grant.
    pub session: Option<String>,
    /// The user the grant was made for: it covers that user's calls only.
    pub user: Option<String>,
    /// A session grant covers only this principal's calls in the session
    /// (`Principal::owner_key`); `None` for a persistent one.
    pub owner: Option<String>,
    pub expires_ms: Option<Millis>,
    pub created_ms: Millis,
    pub created_by: Option<String>,
    pub approval_id: Option<String>,
}
impl Store {
    /// Removes a grant (revoked, or one whose creation could not be
    /// audited); whether there was one to remove.
    pub fn delete_grant(&self, id: &str, at_ms: Millis) -> Result<bool, StoreError> {
        self.changing(|conn| {
            let deleted = conn.execute("DELETE FROM grants WHERE id = ?1", args![id])? > 0;
            if deleted {
                write_event(
                    conn,
                    NewEvent {
                        kind: EventKind::GrantRevoked,
                        subject: Some(id),
                        owner: None,
                        at_ms,
                        data: serde_json::json!({}),
                    },
                )?;
            }
            Ok(deleted)
        })
    }

    /// Gives every grant without an end (made before grants ended by default)
    /// the end `ttl_ms` after it was made; how many it changed.
    pub fn end_open_grants(&self, ttl_ms: Millis) -> Result<usize, StoreError> {
        self.with(|conn| {
            Ok(conn.execute(
                "UPDATE grants SET expires_ms = created_ms + ?1 WHERE expires_ms IS NULL",
                args![i64::try_from(ttl_ms).unwrap_or(i64::MAX)],
            )? as usize)
        })
    }

    /// Stores an "always allow" grant.
    pub fn insert_grant(&self, grant: &GrantRow) -> Result<(), StoreError> {
        self.changing(|conn| {
            conn.execute(
                "INSERT INTO grants (id, tool, path_glob, session, expires_ms, created_ms, created_by, approval_id, \"user\", owner) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                args![
                    grant.id,
                    grant.tool,
                    grant.path_glob,
                    grant.session,
                    grant.expires_ms.map(|ms| ms as i64),
                    grant.created_ms as i64,
                    grant.created_by,
                    grant.approval_id,
                    grant.user,
                    grant.owner,
                ],
            )?;
            write_event(
                conn,
                NewEvent {
                    kind: EventKind::GrantCreated,
                    subject: Some(&grant.id),
                    owner: None,
                    at_ms: grant.created_ms,
                    data: serde_json::json!({
                        "tool": grant.tool,
                        "approval_id": grant.approval_id,
                    }),
                },
            )?;
            Ok(())
        })
    }

    /// Grants that have not expired at `now`.
    pub fn grants(&self, now: Millis) -> Result<Vec<GrantRow>, StoreError> {
        self.with(|conn| {
            conn.query(
                "SELECT id, tool, path_glob, session, expires_ms, created_ms, created_by, approval_id, \
                 \"user\", owner FROM grants WHERE expires_ms IS NULL OR expires_ms > ?1 ORDER BY created_ms, id",
                args![now as i64],
            )?
            .iter()
            .map(|row| {
                Ok(GrantRow {
                    id: row.get("id")?,
                    tool: row.get("tool")?,
                    path_glob: row.get("path_glob")?,
                    session: row.get("session")?,
                    expires_ms: row.get::<Option<i64>>("expires_ms")?.map(|ms| ms.max(0) as u64),
                    created_ms: row.get::<i64>("created_ms")?.max(0) as u64,
                    created_by: row.get("created_by")?,
                    approval_id: row.get("approval_id")?,
                    user: row.get("user")?,
                    owner: row.get("owner")?,
                })
            })
            .collect()
        })
    }
}
