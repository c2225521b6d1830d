//! How much harm a call can do: a plain value that the tool table, the policy
//! and the envelope all speak of, so it depends on none of them.

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How much harm a call can do (spec 002).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    /// Read-only operations.
    Low,
    /// Modifications with easy undo.
    Medium,
    /// Destructive operations, hard to undo.
    High,
    /// Irreversible operations.
    Critical,
}

impl Risk {
    pub const ALL: [Risk; 4] = [Risk::Low, Risk::Medium, Risk::High, Risk::Critical];

    pub const fn as_str(self) -> &'static str {
        match self {
            Risk::Low => "low",
            Risk::Medium => "medium",
            Risk::High => "high",
            Risk::Critical => "critical",
        }
    }
}

impl fmt::Display for Risk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`: widths and alignment apply (`{:<8}` in a table).
        f.pad(self.as_str())
    }
}

impl FromStr for Risk {
    type Err = UnknownRisk;

    fn from_str(text: &str) -> Result<Risk, UnknownRisk> {
        Risk::ALL
            .into_iter()
            .find(|risk| risk.as_str() == text)
            .ok_or_else(|| UnknownRisk(text.to_owned()))
    }
}

/// A risk name that is none of the four.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown risk `{0}`, expected low, medium, high or critical")]
pub struct UnknownRisk(pub String);
