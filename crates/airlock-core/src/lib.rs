//! airlock-core: the sans-IO heart of airlock.
//!
//! It holds the domain types every transport shares ([`ToolCall`], [`Principal`],
//! [`Decision`], [`Risk`], [`ErrorCode`]), the configuration model with its loader
//! and JSON Schema ([`config`]), and policy evaluation ([`policy::evaluate`]). It
//! does no IO: no files, no sockets, no clock, no async runtime. Callers pass in
//! text, data and the time.
//!
//! ```
//! use airlock_core::{config, policy, Disposition, ToolCall};
//!
//! let loaded = config::load("profiles:\n  safe:\n    allowlist: [read_file]\n", "airlock.yaml")?;
//! let mut call = ToolCall::new(
//!     "write_file",
//!     serde_json::json!({"path": "src/main.rs", "content": "fn main() {}"}),
//!     loaded.policy.origin_of("write_file", None),
//!     0,
//! );
//! assert_eq!(policy::evaluate(&loaded.policy, &call, &[]).disposition, Disposition::Ask);
//! call.profile = Some("safe".into());
//! assert_eq!(policy::evaluate(&loaded.policy, &call, &[]).disposition, Disposition::Deny);
//! # Ok::<(), airlock_core::config::ConfigError>(())
//! ```

pub mod approval;
pub mod call;
pub mod canonical;
pub mod config;
pub mod display;
pub mod edit;
pub mod envelope;
pub mod error_code;
pub mod exec;
pub mod hooks;
pub mod jsonrpc;
pub mod origin;
pub mod patch;
pub mod plan;
pub mod policy;
pub mod redact;
pub mod risk;
pub mod session;
pub mod suggest;
pub mod tools;
pub mod yaml;

pub use approval::{ApprovalTerms, Channel, Decided, StateError};
pub use call::{
    HttpPrincipal, Principal, Requester, SessionHints, ToolAnnotations, ToolCall, ToolOrigin,
    UnixMillis, Via,
};
pub use error_code::ErrorCode;
pub use plan::{ChangePlan, FileChange, Plan, UpstreamCall, UpstreamRequest};
pub use policy::{
    Decision, Disposition, Grant, GrantHolder, GrantScope, Justification, Layer, Policy, Risk,
};
