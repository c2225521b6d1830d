//! Finding the workspace and loading its configuration.

use std::fs;
use std::path::{Path, PathBuf};

use airlock_core::config::{self, LoadedConfig};
use anyhow::{Context, anyhow};

use crate::{Failure, GlobalArgs};

/// What a command needs of the place it runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// `airlock init`: the workspace is the given or current directory, and
    /// its `--config` file may not exist yet.
    Creating,
    /// A workspace found as git finds a repository; none is an error.
    Existing,
    /// A command that works anywhere (`config schema`, `tools`): the workspace
    /// found, if any, else the built-in defaults.
    Optional,
}

/// The file and directory whose presence makes a directory a workspace.
const CONFIG_NAME: &str = "airlock.yaml";
const STATE_DIR_NAME: &str = ".airlock";

/// The workspace directory a command runs in: `--workspace`, else
/// `AIRLOCK_WORKSPACE`, else the nearest directory at or above the current
/// one holding `airlock.yaml` or `.airlock/`, on the current directory's file
/// system. A named directory must exist; for every command but `init` it must
/// be a workspace too, so nothing is ever created outside one.
fn locate(global: &GlobalArgs, need: Need) -> Result<PathBuf, Failure> {
    let named = global.workspace.clone().or_else(|| {
        std::env::var_os("AIRLOCK_WORKSPACE")
            .filter(|value| !value.is_empty())
            .map(PathBuf::from)
    });
    if let Some(dir) = named {
        let base = fs::canonicalize(&dir)
            .with_context(|| format!("workspace {} does not exist", dir.display()))
            .map_err(Failure::usage)?;
        if !base.is_dir() {
            return Err(Failure::usage(anyhow!(
                "workspace {} is not a directory",
                base.display()
            )));
        }
        if need == Need::Existing && !is_workspace(&base) {
            return Err(Failure::usage(anyhow!(
                "{} is not an airlock workspace (no {CONFIG_NAME} or {STATE_DIR_NAME}/ in it); run `airlock init` there first",
                base.display()
            )));
        }
        return Ok(base);
    }
    let cwd = std::env::current_dir()
        .context("cannot read the current directory")
        .map_err(Failure::internal)?;
    let cwd = fs::canonicalize(&cwd)
        .context("cannot resolve the current directory")
        .map_err(Failure::internal)?;
    if need == Need::Creating {
        // `init` makes the current directory a workspace.
        return Ok(cwd);
    }
    // A command that works anywhere does so whatever is found above.
    let found = match discover(&cwd) {
        Err(_) if need == Need::Optional => None,
        other => other?,
    };
    match found {
        Some(found) => Ok(found),
        None if need == Need::Optional => Ok(cwd),
        None => Err(Failure::usage(anyhow!(
            "no airlock workspace here or above; run `airlock init` or pass --workspace"
        ))),
    }
}

/// Whether `dir` holds `airlock.yaml` (any kind of entry: a dangling link is
/// found, and then refused when read) or a `.airlock` directory.
fn is_workspace(dir: &Path) -> bool {
    fs::symlink_metadata(dir.join(CONFIG_NAME)).is_ok() || dir.join(STATE_DIR_NAME).is_dir()
}

/// The nearest workspace at or above `start`, walking up while the parent is
/// on the same file system. A workspace owned by another user is refused, as
/// git refuses a repository another user owns: whoever can write there would
/// choose this process's policy, store and audit log.
fn discover(start: &Path) -> Result<Option<PathBuf>, Failure> {
    use std::os::unix::fs::MetadataExt;
    let device = fs::metadata(start)
        .context("cannot read the current directory")
        .map_err(Failure::internal)?
        .dev();
    for dir in start.ancestors() {
        let Ok(metadata) = fs::metadata(dir) else {
            break;
        };
        if metadata.dev() != device {
            break;
        }
        if !is_workspace(dir) {
            continue;
        }
        let me = rustix::process::geteuid().as_raw();
        let owner = [dir.join(CONFIG_NAME), dir.join(STATE_DIR_NAME)]
            .iter()
            .filter_map(|marker| fs::symlink_metadata(marker).ok())
            .map(|marker| marker.uid())
            .find(|&uid| uid != me);
        if let Some(owner) = owner {
            return Err(Failure::usage(anyhow!(
                "the workspace found at {} belongs to another user (uid {owner}); pass --workspace {} to use it anyway",
                dir.display(),
                dir.display()
            )));
        }
        return Ok(Some(dir.to_path_buf()));
    }
    Ok(None)
}

/// The workspace a command runs in, with its validated configuration.
pub(crate) struct Workspace {
    /// The directory found (or named) as the workspace; `workspace.root` is
    /// relative to it.
    pub base: PathBuf,
    /// The canonical sandbox root (`workspace.root`).
    pub root: PathBuf,
    /// The configuration file's path, whether or not it exists.
    pub config_path: PathBuf,
    /// Whether the configuration came from a file (else: built-in defaults).
    pub config_exists: bool,
    pub loaded: LoadedConfig,
}

impl Workspace {
    /// Finds the workspace and loads its configuration. Any problem is a usage
    /// failure (exit 2): airlock does not run on a configuration it cannot trust.
    pub fn load(global: &GlobalArgs, need: Need) -> Result<Workspace, Failure> {
        let base = locate(global, need)?;

        let config_path = match &global.config {
            Some(path) => path.clone(),
            None => base.join("airlock.yaml"),
        };
        // Only a file that is truly absent means "defaults": one that exists but
        // cannot be read (a dangling link, no permission) stops airlock.
        let config_exists = match fs::symlink_metadata(&config_path) {
            Ok(_) => true,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => false,
            Err(error) => {
                return Err(Failure::usage(anyhow!(
                    "cannot read {}: {error}",
                    config_path.display()
                )));
            }
        };
        let loaded = if config_exists {
            let text = fs::read_to_string(&config_path)
                .with_context(|| format!("cannot read {}", config_path.display()))
                .map_err(Failure::usage)?;
            config::load(&text, &config_path.display().to_string())
                .map_err(|error| Failure::usage(anyhow!("invalid configuration\n{error}")))?
        } else if global.config.is_some() && need != Need::Creating {
            return Err(Failure::usage(anyhow!(
                "configuration file {} does not exist",
                config_path.display()
            )));
        } else {
            config::defaults()
                .map_err(|error| Failure::internal(anyhow!("built-in defaults: {error}")))?
        };

        let configured_root = &loaded.config.workspace.root;
        let root = fs::canonicalize(base.join(configured_root))
            .with_context(|| format!("workspace.root {configured_root} does not exist"))
            .map_err(Failure::usage)?;
        if !root.is_dir() {
            return Err(Failure::usage(anyhow!(
                "workspace.root {} is not a directory",
                root.display()
            )));
        }
        let mut workspace = Workspace {
            base,
            root,
            config_path,
            config_exists,
            loaded,
        };
        workspace.bind_policy()?;
        Ok(workspace)
    }

    /// Tells the policy where the workspace and the configuration file are, so
    /// absolute paths can be placed and the config file is protected.
    fn bind_policy(&mut self) -> Result<(), Failure> {
        let config_path = absolute(&self.config_path);
        let root = utf8(&self.root)?;
        let config_path = utf8(&config_path)?;
        self.loaded.policy.bind_workspace(&root, Some(&config_path));
        Ok(())
    }

    /// The configuration with one more upstream (`airlock wrap`), compiled
    /// and bound again.
    pub fn with_upstream(
        mut self,
        upstream: airlock_core::config::UpstreamConfig,
    ) -> Result<Workspace, Failure> {
        let name = upstream.name.clone();
        if self
            .loaded
            .config
            .upstreams
            .iter()
            .any(|existing| existing.name == name)
        {
            return Err(Failure::usage(anyhow!(
                "the configuration already has an upstream named {name}; pick another with --name"
            )));
        }
        self.loaded.config.upstreams.push(upstream);
        self.loaded.policy =
            airlock_core::Policy::compile(&self.loaded.config).map_err(|issues| {
                let text: Vec<String> = issues
                    .iter()
                    .map(|issue| format!("{}: {}", issue.path, issue.message))
                    .collect();
                Failure::usage(anyhow!("invalid upstream {name}: {}", text.join("; ")))
            })?;
        self.bind_policy()?;
        Ok(self)
    }

    /// The broker's view of this workspace, with the store `store.url`
    /// names (joined once per process; `None`: the state dir's SQLite).
    pub fn into_broker_workspace(self) -> Result<airlock_broker::Workspace, Failure> {
        let store = crate::store::shared_store(&self.loaded.config, &self.root)?;
        Ok(airlock_broker::Workspace {
            root: self.root,
            loaded: self.loaded,
            store,
        })
    }

    /// Opens the workspace's broker (store, audit log, sandbox).
    pub fn broker(self) -> Result<airlock_broker::Broker, Failure> {
        airlock_broker::Broker::open_with_clock(
            self.into_broker_workspace()?,
            airlock_broker::clock_from_env(),
        )
        .map(|broker| broker.with_code_mode(crate::codemode::engine()))
        .map_err(|error| {
            // A log that cannot be continued is the audit's verdict (6), not
            // an internal error.
            let code = match &error {
                airlock_broker::BrokerError::Audit(airlock_audit::AuditError::CorruptTail {
                    ..
                }) => 6,
                // A state dir a newer airlock wrote: the user must act
                // (use that airlock), as with a configuration it refuses.
                airlock_broker::BrokerError::Store(airlock_store::StoreError::NewerSchema {
                    ..
                }) => 2,
                _ => 1,
            };
            Failure {
                code,
                error: anyhow!("cannot open the workspace state: {error}"),
            }
        })
    }

    /// The state dir's path.
    pub fn state_dir(&self) -> PathBuf {
        self.root.join(&self.loaded.config.workspace.state_dir)
    }

    /// `airlock init`: writes the commented defaults and creates the state
    /// dir. Run again, it keeps an existing configuration file (a project's
    /// committed one, say) unless `--force`, and creates what is missing, as
    /// `git init` does in a repository.
    pub fn init(&self, force: bool) -> Result<(), Failure> {
        let mut said = Vec::new();
        if self.config_exists && !force {
            said.push(format!(
                "kept {} (it exists; --force rewrites it with the defaults)",
                self.config_path.display()
            ));
        } else {
            fs::write(&self.config_path, config::TEMPLATE)
                .with_context(|| format!("cannot write {}", self.config_path.display()))
                .map_err(Failure::internal)?;
            said.push(format!("wrote {}", self.config_path.display()));
        }
        let state_dir = self.state_dir();
        if state_dir.is_dir() {
            said.push(format!("state dir {} exists", state_dir.display()));
        } else {
            fs::create_dir_all(&state_dir)
                .with_context(|| format!("cannot create {}", state_dir.display()))
                .map_err(Failure::internal)?;
            said.push(format!("created state dir {}", state_dir.display()));
        }
        // The state dir holds keys and the approvals database: keep it out of git.
        let ignore = state_dir.join(".gitignore");
        if !ignore.exists() {
            fs::write(&ignore, "*\n")
                .with_context(|| format!("cannot write {}", ignore.display()))
                .map_err(Failure::internal)?;
        }
        crate::print(&said.join("\n"));
        Ok(())
    }

    /// `airlock config check`: a one-paragraph summary of a valid configuration.
    pub fn describe(&self) -> String {
        let config = &self.loaded.config;
        let source = if self.config_exists {
            format!("{}: ok", self.config_path.display())
        } else {
            format!(
                "no configuration file at {}: the built-in defaults apply and are valid",
                self.config_path.display()
            )
        };
        format!(
            "{source}\nworkspace root {}, state dir {}\n{} rules, {} profiles{}, {} upstreams, {} tokens, {} webhooks",
            self.root.display(),
            config.workspace.state_dir,
            config.security.hitl.rules.len(),
            config.profiles.len(),
            match &config.default_profile {
                Some(name) => format!(" (default {name})"),
                None => String::new(),
            },
            config.upstreams.len(),
            config.auth.tokens.len(),
            config.notify.webhooks.len(),
        )
    }
}

fn absolute(path: &Path) -> PathBuf {
    if let Ok(canonical) = fs::canonicalize(path) {
        return canonical;
    }
    match std::env::current_dir() {
        Ok(cwd) => cwd.join(path),
        Err(_) => path.to_path_buf(),
    }
}

fn utf8(path: &Path) -> Result<String, Failure> {
    path.to_str()
        .map(str::to_owned)
        .ok_or_else(|| Failure::usage(anyhow!("path {} is not valid UTF-8", path.display())))
}
