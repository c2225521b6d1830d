//! airlock-broker: the application layer. Every call, from every face, goes
//! through the one lifecycle here:
//!
//! ```text
//! submit -> (policy: allow | ask | deny)
//!   ask -> propose -> wait | defer -> decide -> apply -> settled
//!                                  \-> expire | cancel
//! applied -> undo
//! ```
//!
//! A [`Broker`] holds the compiled policy, the sandbox, the store and the
//! audit log of one workspace; each step lives in its own module. Processes
//! share state through the store, so a decision taken in one process resumes
//! a call waiting in another.
//!
//! Every write, even one the policy allows outright, is recorded as an approval
//! and applied through the same claim -> commit -> finish path, so undo and the
//! one-time-apply guarantee hold for all of them.

mod apply;
mod audit_source;
mod batch;
mod broker;
mod chat;
mod checkpoints;
mod clock;
mod code;
mod decide;
mod envelopes;
mod error;
mod exec;
mod feed;
mod forward;
mod grants;
mod hook;
mod metrics;
mod migrate;
mod presence;
pub mod progress;
mod propose;
mod record;
mod runtime;
mod sessions;
mod staging;
mod stats;
mod submit;
pub mod telemetry;
mod undo;
mod views;
mod wait;

pub use airlock_exec::{Cancel, CancelOnDrop};
pub use airlock_store::{Approval, ApprovalStatus, ChatMessage, GrantRow};
pub use airlock_store::{EventKind, FeedEvent, Notifier};
pub use audit_source::{AuditFollower, AuditSource};
pub use batch::{BatchOutcome, MAX_BATCH};
pub use broker::{Broker, Workspace};
pub use checkpoints::{Checkpoints, KEY_FILE, LATEST_FILE, RecordProof};
pub use clock::{Clock, ManualClock, SystemClock, clock_from_env};
pub use code::{CODE_METHOD, CODEMODE_TOOL, CodeCall, CodeMode, ListedTool, code_tool};
pub use decide::{AlwaysAllow, AskForm, Authority, DecideRequest};
pub use error::BrokerError;
pub use exec::ExecParams;
pub use feed::{Cursor, FEED_POLL};
pub use forward::{ForwardError, ForwardNow, Forwarder};
pub use grants::{GrantTerms, duration_words};
pub use hook::HOOK_MARGIN;
pub use metrics::{Gauges, MAX_SERIES};
pub use migrate::{Migrated, migrate_store};
pub use presence::{LiveChannel, Presence};
pub use record::Record;
pub use runtime::{
    ConfigRefused, NoUpstreams, Notice, Reloader, Runtime, RuntimeOptions, UpstreamTool, Upstreams,
    offered_unprefixed,
};
pub use staging::{RunProposal, Staging};
pub use stats::{Bucket, Figures, Group, Percentiles, Stats, StatsBy, since_time};
pub use submit::{ClientAsk, Mode, default_mode, deferred_ttl, explain};
pub use views::{
    AuditCheck, AuditQuery, approval_view, check_audit, grant_view, proposed_content, query_audit,
};

/// `Map` of an audit record, for callers that add their own events.
pub type AuditMap = serde_json::Map<String, serde_json::Value>;
