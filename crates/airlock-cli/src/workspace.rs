//! Finding the workspace and loading its configuration.

use std::fs;
use std::path::{Path, PathBuf};

use airlock_core::config::{self, LoadedConfig};
use anyhow::{Context, anyhow};

use crate::{Failure, GlobalArgs};

/// The workspace a command runs in, with its validated configuration.
pub(crate) struct Workspace {
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
    ///
    /// `creating` is for `airlock init`, which may name a `--config` file that does
    /// not exist yet.
    pub fn load(global: &GlobalArgs, creating: bool) -> Result<Workspace, Failure> {
        let base = match &global.workspace {
            Some(dir) => dir.clone(),
            None => std::env::current_dir()
                .context("cannot read the current directory")
                .map_err(Failure::internal)?,
        };
        let base = fs::canonicalize(&base)
            .with_context(|| format!("workspace {} does not exist", base.display()))
            .map_err(Failure::usage)?;
        if !base.is_dir() {
            return Err(Failure::usage(anyhow!(
                "workspace {} is not a directory",
                base.display()
            )));
        }

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
        } else if global.config.is_some() && !creating {
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

    /// Opens the workspace's broker (store, audit log, sandbox).
    pub fn broker(self) -> Result<airlock_broker::Broker, Failure> {
        airlock_broker::Broker::open_with_clock(
            airlock_broker::Workspace {
                root: self.root,
                loaded: self.loaded,
            },
            airlock_broker::clock_from_env(),
        )
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

    /// `airlock init`: writes the commented defaults and creates the state dir.
    pub fn init(&self, force: bool) -> Result<(), Failure> {
        if self.config_exists && !force {
            return Err(Failure::usage(anyhow!(
                "{} already exists; pass --force to overwrite it",
                self.config_path.display()
            )));
        }
        fs::write(&self.config_path, config::TEMPLATE)
            .with_context(|| format!("cannot write {}", self.config_path.display()))
            .map_err(Failure::internal)?;
        let state_dir = self.state_dir();
        fs::create_dir_all(&state_dir)
            .with_context(|| format!("cannot create {}", state_dir.display()))
            .map_err(Failure::internal)?;
        // The state dir holds keys and the approvals database: keep it out of git.
        let ignore = state_dir.join(".gitignore");
        if !ignore.exists() {
            fs::write(&ignore, "*\n")
                .with_context(|| format!("cannot write {}", ignore.display()))
                .map_err(Failure::internal)?;
        }
        crate::print(&format!(
            "wrote {}\ncreated state dir {}",
            self.config_path.display(),
            state_dir.display()
        ));
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
