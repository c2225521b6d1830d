//! `airlock channels run | test NAME`, and the chat channels of `watch`.
//! `serve` runs them on its own runtime (its reloads swap the broker).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use clap::Subcommand;

use crate::workspace::{Need, Workspace};
use crate::{Failure, GlobalArgs};

#[derive(Debug, Subcommand)]
pub(crate) enum ChannelsCommand {
    /// Run the configured chat channels in the foreground (once no other
    /// airlock process of this workspace runs them).
    Run {
        /// The web UI's address, for "Open in web UI" buttons.
        #[arg(long, value_name = "URL")]
        public_url: Option<String>,
    },
    /// Send a test message to each configured chat of channel NAME and say
    /// what the platform answered.
    Test {
        /// telegram, slack or discord.
        name: String,
    },
}

pub(crate) fn run(workspace: Workspace, command: &ChannelsCommand) -> Result<u8, Failure> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| Failure::internal(anyhow!("cannot start the runtime: {error}")))?;
    match command {
        ChannelsCommand::Run { public_url } => {
            let brokers = reloading(workspace)?;
            let options = airlock_chat::Options {
                public_url: public_url.clone(),
            };
            eprintln!("airlock: running the chat channels (ctrl-c to stop)");
            runtime.block_on(async move {
                tokio::select! {
                    () = airlock_chat::run(brokers, options) => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            });
            Ok(0)
        }
        ChannelsCommand::Test { name } => {
            let broker = workspace.broker()?;
            match runtime.block_on(airlock_chat::test(&broker, name)) {
                Ok(tested) => {
                    for line in &tested.lines {
                        crate::print(line);
                    }
                    Ok(u8::from(tested.failed))
                }
                Err(error) => Err(Failure::with_code(1, error)),
            }
        }
    }
}

/// Runs the chat channels on a thread of their own for as long as the
/// process lives (`airlock watch`).
pub(crate) fn in_background(workspace: Workspace) -> Result<(), Failure> {
    let brokers = reloading(workspace)?;
    std::thread::Builder::new()
        .name("airlock-chat".to_owned())
        .spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            else {
                eprintln!("airlock: the chat channels cannot start a runtime");
                return;
            };
            runtime.block_on(airlock_chat::run(brokers, airlock_chat::Options::default()));
        })
        .map_err(|error| Failure::internal(anyhow!("cannot start the chat channels: {error}")))?;
    Ok(())
}

/// The broker of `workspace`, opened again when its configuration file
/// changes (looked at every half second at most), so the users, chats and
/// timeouts in force are the file's.
fn reloading(workspace: Workspace) -> Result<airlock_chat::Brokers, Failure> {
    let pinned = GlobalArgs {
        workspace: Some(workspace.base.clone()),
        config: Some(absolute(&workspace.config_path)),
    };
    let path = workspace.config_path.clone();
    let broker = Arc::new(workspace.broker()?);
    let state = Mutex::new((Instant::now(), std::fs::read(&path).ok(), broker));
    Ok(Arc::new(move || {
        let mut state = state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.0.elapsed() >= Duration::from_millis(500) {
            state.0 = Instant::now();
            let now = std::fs::read(&path).ok();
            if now != state.1 {
                state.1 = now;
                match Workspace::load(&pinned, Need::Existing).and_then(Workspace::broker) {
                    Ok(broker) => {
                        eprintln!("airlock: chat channels: configuration reloaded");
                        state.2 = Arc::new(broker);
                    }
                    Err(failure) => eprintln!(
                        "airlock: chat channels: configuration refused, the old one stays: {:#}",
                        failure.error
                    ),
                }
            }
        }
        state.2.clone()
    }))
}

fn absolute(path: &std::path::Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_path_buf();
    }
    std::env::current_dir()
        .map(|cwd| cwd.join(path))
        .unwrap_or_else(|_| path.to_path_buf())
}
