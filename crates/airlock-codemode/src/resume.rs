//! Runs that stopped at a call waiting for a human, kept for
//! `codemode_eval {resume: run_id}` (DESIGN §5.2).
//!
//! A client that cannot be asked mid-run gets `hitl_required` with the run's
//! id. Resumed, the script runs again from the start with the same seed and
//! clock: the calls it made before are checked against the log (another
//! tool or other arguments at the same place is `replay_divergence`), the
//! built-in file tools run again (they only read or stage, and so rebuild
//! the run's staged changes and read set against the disk as it is now),
//! every other call's logged result is replayed, and the call that waited
//! is carried out once, through its approval, when a human has approved it.
//!
//! Kept in memory: only the process that holds an upstream connection can
//! carry out an approved upstream call, so a suspended run is only ever
//! resumable where it ran.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use crate::driver::Reply;

/// The most runs kept waiting at once; the oldest goes first.
const MAX_SUSPENDED: usize = 64;

/// One call of a run, as its replay checks it.
#[derive(Debug, Clone)]
pub(crate) struct Logged {
    pub tool: String,
    pub args_sha256: String,
    /// What the script was answered; `None` where the call runs again on
    /// replay (a built-in file tool).
    pub reply: Option<Reply>,
}

/// The call a run stopped at.
#[derive(Debug, Clone)]
pub(crate) struct WaitingCall {
    pub seq: u32,
    pub tool: String,
    pub args_sha256: String,
    pub hitl_id: String,
}

/// A run waiting to be resumed.
#[derive(Debug, Clone)]
pub(crate) struct Suspended {
    pub run_id: String,
    /// Who may resume it: the principal that ran it, in its session, with
    /// the same tool (and so the same profiles).
    pub owner: String,
    pub session: Option<String>,
    pub tool: String,
    pub profile: Option<String>,
    /// The script, fences stripped.
    pub code: String,
    pub description: Option<String>,
    pub seed: u64,
    pub now_ms: u64,
    pub log: BTreeMap<u32, Logged>,
    pub waiting: WaitingCall,
    /// When the waiting call's approval expires; the run is forgotten then.
    pub expires_ms: u64,
}

/// The runs waiting to be resumed, by run id.
#[derive(Debug, Default)]
pub(crate) struct Suspensions {
    runs: Mutex<HashMap<String, (u64, Suspended)>>,
    next: Mutex<u64>,
}

/// Why a run cannot be resumed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// No such run waits for this caller (or it expired).
    NotFound,
    /// It waits, but under another tool or profile.
    Mismatch(&'static str),
}

impl Suspensions {
    pub(crate) fn keep(&self, run: Suspended) {
        let order = {
            let Ok(mut next) = self.next.lock() else {
                return;
            };
            *next += 1;
            *next
        };
        let Ok(mut runs) = self.runs.lock() else {
            return;
        };
        if runs.len() >= MAX_SUSPENDED
            && let Some(oldest) = runs
                .iter()
                .min_by_key(|(_, (order, _))| *order)
                .map(|(id, _)| id.clone())
        {
            runs.remove(&oldest);
        }
        runs.insert(run.run_id.clone(), (order, run));
    }

    /// Takes run `run_id` out for `owner` to resume now; a run that is
    /// someone else's is not found (and stays).
    pub(crate) fn take(
        &self,
        run_id: &str,
        owner: &str,
        session: Option<&str>,
        tool: &str,
        profile: Option<&str>,
        now_ms: u64,
    ) -> Result<Suspended, Refused> {
        let Ok(mut runs) = self.runs.lock() else {
            return Err(Refused::NotFound);
        };
        runs.retain(|_, (_, run)| run.expires_ms > now_ms);
        let Some((_, run)) = runs.get(run_id) else {
            return Err(Refused::NotFound);
        };
        if run.owner != owner || run.session.as_deref() != session {
            return Err(Refused::NotFound);
        }
        if run.tool != tool {
            return Err(Refused::Mismatch("it ran under another code-mode tool"));
        }
        if run.profile.as_deref() != profile {
            return Err(Refused::Mismatch("it ran under another profile"));
        }
        runs.remove(run_id)
            .map(|(_, run)| run)
            .ok_or(Refused::NotFound)
    }
}
