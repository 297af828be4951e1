//! One side of a pair as the walk keeps it: its label, its first sandbox, and what renewal left
//! (the sandbox that replaced the first one after an engine restart, and the ended one's record).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use sandbench_proto::Placement;

use super::super::accounting::role;
use super::super::output::Measured;
use super::super::schedule::{Side, label};
use super::super::usage::Meter;
use crate::report::SandboxRecord;
use crate::station::session::Session;

/// One sandbox of a pair and what it went through.
pub struct SideRun {
    pub side: Side,
    pub label: String,
    pub pair: usize,
    /// Its side, pair and the run's attempt, as its sandboxes carry them.
    pub placement: Placement,
    pub live: Option<Session>,
    pub meter: Arc<Meter>,
    /// A new sandbox after an engine restart, and what the side's first one left.
    pub renewal: Renewal,
}

/// What a side keeps of its sandboxes beyond the first.
#[derive(Default)]
pub struct Renewal {
    /// The sandbox that replaced the first one, and its meter.
    pub replacement: Mutex<Option<(Session, Arc<Meter>)>>,
    /// Sandboxes ended before the run's teardown (the replaced one).
    pub records: Mutex<Vec<SandboxRecord>>,
    /// The engine's outages when the sandbox was last known to run.
    pub epoch: AtomicU64,
    /// The side had its retry.
    pub retried: AtomicBool,
}

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SideRun {
    /// The `wanted` sides (both, or base alone in a record) of every pair, each with its
    /// sandbox's role in this attempt.
    pub fn all(pairs: usize, wanted: &[Side], attempt: u32) -> Vec<SideRun> {
        (0..pairs)
            .flat_map(|pair| {
                wanted.iter().map(move |&side| SideRun {
                    side,
                    label: role(&label(side, pair, pairs), attempt),
                    pair,
                    placement: Placement { side, pair: u32::try_from(pair).unwrap_or(u32::MAX), attempt },
                    live: None,
                    meter: Meter::new(),
                    renewal: Default::default(),
                })
            })
            .collect()
    }

    /// The sandbox the side runs in now: the replacement, if there is one.
    pub fn current(&self) -> Option<Session> {
        lock(&self.renewal.replacement).as_ref().map(|(live, _)| live.clone()).or_else(|| self.live.clone())
    }

    /// The sandbox the side runs in now and its meter.
    pub fn current_with_meter(&self) -> Option<(Session, Arc<Meter>)> {
        lock(&self.renewal.replacement).clone().or_else(|| self.live.clone().map(|l| (l, self.meter.clone())))
    }

    /// Every sandbox the side ran in, first to last, as its samples are collected: the first
    /// with what it said at Hello.
    pub fn measured(&self) -> Vec<Measured> {
        let replacement = lock(&self.renewal.replacement).as_ref().map(|(s, _)| s.id().to_string());
        let first = self.live.iter().map(|s| Measured {
            id: s.id().to_string(),
            side: self.side,
            hello: Some(s.live().hello.clone()),
        });
        first.chain(replacement.map(|id| Measured { id, side: self.side, hello: None })).collect()
    }

    /// The records of sandboxes ended before the run's teardown.
    pub fn ended_records(&self) -> Vec<SandboxRecord> {
        lock(&self.renewal.records).clone()
    }

    /// The sandbox ran through a trial with the engine's outages at `outages`.
    pub fn seen_running(&self, outages: u64) {
        self.renewal.epoch.store(outages, Ordering::SeqCst);
    }
}

/// Every sandbox of these sides, as their samples are collected.
pub fn measured(sides: &[SideRun]) -> Vec<Measured> {
    sides.iter().flat_map(SideRun::measured).collect()
}
