//! The client behind a forwarded request: whose progress token the
//! upstream's progress goes to, whose cancellation cancels the upstream
//! request, and whom the upstream's own requests (sampling, elicitation,
//! roots) are put to while it runs.
//!
//! The broker runs a session's call on the session's own thread
//! (`block_in_place`) and forwards it from there, so the session names its
//! client in a thread-local for the duration of the call, and the forwarder
//! reads it. A call forwarded from elsewhere (approved on another thread)
//! has no caller: it runs without progress or cancellation, and the
//! upstream's requests during it go to the only session if there is one.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Mutex;

use rmcp::model::{ProgressToken, RequestId};
use tokio_util::sync::CancellationToken;

use crate::hub::Client;

/// The session a forwarded request is made for.
#[derive(Clone)]
pub(crate) struct Caller {
    pub client: Client,
    /// The id of the client's own request (an upstream's request to the
    /// client goes out on that request's stream), if there is one.
    pub request: Option<RequestId>,
    /// The client's progress token, if it asked for progress.
    pub progress_token: Option<ProgressToken>,
    /// Cancelled when the client cancels its request.
    pub cancelled: CancellationToken,
    /// The roots of the session the call runs in (absolute directories),
    /// which an upstream's `roots/list` is answered with; `None`: the
    /// implicit default session, whose roots are the client's inside the
    /// workspace.
    pub session_roots: Option<Vec<std::path::PathBuf>>,
}

thread_local! {
    static CURRENT: RefCell<Option<Caller>> = const { RefCell::new(None) };
}

/// Runs `work` with `caller` as the current caller of this thread.
pub(crate) fn with_caller<T>(caller: Caller, work: impl FnOnce() -> T) -> T {
    struct Reset(Option<Caller>);
    impl Drop for Reset {
        fn drop(&mut self) {
            let previous = self.0.take();
            CURRENT.with(|current| *current.borrow_mut() = previous);
        }
    }
    let previous = CURRENT.with(|current| current.borrow_mut().replace(caller));
    let _reset = Reset(previous);
    work()
}

/// This thread's current caller, if a session set one.
pub(crate) fn current() -> Option<Caller> {
    CURRENT.with(|current| current.borrow().clone())
}

/// The requests in flight to one upstream, by the id and the progress
/// token they went with (rmcp gives each request a token of its own, unique
/// on the connection).
#[derive(Default)]
pub(crate) struct InFlight {
    calls: Mutex<HashMap<RequestId, Caller>>,
    progress: Mutex<HashMap<ProgressToken, Caller>>,
}

/// Removes a request from [`InFlight`] when it ends.
pub(crate) struct Flying<'a> {
    in_flight: &'a InFlight,
    id: Option<RequestId>,
    token: ProgressToken,
}

impl Drop for Flying<'_> {
    fn drop(&mut self) {
        if let Some(id) = &self.id
            && let Ok(mut calls) = self.in_flight.calls.lock()
        {
            calls.remove(id);
        }
        if let Ok(mut progress) = self.in_flight.progress.lock() {
            progress.remove(&self.token);
        }
    }
}

impl InFlight {
    /// Records a request sent with `token` (and, once known, `id`).
    pub(crate) fn start(&self, token: ProgressToken, caller: &Caller) -> Flying<'_> {
        if let Ok(mut progress) = self.progress.lock() {
            progress.insert(token.clone(), caller.clone());
        }
        Flying {
            in_flight: self,
            id: None,
            token,
        }
    }

    /// The request of `flying` went out as `id`.
    pub(crate) fn sent(&self, flying: &mut Flying<'_>, id: RequestId, caller: &Caller) {
        if let Ok(mut calls) = self.calls.lock() {
            calls.insert(id.clone(), caller.clone());
        }
        flying.id = Some(id);
    }

    /// The caller whose request sent `token`.
    pub(crate) fn by_token(&self, token: &ProgressToken) -> Option<Caller> {
        self.progress.lock().ok()?.get(token).cloned()
    }

    /// The caller of the request `id`.
    pub(crate) fn by_request(&self, id: &RequestId) -> Option<Caller> {
        self.calls.lock().ok()?.get(id).cloned()
    }

    /// The one session with requests in flight, if exactly one has.
    pub(crate) fn only_session(&self) -> Option<Caller> {
        let calls = self.calls.lock().ok()?;
        let mut callers = calls.values();
        let first = callers.next()?;
        callers
            .all(|other| other.client.session == first.client.session)
            .then(|| first.clone())
    }
}
