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
/// The most one caller keeps waiting; its own oldest goes first, so no
/// caller can push out another's.
const MAX_PER_OWNER: usize = 8;
/// The largest run kept (its script and logged results); a larger one
/// cannot be resumed.
const MAX_RUN_BYTES: usize = 8 << 20;
/// The most all kept runs hold; the oldest go first.
const MAX_TOTAL_BYTES: usize = 64 << 20;

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

impl Suspended {
    /// About what it holds, in bytes.
    fn size(&self) -> usize {
        let logged: usize = self
            .log
            .values()
            .map(|logged| {
                logged.tool.len()
                    + logged.args_sha256.len()
                    + match &logged.reply {
                        Some(Reply::Settle { payload, .. }) => payload.len(),
                        Some(Reply::End { message, .. }) => message.len(),
                        None => 0,
                    }
            })
            .sum();
        self.code.len() + self.description.as_ref().map_or(0, String::len) + logged
    }
}

impl Suspensions {
    /// Keeps `run` to resume; `false` when it is too large to keep.
    pub(crate) fn keep(&self, run: Suspended) -> bool {
        let size = run.size();
        if size > MAX_RUN_BYTES {
            return false;
        }
        let order = {
            let Ok(mut next) = self.next.lock() else {
                return false;
            };
            *next += 1;
            *next
        };
        let Ok(mut runs) = self.runs.lock() else {
            return false;
        };
        let oldest = |runs: &HashMap<String, (u64, Suspended)>, owner: Option<&str>| {
            runs.iter()
                .filter(|(_, (_, kept))| owner.is_none_or(|owner| kept.owner == owner))
                .min_by_key(|(_, (order, _))| *order)
                .map(|(id, _)| id.clone())
        };
        while runs
            .values()
            .filter(|(_, kept)| kept.owner == run.owner)
            .count()
            >= MAX_PER_OWNER
        {
            match oldest(&runs, Some(&run.owner)) {
                Some(id) => runs.remove(&id),
                None => break,
            };
        }
        while runs.len() >= MAX_SUSPENDED
            || runs.values().map(|(_, kept)| kept.size()).sum::<usize>() + size > MAX_TOTAL_BYTES
        {
            match oldest(&runs, None) {
                Some(id) => runs.remove(&id),
                None => break,
            };
        }
        runs.insert(run.run_id.clone(), (order, run));
        true
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

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, owner: &str, code_bytes: usize) -> Suspended {
        Suspended {
            run_id: id.to_owned(),
            owner: owner.to_owned(),
            session: None,
            tool: "codemode_eval".to_owned(),
            profile: None,
            code: "x".repeat(code_bytes),
            description: None,
            seed: 1,
            now_ms: 1,
            log: BTreeMap::new(),
            waiting: WaitingCall {
                seq: 1,
                tool: "up__t".to_owned(),
                args_sha256: String::new(),
                hitl_id: "hitl-1".to_owned(),
            },
            expires_ms: u64::MAX,
        }
    }

    fn take(kept: &Suspensions, id: &str, owner: &str) -> Result<Suspended, Refused> {
        kept.take(id, owner, None, "codemode_eval", None, 0)
    }

    #[test]
    fn a_run_is_its_caller_s_and_taken_once() {
        let kept = Suspensions::default();
        assert!(kept.keep(run("r1", "alice", 10)));
        assert_eq!(take(&kept, "r1", "bob").err(), Some(Refused::NotFound));
        assert_eq!(
            kept.take("r1", "alice", None, "codemode_eval_safe", None, 0)
                .err(),
            Some(Refused::Mismatch("it ran under another code-mode tool"))
        );
        assert!(take(&kept, "r1", "alice").is_ok());
        assert_eq!(take(&kept, "r1", "alice").err(), Some(Refused::NotFound));
        // Expired runs are forgotten.
        let mut old = run("r2", "alice", 10);
        old.expires_ms = 5;
        assert!(kept.keep(old));
        assert_eq!(
            kept.take("r2", "alice", None, "codemode_eval", None, 5)
                .err(),
            Some(Refused::NotFound)
        );
    }

    #[test]
    fn one_caller_cannot_push_out_another_s_runs() {
        let kept = Suspensions::default();
        assert!(kept.keep(run("bob-1", "bob", 10)));
        for i in 0..100 {
            assert!(kept.keep(run(&format!("mallory-{i}"), "mallory", 10)));
        }
        assert!(take(&kept, "bob-1", "bob").is_ok());
        // Mallory keeps her newest 8.
        assert!(take(&kept, "mallory-99", "mallory").is_ok());
        assert!(take(&kept, "mallory-92", "mallory").is_ok());
        assert_eq!(
            take(&kept, "mallory-91", "mallory").err(),
            Some(Refused::NotFound)
        );
    }

    #[test]
    fn what_is_kept_is_bounded_in_bytes() {
        let kept = Suspensions::default();
        assert!(!kept.keep(run("huge", "alice", MAX_RUN_BYTES + 1)));
        for i in 0..10 {
            assert!(kept.keep(run(
                &format!("big-{i}"),
                &format!("owner-{i}"),
                MAX_RUN_BYTES
            )));
        }
        let held = (0..10)
            .filter(|i| take(&kept, &format!("big-{i}"), &format!("owner-{i}")).is_ok())
            .count();
        assert_eq!(held, MAX_TOTAL_BYTES / MAX_RUN_BYTES);
    }
}
