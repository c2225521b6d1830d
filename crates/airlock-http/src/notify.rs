//! Webhooks (`notify.webhooks`): each approval event a hook asked for is
//! POSTed to its URL as JSON, new approvals with their signed approve/deny
//! links. The events are read from the feed with a cursor of their own
//! (from the server's start on), so none is missed or sent twice.
//! Deliveries run on their own tasks, retried with backoff; a failure is
//! logged and never holds up an approval or a decision.

use std::sync::Arc;
use std::time::Duration;

use airlock_broker::{EventKind, Runtime};
use airlock_core::config::WebhookEvent;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

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
    // The one outbound client (https trusting tls.ca_file too); it follows
    // no redirect, so a hook does not get to hand the links on.
    let ca_file = runtime.broker().ca_file();
    let client = match airlock_net::http_client(ca_file.as_deref())
        .map_err(|error| error.to_string())
        .and_then(|builder| {
            builder
                .timeout(ATTEMPT_TIMEOUT)
                .build()
                .map_err(|error| error.to_string())
        }) {
        Ok(client) => client,
        Err(error) => {
            eprintln!("airlock: webhooks are off: cannot make an HTTP client: {error}");
            return;
        }
    };
    let events = events.clone();
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    // From the server's start on: taken now, so nothing made after it is
    // missed.
    let Ok(start) = runtime.broker().cursor() else {
        eprintln!("airlock: webhooks are off: cannot read the event feed");
        return;
    };
    tokio::spawn(async move {
        let mut cursor = start.seq;
        loop {
            for change in events.after(cursor).await {
                cursor = change.seq;
                if let Some(event) = hook_event(&change)
                    && !deliver_all(&runtime, &client, &slots, &links, &base, &change, event).await
                {
                    return;
                }
            }
        }
    });
}

/// The hook event a feed event is: a new approval, an outcome (denied,
/// applied, failed, cancelled; an approval is told once, when its outcome
/// is known), or an expiry.
fn hook_event(change: &Change) -> Option<WebhookEvent> {
    match change.kind {
        EventKind::ApprovalCreated => Some(WebhookEvent::Created),
        EventKind::ApprovalDecided if change.data["status"] == "denied" => {
            Some(WebhookEvent::Decided)
        }
        EventKind::ApprovalApplied | EventKind::ApprovalFailed | EventKind::ApprovalCancelled => {
            Some(WebhookEvent::Decided)
        }
        EventKind::ApprovalExpired => Some(WebhookEvent::Expired),
        _ => None,
    }
}

/// Starts the deliveries of `change` to the hooks that asked for `event`;
/// `false` when no more can be started.
async fn deliver_all(
    runtime: &Arc<Runtime>,
    client: &reqwest::Client,
    slots: &Arc<Semaphore>,
    links: &Links,
    base: &str,
    change: &Change,
    event: WebhookEvent,
) -> bool {
    let broker = runtime.broker();
    let config = broker.config();
    let hooks: Vec<String> = config
        .notify
        .webhooks
        .iter()
        .filter(|hook| hook.events.contains(&event))
        .map(|hook| hook.url.clone())
        .collect();
    if hooks.is_empty() {
        return true;
    }
    let body = Arc::new(payload(change, event, links, base).to_string());
    for url in hooks {
        // Several instances on one store read the same event: one sends it.
        let claim = {
            let (broker, url, seq) = (runtime.broker(), url.clone(), change.seq);
            tokio::task::spawn_blocking(move || broker.claim_delivery(seq, &url)).await
        };
        // Unsure whether another sends it (the claim failed): better twice
        // than never.
        if let Ok(Ok(false)) = claim {
            continue;
        }
        // A slot before the task: when hooks are slow, reading the feed
        // waits (the events stay in the feed), rather than tasks piling up.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return false;
        };
        let client = client.clone();
        let body = body.clone();
        tokio::spawn(async move {
            deliver(&client, &url, &body).await;
            drop(slot);
        });
    }
    true
}

/// What a hook receives: the event, the approval as the API shows it, the
/// web UI's address, and for a new approval its signed links (`null` where
/// links are not offered: the risk names its approvers, or only the
/// requesting user may decide).
fn payload(change: &Change, event: WebhookEvent, links: &Links, base: &str) -> Value {
    let approval = change.approval.clone().unwrap_or(Value::Null);
    let links = if event == WebhookEvent::Created {
        links.for_view(&approval, change.open_to_links)
    } else {
        None
    };
    let name = match event {
        WebhookEvent::Created => "created",
        WebhookEvent::Decided => "decided",
        WebhookEvent::Expired => "expired",
    };
    json!({
        "event": name,
        "seq": change.seq,
        "status": change.data.get("status"),
        "approval": approval,
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
