//! Policy evaluation (DESIGN §4): `evaluate(&Policy, &ToolCall, &[Grant]) -> Decision`.
//!
//! A [`Policy`] is compiled once from a [`Config`](crate::config::Config): tool globs
//! into glob sets, condition regexes into automata. Evaluation is pure and does no
//! compilation. Its layers, strictest wins (`Allow < Ask < Deny`):
//!
//! 1. sandbox: path escapes, deny globs, protected paths (textual here; the file
//!    tools check again with the kernel's help);
//! 2. the write-tool user allowlist (spec 001);
//! 3. the profile (spec 004);
//! 4. the first matching rule (spec 002);
//! 5. the default risk of the tool;
//! 6. the risk policy;
//! 7. grants, which turn ask into allow where `allow_skip`;
//! 8. `hitl.enabled: false` / `write_tool_confirmation: false`, which turn ask into
//!    allow.
//!
//! Each layer that speaks leaves a [`Justification`] in the decision.

mod compile;
mod decision;
mod evaluate;
mod grant;
pub mod path_args;
mod paths;

pub use compile::{PathRefusal, Policy};
pub use decision::{
    Decision, Disposition, Justification, Layer, Protected, Reason, Risk, ToolClass,
};
pub use evaluate::ResolvedPaths;
pub use grant::{Grant, GrantHolder, GrantScope, Grants, LazyGrants};
pub use paths::normalize_relative;

use crate::call::ToolCall;

/// Decides what happens to `call` under `policy`, given the grants in force.
pub fn evaluate(policy: &Policy, call: &ToolCall, grants: &dyn Grants) -> Decision {
    policy.evaluate(call, grants)
}

/// [`evaluate`] on the call as written and on its paths as the file system
/// resolves them (`resolved`, which the broker finds out): the strictest
/// decision wins, so no rule, grant or deny glob is passed by a symlink.
pub fn evaluate_resolved(
    policy: &Policy,
    call: &ToolCall,
    grants: &dyn Grants,
    resolved: &ResolvedPaths,
) -> Decision {
    policy.evaluate_resolved(call, grants, resolved)
}
