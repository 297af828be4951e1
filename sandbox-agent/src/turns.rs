//! The turns of a stepwise command (`RunPhase.stepwise`): the phase runs in segments, each only
//! once the controller granted it (`Turn`), and says when one ends (`PhaseYielded`), so the
//! controller can interleave single runs of two sandboxes, or start them at once (duet). A
//! command that is not stepwise never waits.
//!
//! Segment `k` (from 1) may run once turn `k` is granted; a segment ends at each yield point
//! ([`crate::context::PhaseContext::yield_turn`]: after each timed run of a repeated step), and
//! the last one with the command's end. Turns only grow, so a repeated or late `Turn` (a resend
//! after a reconnection) changes nothing, and an agent restarted mid-command runs the segments
//! already granted without waiting.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::journal::lock;

/// How often a waiting segment looks at its command's cancel flag.
const CANCEL_POLL: Duration = Duration::from_millis(50);

#[derive(Debug, Default)]
pub struct Turns {
    stepwise: bool,
    granted: Mutex<u32>,
    changed: Condvar,
    /// Segments ended so far.
    ended: AtomicU32,
}

impl Turns {
    pub fn new(stepwise: bool) -> Turns {
        Turns { stepwise, ..Turns::default() }
    }

    pub fn stepwise(&self) -> bool {
        self.stepwise
    }

    /// The controller's word: segments up to `index` may run.
    pub fn grant(&self, index: u32) {
        let mut granted = lock(&self.granted);
        if index > *granted {
            *granted = index;
            self.changed.notify_all();
        }
    }

    /// Waits until segment `index` may run; false when `cancel` was set first. At once when not
    /// stepwise.
    pub fn wait(&self, index: u32, cancel: &AtomicBool) -> bool {
        if !self.stepwise {
            return true;
        }
        let mut granted = lock(&self.granted);
        loop {
            if *granted >= index {
                return true;
            }
            if cancel.load(Ordering::Relaxed) {
                return false;
            }
            granted =
                self.changed.wait_timeout(granted, CANCEL_POLL).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// Ends the current segment: its index (from 1), whose end the controller is told.
    pub fn end_segment(&self) -> u32 {
        self.ended.fetch_add(1, Ordering::Relaxed) + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_segment_waits_for_its_turn_and_turns_only_grow() {
        let turns = Arc::new(Turns::new(true));
        let cancel = AtomicBool::new(false);
        let waiting = {
            let turns = turns.clone();
            std::thread::spawn(move || turns.wait(2, &AtomicBool::new(false)))
        };
        turns.grant(1);
        std::thread::sleep(Duration::from_millis(100));
        assert!(!waiting.is_finished(), "turn 1 does not let segment 2 run");
        turns.grant(3);
        assert!(waiting.join().unwrap());
        turns.grant(1);
        assert!(turns.wait(3, &cancel), "an older turn takes nothing back");
        assert_eq!((turns.end_segment(), turns.end_segment()), (1, 2));
    }

    #[test]
    fn a_canceled_command_stops_waiting_and_a_plain_one_never_waits() {
        let turns = Turns::new(true);
        assert!(!turns.wait(1, &AtomicBool::new(true)));
        assert!(Turns::new(false).wait(7, &AtomicBool::new(false)));
    }
}
