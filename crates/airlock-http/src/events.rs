//! `GET /hitl/events`: server-sent events for approvals created, decided
//! and expired, whichever process made or decided them (the store is
//! shared): the server looks at the store every [`POLL`], expiring overdue
//! approvals as it goes, and tells every subscriber what changed (`decided`
//! once the outcome is known: applied, failed, denied).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use airlock_broker::Runtime;
use airlock_broker::approval_view;
use airlock_core::Principal;
use axum::response::sse::{Event, KeepAlive, Sse};
use serde_json::{Value, json};
use tokio::sync::broadcast;

/// How often the store is looked at.
const POLL: Duration = Duration::from_millis(200);
/// How long a `decided` event waits for the approval's outcome (applied,
/// failed) before it is sent with the status of the moment.
const SETTLE_WAIT: Duration = Duration::from_secs(10);

/// One change: `created`, `decided` or `expired`, with the approval as the
/// API shows it.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub kind: &'static str,
    pub approval: Value,
    /// Who made the call (`Principal::owner_key`): an agent's stream shows
    /// only its own approvals.
    pub owner: Option<String>,
}

/// The subscribers' channel.
#[derive(Clone)]
pub(crate) struct Events {
    sender: broadcast::Sender<Change>,
}

impl Events {
    /// Starts watching the store of `runtime`'s broker.
    pub(crate) fn start(runtime: Arc<Runtime>) -> Events {
        let (sender, _) = broadcast::channel(1024);
        let watcher = sender.clone();
        tokio::spawn(async move {
            let mut known: HashMap<String, ()> = HashMap::new();
            // Decided but not settled yet (being applied), since when: the
            // `decided` event waits for the outcome, up to `SETTLE_WAIT`.
            let mut settling: HashMap<String, std::time::Instant> = HashMap::new();
            let mut first = true;
            loop {
                let broker = runtime.broker();
                let looked = tokio::task::spawn_blocking(move || {
                    let _ = broker.expire_overdue();
                    let pending = broker.pending(None).unwrap_or_default();
                    (broker, pending)
                })
                .await;
                let Ok((broker, pending)) = looked else {
                    tokio::time::sleep(POLL).await;
                    continue;
                };
                let now: HashMap<String, ()> = pending
                    .iter()
                    .map(|approval| (approval.id.clone(), ()))
                    .collect();
                if !first {
                    for approval in pending.iter().filter(|a| !known.contains_key(&a.id)) {
                        let _ = watcher.send(Change {
                            kind: "created",
                            approval: approval_view(approval),
                            owner: approval.owner.clone(),
                        });
                    }
                    let mut gone: Vec<String> = known
                        .keys()
                        .filter(|id| !now.contains_key(*id))
                        .cloned()
                        .collect();
                    gone.extend(settling.keys().cloned());
                    if !gone.is_empty() {
                        let settled = tokio::task::spawn_blocking(move || {
                            gone.iter()
                                .filter_map(|id| broker.approval(id).ok())
                                .collect::<Vec<_>>()
                        })
                        .await
                        .unwrap_or_default();
                        for approval in settled {
                            if !approval.status.is_final() {
                                let since = settling
                                    .entry(approval.id.clone())
                                    .or_insert_with(std::time::Instant::now);
                                if since.elapsed() < SETTLE_WAIT {
                                    continue;
                                }
                            }
                            settling.remove(&approval.id);
                            let kind = if approval.status.as_str() == "expired" {
                                "expired"
                            } else {
                                "decided"
                            };
                            let _ = watcher.send(Change {
                                kind,
                                approval: approval_view(&approval),
                                owner: approval.owner.clone(),
                            });
                        }
                    }
                }
                first = false;
                known = now;
                tokio::time::sleep(POLL).await;
            }
        });
        Events { sender }
    }

    /// Every change from now on.
    pub(crate) fn receiver(&self) -> broadcast::Receiver<Change> {
        self.sender.subscribe()
    }

    /// The stream one subscriber reads: every change, or (`only`: an agent's
    /// principal) the changes of that principal's own approvals.
    pub(crate) fn subscribe(
        &self,
        only: Option<Principal>,
    ) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>> + use<>> {
        let receiver = self.sender.subscribe();
        let stream = futures_util::stream::unfold(receiver, move |mut receiver| {
            let only = only.clone();
            async move {
                let event = loop {
                    match receiver.recv().await {
                        Ok(change) => {
                            if only
                                .as_ref()
                                .is_some_and(|principal| !principal.owns(change.owner.as_deref()))
                            {
                                continue;
                            }
                            let data = json!({"type": change.kind, "approval": change.approval});
                            break Event::default().event(change.kind).data(data.to_string());
                        }
                        // A slow subscriber missed some: it is told to reload.
                        Err(broadcast::error::RecvError::Lagged(_)) => {
                            break Event::default().event("resync").data("{}");
                        }
                        Err(broadcast::error::RecvError::Closed) => return None,
                    }
                };
                Some((Ok(event), receiver))
            }
        });
        Sse::new(stream).keep_alive(KeepAlive::default())
    }
}
