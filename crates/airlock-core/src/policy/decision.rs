//! What the policy decides and why.

use std::fmt;
use std::sync::Arc;

use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};

use crate::config::ElicitationFallback;
use crate::error_code::ErrorCode;
pub use crate::risk::Risk;
use crate::tools::BuiltinClass;

/// The verdict, ordered so that the strictest is the greatest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Disposition {
    /// Run the call now.
    Allow,
    /// A human must approve the call first.
    Ask,
    /// Refuse the call.
    Deny,
}

impl Disposition {
    pub const fn as_str(self) -> &'static str {
        match self {
            Disposition::Allow => "allow",
            Disposition::Ask => "ask",
            Disposition::Deny => "deny",
        }
    }
}

impl fmt::Display for Disposition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The policy's answer for one call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    #[serde(rename = "decision")]
    pub disposition: Disposition,
    pub risk: Risk,
    /// Seconds a human has to decide.
    #[serde(rename = "timeout")]
    pub timeout_seconds: u64,
    /// Whether the approver may choose "always allow".
    pub allow_skip: bool,
    /// Whether a decision must carry a reason.
    pub require_reason: bool,
    /// Roles or users who may decide; empty means any approver.
    pub approvers: Arc<[String]>,
    /// Whether the call can change something (a built-in write tool, or any other
    /// tool whose risk is not low).
    pub write_class: bool,
    /// The profile that applied, if any.
    pub profile: Option<Arc<str>>,
    /// What to do when the MCP client cannot be asked.
    pub elicitation_fallback: ElicitationFallback,
    /// The envelope's error code when denied.
    #[serde(rename = "code")]
    pub deny_code: Option<ErrorCode>,
    /// Each layer that spoke, in layer order.
    pub justification: Vec<Justification>,
}

impl Decision {
    /// The envelope's `error.reason` of a denial: the first layer that denied,
    /// and the configuration entry that made it.
    pub fn deny_reason(&self) -> Option<crate::envelope::ErrorReason> {
        let denial = self
            .justification
            .iter()
            .find(|step| step.effect == Some(Disposition::Deny))?;
        let rule = match &denial.reason {
            Reason::NulByte { .. } => "nul_byte".to_owned(),
            Reason::AbsolutePath { .. } => "file_broker.absolute_paths".to_owned(),
            Reason::EscapesRoot { .. } => "workspace.root".to_owned(),
            Reason::Protected { what, .. } => format!(
                "protected.{}",
                match what {
                    Protected::StateDir => "state_dir",
                    Protected::AuditLog => "audit_log",
                    Protected::ConfigFile => "config_file",
                    Protected::Git => "git",
                }
            ),
            Reason::DenyGlob { pattern, .. } => format!("file_broker.deny_path_globs: {pattern}"),
            Reason::FileToolsDisabled => "file_broker.enabled".to_owned(),
            Reason::WriteToolsDisabled | Reason::UserNotAllowed { .. } | Reason::UserAllowed => {
                "security.write_tool_allowlist".to_owned()
            }
            Reason::UnknownProfile { profile } => format!("profiles.{profile}"),
            Reason::ProfileDenylist { profile, pattern } => {
                format!("profiles.{profile}.denylist: {pattern}")
            }
            Reason::ProfileAsklist { profile, pattern } => {
                format!("profiles.{profile}.asklist: {pattern}")
            }
            Reason::ProfileAllowlist { profile, pattern } => {
                format!("profiles.{profile}.allowlist: {pattern}")
            }
            Reason::ProfileAllowlistMiss { profile } => format!("profiles.{profile}.allowlist"),
            Reason::Rule { index, .. } => format!("security.hitl.rules[{index}]"),
            Reason::DefaultRisk { .. } => "default_risk".to_owned(),
            Reason::RiskPolicy { risk, .. } => format!("security.hitl.policies.{risk}"),
            Reason::Grant { id } => format!("grant {id}"),
            Reason::HitlDisabled => "security.hitl.enabled".to_owned(),
            Reason::ConfirmationDisabled => "security.write_tool_confirmation".to_owned(),
            Reason::ResolvedPaths => "resolved_paths".to_owned(),
            Reason::ExecDisabled => "exec.enabled".to_owned(),
            Reason::ExecNoCommand => "exec".to_owned(),
            Reason::ExecPart(part) => match &part.because {
                crate::exec::Because::Rule { rule } | crate::exec::Because::MayMatch { rule } => {
                    rule.to_string()
                }
                crate::exec::Because::Default => "exec.default".to_owned(),
                crate::exec::Because::Hazard { .. } => "exec".to_owned(),
                crate::exec::Because::Unsandboxed => "exec.sandbox".to_owned(),
            },
        };
        Some(crate::envelope::ErrorReason {
            layer: denial.layer().as_str().to_owned(),
            rule,
            profile: self.profile.as_deref().map(str::to_owned),
            risk: Some(self.risk),
        })
    }
}

/// The policy layers of DESIGN §4, in evaluation order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    Sandbox,
    WriteAllowlist,
    Profile,
    Rule,
    DefaultRisk,
    RiskPolicy,
    Grant,
    Hitl,
    Exec,
}

impl Layer {
    pub const fn as_str(self) -> &'static str {
        match self {
            Layer::Sandbox => "sandbox",
            Layer::WriteAllowlist => "write_allowlist",
            Layer::Profile => "profile",
            Layer::Rule => "rule",
            Layer::DefaultRisk => "default_risk",
            Layer::RiskPolicy => "risk_policy",
            Layer::Grant => "grant",
            Layer::Hitl => "hitl",
            Layer::Exec => "exec",
        }
    }
}

/// A path airlock never lets its tools change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Protected {
    /// airlock's state dir: neither readable nor writable.
    StateDir,
    /// The audit log: neither readable nor writable.
    AuditLog,
    /// The configuration file: readable, never writable.
    ConfigFile,
    /// A `.git` directory: readable, never writable.
    Git,
}

impl Protected {
    const fn describe(self) -> &'static str {
        match self {
            Protected::StateDir => "airlock's state dir",
            Protected::AuditLog => "the audit log",
            Protected::ConfigFile => "airlock's configuration file",
            Protected::Git => "a .git directory",
        }
    }
}

/// Why a layer spoke.
#[derive(Debug, Clone, PartialEq)]
pub enum Reason {
    /// A path argument holds a NUL byte.
    NulByte {
        param: String,
    },
    /// An absolute path where `absolute_paths: reject`.
    AbsolutePath {
        param: String,
        path: String,
        /// The path relative to the workspace root, when it is inside it.
        inside: Option<String>,
    },
    /// A path that leaves the workspace root.
    EscapesRoot {
        param: String,
        path: String,
    },
    /// A path inside (or, for writes, above) a protected location.
    Protected {
        param: String,
        path: String,
        what: Protected,
        /// Whether the path contains the protected location rather than lying in it.
        ancestor: bool,
    },
    /// A path matching a deny glob.
    DenyGlob {
        param: String,
        path: String,
        pattern: Arc<str>,
    },
    /// `file_broker.enabled: false` and the call is to a file tool.
    FileToolsDisabled,
    /// `write_tool_allowlist: []`.
    WriteToolsDisabled,
    /// The requesting user is not on the write-tool allowlist.
    UserNotAllowed {
        user: Option<String>,
    },
    /// The requesting user is on the write-tool allowlist.
    UserAllowed,
    /// The call names a profile that does not exist.
    UnknownProfile {
        profile: String,
    },
    ProfileDenylist {
        profile: Arc<str>,
        pattern: Arc<str>,
    },
    ProfileAsklist {
        profile: Arc<str>,
        pattern: Arc<str>,
    },
    ProfileAllowlist {
        profile: Arc<str>,
        pattern: Arc<str>,
    },
    ProfileAllowlistMiss {
        profile: Arc<str>,
    },
    /// The first rule whose tools and conditions all matched.
    Rule {
        index: usize,
        risk: Option<Risk>,
        require_approval: Option<bool>,
        deny: bool,
    },
    /// No rule set the risk; the tool's class did.
    DefaultRisk {
        class: ToolClass,
        risk: Risk,
    },
    /// The policy of the call's risk level.
    RiskPolicy {
        risk: Risk,
        require_approval: bool,
    },
    /// A grant ("always allow") matched.
    Grant {
        id: Arc<str>,
    },
    /// `security.hitl.enabled: false`.
    HitlDisabled,
    /// `security.write_tool_confirmation: false`.
    ConfirmationDisabled,
    /// The decision below was made on the paths as the file system resolves
    /// them, which was stricter than on the paths as written.
    ResolvedPaths,
    /// `exec.enabled: false`.
    ExecDisabled,
    /// An `exec` call that names no command (`command` or `argv`).
    ExecNoCommand,
    /// One part of an `exec` command and its decision.
    ExecPart(Box<crate::exec::Segment>),
}

/// The class behind a default risk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolClass {
    /// A built-in read-only tool.
    BuiltinReadOnly,
    /// A built-in write/edit/patch tool.
    BuiltinWrite,
    /// A built-in delete/move tool.
    BuiltinDestructive,
    /// An upstream tool whose annotations are trusted.
    TrustedUpstream,
    /// An upstream tool whose annotations are not trusted (or absent).
    UntrustedUpstream,
    /// The reading of an upstream's resource.
    UpstreamResource,
    /// An upstream's request to sample the client's model.
    UpstreamSampling,
    /// The shell tool.
    BuiltinExec,
    /// Not a built-in and not from a configured upstream.
    Unknown,
}

/// One layer's say in a decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Justification {
    /// What the layer voted for, if it voted; layers that only set facts (a risk)
    /// have none.
    pub effect: Option<Disposition>,
    pub reason: Reason,
}

impl ToolClass {
    /// The class of a built-in tool.
    pub const fn of_builtin(class: BuiltinClass) -> ToolClass {
        match class {
            BuiltinClass::ReadOnly => ToolClass::BuiltinReadOnly,
            BuiltinClass::Write => ToolClass::BuiltinWrite,
            BuiltinClass::Destructive => ToolClass::BuiltinDestructive,
            BuiltinClass::Exec => ToolClass::BuiltinExec,
        }
    }
}

impl Justification {
    pub fn layer(&self) -> Layer {
        match &self.reason {
            Reason::NulByte { .. }
            | Reason::AbsolutePath { .. }
            | Reason::EscapesRoot { .. }
            | Reason::Protected { .. }
            | Reason::DenyGlob { .. }
            | Reason::FileToolsDisabled => Layer::Sandbox,
            Reason::WriteToolsDisabled | Reason::UserNotAllowed { .. } | Reason::UserAllowed => {
                Layer::WriteAllowlist
            }
            Reason::UnknownProfile { .. }
            | Reason::ProfileDenylist { .. }
            | Reason::ProfileAsklist { .. }
            | Reason::ProfileAllowlist { .. }
            | Reason::ProfileAllowlistMiss { .. } => Layer::Profile,
            Reason::Rule { .. } => Layer::Rule,
            Reason::DefaultRisk { .. } => Layer::DefaultRisk,
            Reason::RiskPolicy { .. } => Layer::RiskPolicy,
            Reason::Grant { .. } => Layer::Grant,
            Reason::HitlDisabled | Reason::ConfirmationDisabled => Layer::Hitl,
            Reason::ResolvedPaths => Layer::Sandbox,
            Reason::ExecDisabled | Reason::ExecNoCommand | Reason::ExecPart(_) => Layer::Exec,
        }
    }

    /// The glob or regex that matched, or the rule index, as text.
    pub fn pattern(&self) -> Option<&str> {
        match &self.reason {
            Reason::DenyGlob { pattern, .. }
            | Reason::ProfileDenylist { pattern, .. }
            | Reason::ProfileAsklist { pattern, .. }
            | Reason::ProfileAllowlist { pattern, .. } => Some(pattern),
            Reason::NulByte { .. }
            | Reason::AbsolutePath { .. }
            | Reason::EscapesRoot { .. }
            | Reason::Protected { .. }
            | Reason::FileToolsDisabled
            | Reason::WriteToolsDisabled
            | Reason::UserNotAllowed { .. }
            | Reason::UserAllowed
            | Reason::UnknownProfile { .. }
            | Reason::ProfileAllowlistMiss { .. }
            | Reason::Rule { .. }
            | Reason::DefaultRisk { .. }
            | Reason::RiskPolicy { .. }
            | Reason::Grant { .. }
            | Reason::HitlDisabled
            | Reason::ConfirmationDisabled
            | Reason::ResolvedPaths
            | Reason::ExecDisabled
            | Reason::ExecNoCommand
            | Reason::ExecPart(_) => None,
        }
    }
}

impl fmt::Display for Justification {
    /// One plain sentence, lowercase, without a trailing period.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.reason {
            Reason::NulByte { param } => write!(f, "{param} contains a nul byte"),
            Reason::AbsolutePath {
                param,
                path,
                inside,
            } => {
                write!(
                    f,
                    "{param} `{path}` is absolute and absolute paths are rejected"
                )?;
                match inside {
                    Some(rel) => write!(
                        f,
                        "; it is `{rel}` in the workspace: pass that, or set file_broker.absolute_paths: within_root"
                    ),
                    None => write!(f, "; paths are relative to the workspace root"),
                }
            }
            Reason::EscapesRoot { param, path } => {
                write!(f, "{param} `{path}` leaves the workspace root")
            }
            Reason::Protected {
                param,
                path,
                what,
                ancestor: false,
            } => write!(f, "{param} `{path}` is inside {}", what.describe()),
            Reason::Protected {
                param,
                path,
                what,
                ancestor: true,
            } => write!(f, "{param} `{path}` contains {}", what.describe()),
            Reason::DenyGlob {
                param,
                path,
                pattern,
            } => write!(f, "{param} `{path}` matches deny glob `{pattern}`"),
            Reason::FileToolsDisabled => {
                f.write_str("the file tools are off (file_broker.enabled is false)")
            }
            Reason::WriteToolsDisabled => {
                f.write_str("write tools are disabled (write_tool_allowlist is empty)")
            }
            Reason::UserNotAllowed { user: Some(user) } => {
                write!(f, "user `{user}` is not on the write-tool allowlist")
            }
            Reason::UserNotAllowed { user: None } => {
                f.write_str("the call names no user and write tools are limited to an allowlist")
            }
            Reason::UserAllowed => f.write_str("the user is on the write-tool allowlist"),
            Reason::UnknownProfile { profile } => write!(f, "profile `{profile}` does not exist"),
            Reason::ProfileDenylist { profile, pattern } => {
                write!(f, "profile `{profile}` denylist glob `{pattern}` matches")
            }
            Reason::ProfileAsklist { profile, pattern } => {
                write!(f, "profile `{profile}` asklist glob `{pattern}` matches")
            }
            Reason::ProfileAllowlist { profile, pattern } => {
                write!(f, "profile `{profile}` allowlist glob `{pattern}` matches")
            }
            Reason::ProfileAllowlistMiss { profile } => {
                write!(
                    f,
                    "profile `{profile}` has an allowlist and no glob in it matches"
                )
            }
            Reason::Rule {
                index,
                risk,
                require_approval,
                deny,
            } => {
                write!(f, "rule {index} matches")?;
                if *deny {
                    f.write_str(" and denies")?;
                }
                if let Some(risk) = risk {
                    write!(f, ", risk {risk}")?;
                }
                match require_approval {
                    Some(true) => f.write_str(", approval required"),
                    Some(false) => f.write_str(", no approval required"),
                    None => Ok(()),
                }
            }
            Reason::DefaultRisk { class, risk } => {
                let what = match class {
                    ToolClass::BuiltinReadOnly => "built-in read-only tool",
                    ToolClass::BuiltinWrite => "built-in write tool",
                    ToolClass::BuiltinDestructive => "built-in delete/move tool",
                    ToolClass::TrustedUpstream => "upstream tool with trusted annotations",
                    ToolClass::UntrustedUpstream => "upstream tool, annotations not trusted",
                    ToolClass::UpstreamResource => "upstream resource read",
                    ToolClass::UpstreamSampling => "upstream sampling request (spends)",
                    ToolClass::BuiltinExec => "shell command",
                    ToolClass::Unknown => "unknown tool",
                };
                write!(f, "{what}: risk {risk}")
            }
            Reason::RiskPolicy {
                risk,
                require_approval: true,
            } => write!(f, "{risk} risk requires approval"),
            Reason::RiskPolicy {
                risk,
                require_approval: false,
            } => write!(f, "{risk} risk needs no approval"),
            Reason::Grant { id } => write!(f, "grant `{id}` allows it"),
            Reason::HitlDisabled => f.write_str("hitl is disabled, so asking becomes allowing"),
            Reason::ConfirmationDisabled => f.write_str(
                "write_tool_confirmation is off, so an allowed user's write is not asked",
            ),
            Reason::ResolvedPaths => f.write_str(
                "decided on the paths as the file system resolves them (symlinks followed), which is stricter than as written",
            ),
            Reason::ExecDisabled => f.write_str("the shell tool is off (exec.enabled is false)"),
            Reason::ExecNoCommand => {
                f.write_str("names no command: pass `command` (a string) or `argv` (a list)")
            }
            Reason::ExecPart(part) => {
                // A command is an agent's text: one line, made visible.
                let shown = part.command.as_deref().unwrap_or(&part.text);
                write!(f, "`{}`", crate::display::safe_line(shown))?;
                if !part.via.is_empty() {
                    write!(f, " (in {})", crate::display::safe_line(&part.via.join(" > ")))?;
                }
                write!(f, ": {}", crate::display::safe_line(&part.because.to_string()))
            }
        }
    }
}

impl Serialize for Justification {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("layer", &self.layer())?;
        map.serialize_entry("effect", &self.effect)?;
        match &self.reason {
            Reason::NulByte { param } => map.serialize_entry("param", param)?,
            Reason::AbsolutePath { param, path, .. } | Reason::EscapesRoot { param, path } => {
                map.serialize_entry("param", param)?;
                map.serialize_entry("path", path)?;
            }
            Reason::Protected {
                param,
                path,
                what,
                ancestor,
            } => {
                map.serialize_entry("param", param)?;
                map.serialize_entry("path", path)?;
                map.serialize_entry("protected", what)?;
                map.serialize_entry("ancestor", ancestor)?;
            }
            Reason::DenyGlob {
                param,
                path,
                pattern,
            } => {
                map.serialize_entry("param", param)?;
                map.serialize_entry("path", path)?;
                map.serialize_entry("pattern", pattern)?;
            }
            Reason::FileToolsDisabled | Reason::WriteToolsDisabled | Reason::UserAllowed => {}
            Reason::UserNotAllowed { user } => map.serialize_entry("user", user)?,
            Reason::UnknownProfile { profile } => map.serialize_entry("profile", profile)?,
            Reason::ProfileDenylist { profile, pattern } => {
                serialize_list_match(&mut map, profile, "denylist", pattern)?;
            }
            Reason::ProfileAsklist { profile, pattern } => {
                serialize_list_match(&mut map, profile, "asklist", pattern)?;
            }
            Reason::ProfileAllowlist { profile, pattern } => {
                serialize_list_match(&mut map, profile, "allowlist", pattern)?;
            }
            Reason::ProfileAllowlistMiss { profile } => {
                map.serialize_entry("profile", profile)?;
                map.serialize_entry("list", "allowlist")?;
            }
            Reason::Rule {
                index,
                risk,
                require_approval,
                deny,
            } => {
                map.serialize_entry("rule_index", index)?;
                map.serialize_entry("risk", risk)?;
                map.serialize_entry("require_approval", require_approval)?;
                map.serialize_entry("deny", deny)?;
            }
            Reason::DefaultRisk { class, risk } => {
                map.serialize_entry("class", class)?;
                map.serialize_entry("risk", risk)?;
            }
            Reason::RiskPolicy {
                risk,
                require_approval,
            } => {
                map.serialize_entry("risk", risk)?;
                map.serialize_entry("require_approval", require_approval)?;
            }
            Reason::Grant { id } => map.serialize_entry("grant", id)?,
            Reason::HitlDisabled => map.serialize_entry("setting", "security.hitl.enabled")?,
            Reason::ConfirmationDisabled => {
                map.serialize_entry("setting", "security.write_tool_confirmation")?;
            }
            Reason::ResolvedPaths => map.serialize_entry("paths", "resolved")?,
            Reason::ExecDisabled => map.serialize_entry("setting", "exec.enabled")?,
            Reason::ExecNoCommand => {}
            Reason::ExecPart(part) => map.serialize_entry("part", part)?,
        }
        map.serialize_entry("message", &self.to_string())?;
        map.end()
    }
}

fn serialize_list_match<M: SerializeMap>(
    map: &mut M,
    profile: &str,
    list: &str,
    pattern: &str,
) -> Result<(), M::Error> {
    map.serialize_entry("profile", profile)?;
    map.serialize_entry("list", list)?;
    map.serialize_entry("pattern", pattern)
}
