//! The chat messages that show approvals: one row per approval, platform
//! and chat. A row is claimed (inserted without a message id) before its
//! message is posted, so no two processes post it; the message id kept
//! after posting lets any later process edit it (a restart neither posts
//! again nor loses the message).

use crate::sql::{Row, args, first};
use crate::{Millis, Store, StoreError};

/// One chat message of an approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    pub approval_id: String,
    pub platform: String,
    pub chat: String,
    /// `None` while claimed and not (yet) posted.
    pub message_id: Option<String>,
    pub claimed_ms: Millis,
    /// What the message shows now (a digest of its text and buttons), so
    /// an edit is made only when that changes.
    pub shown: String,
    /// The message shows the approval's final outcome; nothing more
    /// happens to it.
    pub settled: bool,
}

fn from_row(row: &Row) -> Result<ChatMessage, StoreError> {
    Ok(ChatMessage {
        approval_id: row.get("approval_id")?,
        platform: row.get("platform")?,
        chat: row.get("chat")?,
        message_id: row.get("message_id")?,
        claimed_ms: row.get::<i64>("claimed_ms")?.max(0) as u64,
        shown: row.get("shown")?,
        settled: row.get::<i64>("settled")? != 0,
    })
}

const COLUMNS: &str = "approval_id, platform, chat, message_id, claimed_ms, shown, settled";

impl Store {
    /// Claims the message of `approval_id` in `chat` of `platform`: `true`
    /// when this caller is the one to post it.
    pub fn claim_chat_message(
        &self,
        approval_id: &str,
        platform: &str,
        chat: &str,
        at_ms: Millis,
    ) -> Result<bool, StoreError> {
        self.changing(|conn| {
            let inserted = conn.execute(
                "INSERT INTO chat_messages (approval_id, platform, chat, claimed_ms) \
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING",
                args![approval_id, platform, chat, at_ms as i64],
            )?;
            Ok(inserted == 1)
        })
    }

    /// Records the posted message's id and what it shows.
    pub fn posted_chat_message(
        &self,
        approval_id: &str,
        platform: &str,
        chat: &str,
        message_id: &str,
        shown: &str,
    ) -> Result<(), StoreError> {
        self.changing(|conn| {
            conn.execute(
                "UPDATE chat_messages SET message_id = ?4, shown = ?5 \
                 WHERE approval_id = ?1 AND platform = ?2 AND chat = ?3",
                args![approval_id, platform, chat, message_id, shown],
            )?;
            Ok(())
        })
    }

    /// Gives up a claim whose message could not be posted, so the next
    /// pass tries again.
    pub fn release_chat_message(
        &self,
        approval_id: &str,
        platform: &str,
        chat: &str,
    ) -> Result<(), StoreError> {
        self.changing(|conn| {
            conn.execute(
                "DELETE FROM chat_messages \
                 WHERE approval_id = ?1 AND platform = ?2 AND chat = ?3 AND message_id IS NULL",
                args![approval_id, platform, chat],
            )?;
            Ok(())
        })
    }

    /// Records what an edited message shows now, and whether that is the
    /// final outcome.
    pub fn edited_chat_message(
        &self,
        approval_id: &str,
        platform: &str,
        chat: &str,
        shown: &str,
        settled: bool,
    ) -> Result<(), StoreError> {
        self.changing(|conn| {
            conn.execute(
                "UPDATE chat_messages SET shown = ?4, settled = ?5 \
                 WHERE approval_id = ?1 AND platform = ?2 AND chat = ?3",
                args![approval_id, platform, chat, shown, settled as i64],
            )?;
            Ok(())
        })
    }

    /// The messages of `platform` that are not settled, oldest first.
    pub fn open_chat_messages(&self, platform: &str) -> Result<Vec<ChatMessage>, StoreError> {
        self.with(|conn| {
            conn.query(
                &format!(
                    "SELECT {COLUMNS} FROM chat_messages WHERE platform = ?1 AND settled = 0 \
                 ORDER BY claimed_ms, approval_id"
                ),
                args![platform],
            )?
            .iter()
            .map(from_row)
            .collect()
        })
    }

    /// The approval a message of `platform` in `chat` shows, found by the
    /// message's id (a reply names the message it answers).
    pub fn chat_message_by_id(
        &self,
        platform: &str,
        chat: &str,
        message_id: &str,
    ) -> Result<Option<ChatMessage>, StoreError> {
        self.with(|conn| {
            first(
                conn,
                &format!(
                    "SELECT {COLUMNS} FROM chat_messages \
                     WHERE platform = ?1 AND chat = ?2 AND message_id = ?3"
                ),
                args![platform, chat, message_id],
            )?
            .as_ref()
            .map(from_row)
            .transpose()
        })
    }

    /// Every message of `approval_id`.
    pub fn chat_messages_of(&self, approval_id: &str) -> Result<Vec<ChatMessage>, StoreError> {
        self.with(|conn| {
            conn.query(&format!(
                "SELECT {COLUMNS} FROM chat_messages WHERE approval_id = ?1 ORDER BY platform, chat"
                ), args![approval_id])?
                .iter()
                .map(from_row)
                .collect()
        })
    }
}
