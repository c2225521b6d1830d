//! What the chat channels keep in the store: the messages that show
//! approvals, an approval's expiry brought forward to a chat's timeout,
//! and refused presses and replies in the audit log.

use airlock_store::{Approval, ChatMessage};

use crate::broker::Broker;
use crate::error::BrokerError;
use crate::record::Record;

impl Broker {
    /// Claims the message of `approval_id` in `chat`: `true` when this
    /// process is the one to post it.
    pub fn claim_chat_message(
        &self,
        approval_id: &str,
        platform: &str,
        chat: &str,
    ) -> Result<bool, BrokerError> {
        Ok(self
            .store
            .claim_chat_message(approval_id, platform, chat, self.now_ms())?)
    }

    /// Records a posted message's id and what it shows.
    pub fn posted_chat_message(
        &self,
        message: &ChatMessage,
        message_id: &str,
        shown: &str,
    ) -> Result<(), BrokerError> {
        Ok(self.store.posted_chat_message(
            &message.approval_id,
            &message.platform,
            &message.chat,
            message_id,
            shown,
        )?)
    }

    /// Gives up a claim whose message could not be posted.
    pub fn release_chat_message(&self, message: &ChatMessage) -> Result<(), BrokerError> {
        Ok(self.store.release_chat_message(
            &message.approval_id,
            &message.platform,
            &message.chat,
        )?)
    }

    /// Records what an edited message shows, and whether it is final.
    pub fn edited_chat_message(
        &self,
        message: &ChatMessage,
        shown: &str,
        settled: bool,
    ) -> Result<(), BrokerError> {
        Ok(self.store.edited_chat_message(
            &message.approval_id,
            &message.platform,
            &message.chat,
            shown,
            settled,
        )?)
    }

    /// The messages of `platform` not yet showing a final outcome.
    pub fn open_chat_messages(&self, platform: &str) -> Result<Vec<ChatMessage>, BrokerError> {
        Ok(self.store.open_chat_messages(platform)?)
    }

    /// The message of `platform` in `chat` with id `message_id`.
    pub fn chat_message_by_id(
        &self,
        platform: &str,
        chat: &str,
        message_id: &str,
    ) -> Result<Option<ChatMessage>, BrokerError> {
        Ok(self.store.chat_message_by_id(platform, chat, message_id)?)
    }

    /// Brings a pending approval's expiry forward to `until_ms` (a chat's
    /// timeout), never later than the risk policy set it; the sweeper then
    /// expires it (denied) like any other.
    pub fn cap_expiry(&self, id: &str, until_ms: u64) -> Result<Option<Approval>, BrokerError> {
        Ok(self.store.cap_expiry(id, until_ms, self.now_ms())?)
    }

    /// Records a press or reply that was not allowed to decide: who, on
    /// which platform, and why. Nothing else changes.
    pub fn audit_chat_refusal(
        &self,
        approval: &Approval,
        channel: &str,
        platform_user: &str,
        user: Option<&str>,
        message: &str,
    ) {
        self.log(
            Record::for_approval(approval)
                .event("hitl_refused")
                .text("channel", channel)
                .text("platform_user", platform_user)
                .value(
                    "user",
                    user.map(|user| serde_json::Value::String(user.to_owned())),
                )
                .text("message", message),
        );
    }
}
