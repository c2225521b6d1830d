//! Webhooks (`notify.webhooks`): each approval event a hook asked for is
//! POSTed to its URL as JSON, new approvals with their signed approve/deny
//! links. Deliveries run on their own tasks, retried with backoff; a failure
//! is logged and never holds up an approval or a decision.

use std::sync::Arc;
use std::time::Duration;

use airlock_broker::Runtime;
use airlock_core::config::WebhookEvent;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, broadcast};

use crate::events::{Change, Events};
use crate::links::Links;

/// Attempts per delivery, and the wait before the first retry (doubled each
/// time after).
const ATTEMPTS: u32 = 5;
const FIRST_RETRY: Duration = Duration::from_millis(500);
/// One attempt's limit.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// Deliveries in flight at once; more wait their turn.
const IN_FLIGHT: usize = 32;

/// Starts delivering the events of `events` to the hooks of the
/// configuration in force (a reload applies to the next event).
pub(crate) fn start(runtime: Arc<Runtime>, events: &Events, links: Links, base: String) {
    // A hook that redirects does not get to hand the links on.
    let client = match reqwest::Client::builder()
        .timeout(ATTEMPT_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("airlock/", env!("CARGO_PKG_VERSION")))
        .build()
    {
        Ok(client) => client,
        Err(error) => {
            eprintln!("airlock: webhooks are off: cannot make an HTTP client: {error}");
            return;
        }
    };
    let mut receiver = events.receiver();
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    tokio::spawn(async move {
        loop {
            let change = match receiver.recv().await {
                Ok(change) => change,
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    eprintln!("airlock: webhooks: {missed} events were dropped (too many at once)");
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            };
            let broker = runtime.broker();
            let config = broker.config();
            let event = match change.kind {
                "created" => WebhookEvent::Created,
                "decided" => WebhookEvent::Decided,
                _ => WebhookEvent::Expired,
            };
            let hooks: Vec<String> = config
                .notify
                .webhooks
                .iter()
                .filter(|hook| hook.events.contains(&event))
                .map(|hook| hook.url.clone())
                .collect();
            if hooks.is_empty() {
                continue;
            }
            let body = Arc::new(payload(&change, &links, config, &base).to_string());
            for url in hooks {
                // A slot before the task: when hooks are slow, this loop
                // waits, the channel lags, and the dropped events are
                // logged, rather than tasks piling up.
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                let client = client.clone();
                let body = body.clone();
                tokio::spawn(async move {
                    deliver(&client, &url, &body).await;
                    drop(slot);
                });
            }
        }
    });
}

/// What a hook receives: the event, the approval as the API shows it, the
/// web UI's address, and for a new approval its signed links (`null` where
/// links are not offered: the risk names its approvers, or only the
/// requesting user may decide).
fn payload(
    change: &Change,
    links: &Links,
    config: &airlock_core::config::Config,
    base: &str,
) -> Value {
    let links = if change.kind == "created" {
        links.for_view(&change.approval, config)
    } else {
        None
    };
    json!({
        "event": change.kind,
        "approval": change.approval,
        "links": links,
        "ui": format!("{base}/"),
    })
}

/// POSTs `body` to `url` until a 2xx answer or [`ATTEMPTS`] tries.
async fn deliver(client: &reqwest::Client, url: &str, body: &Arc<String>) {
    let mut wait = FIRST_RETRY;
    for attempt in 1..=ATTEMPTS {
        let sent = client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.as_ref().clone())
            .send()
            .await;
        let problem = match sent {
            Ok(response) if response.status().is_success() => return,
            Ok(response) => format!("answered {}", response.status()),
            Err(error) => error.to_string(),
        };
        if attempt == ATTEMPTS {
            eprintln!("airlock: webhook {url}: {problem}; gave up after {ATTEMPTS} attempts");
            return;
        }
        eprintln!("airlock: webhook {url}: {problem}; retrying in {wait:?}");
        tokio::time::sleep(wait).await;
        wait = wait.saturating_mul(2);
    }
}
