//! The accounting under the whole run, pure over the run directory: who each sandbox is (its
//! role and side, as the hub registered them, [`Roster`]) and which slots are complete.
//!
//! A slot (side × phase × trial) is complete when `observations.jsonl` holds a `phase_done`
//! event for its command (`<phase>-<trial>`) from a sandbox of that side. The agent sends it
//! after every other event of the trial and the controller fsyncs events in order before
//! acknowledging them, so a completed trial's observations are all in the log before its
//! `phase_done`: that event is the durable "trial done" record. The first completion of a slot
//! is the one counted ([`Accounting::counts`]); a trial cut mid-way in an earlier attempt (some
//! observations, no `phase_done`) is run again and its partial observations are left out, as
//! are those of the install a resumed sandbox runs, untimed, to have an installation of its own.
//!
//! A resumed run's sandboxes are named `<role>-r<attempt>` (`base-r2`), so their events never mix
//! with those of the dead attempt's sandboxes in the log.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use sandbench_proto::{Phase, StepId};

use super::gate::TrialResult;
use super::schedule::{Side, Slot, Stage};
use crate::observations::server::{Registration, registrations};
use crate::observations::store::StoredBody;

/// The role of a pair's sandbox in an attempt: the label, then `-r<attempt>` from the second.
pub fn role(label: &str, attempt: u32) -> String {
    if attempt <= 1 { label.to_string() } else { format!("{label}-r{attempt}") }
}

/// Who the sandboxes of a run directory are: each one's role and place in the run as the hub
/// registered them ([`registrations`]). A run directory written before registrations kept
/// them tells its sandboxes by their ids only, read as they were named then ([`legacy`]).
#[derive(Debug, Clone, Default)]
pub struct Roster {
    run_id: String,
    registered: HashMap<String, Registration>,
}

impl Roster {
    /// The roster of run `run_id` in `dir`.
    pub fn read(dir: &Path, run_id: &str) -> anyhow::Result<Roster> {
        Ok(Roster { run_id: run_id.to_string(), registered: registrations(dir)? })
    }

    /// The roster of a run directory whose registrations say nothing: every sandbox told by its id.
    pub fn unregistered(run_id: &str) -> Roster {
        Roster { run_id: run_id.to_string(), registered: HashMap::new() }
    }

    /// What the run directory kept of `sandbox` when registering it, if it kept its role.
    fn registered(&self, sandbox: &str) -> Option<&Registration> {
        self.registered.get(sandbox).filter(|r| r.role.is_some())
    }

    /// The side `sandbox` measured (none for a sandbox of no side).
    pub fn side(&self, sandbox: &str) -> Option<Side> {
        match self.registered(sandbox) {
            Some(registration) => registration.placement.map(|p| p.side),
            None => legacy::side(&self.run_id, sandbox),
        }
    }

    /// The role of `sandbox` in the run (`base`, `head1-r2`, …).
    pub fn role<'a>(&'a self, sandbox: &'a str) -> Option<&'a str> {
        match self.registered(sandbox) {
            Some(registration) => registration.role.as_deref(),
            None => legacy::role(&self.run_id, sandbox),
        }
    }
}

/// Sandboxes of run directories written before their registrations kept who they are: their
/// ids are `sandbench-<run>-<role>`, each role starting with its side (`base`, `head1-r2`).
mod legacy {
    use sandbench_proto::Side;

    pub fn role<'a>(run_id: &str, sandbox: &'a str) -> Option<&'a str> {
        sandbox.strip_prefix("sandbench-")?.strip_prefix(run_id)?.strip_prefix('-')
    }

    pub fn side(run_id: &str, sandbox: &str) -> Option<Side> {
        let role = role(run_id, sandbox)?;
        Side::BOTH.into_iter().find(|side| role.starts_with(side.as_str()))
    }
}

/// `install-3` → (`install`, 3): the slot of a run's phase command (a rerun by hand, or any other
/// command, is no slot's).
fn parse_command(command_id: &str) -> Option<(Phase, u32)> {
    let step = command_id.parse::<StepId>().ok().filter(|s| s.is_run_command())?;
    Some((step.phase, step.trial))
}

/// The first completion of a slot.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub sandbox: String,
    pub ok: bool,
    pub error: String,
}

/// Which slots a run directory's log holds as complete, and when each sandbox was last heard of.
#[derive(Debug, Default, Clone)]
pub struct Accounting {
    roster: Roster,
    done: BTreeMap<(Side, Phase, u32), Completion>,
    /// First and last event time per sandbox (unix ms).
    seen: BTreeMap<String, (u64, u64)>,
}

impl Accounting {
    /// Reads the log of `dir` (as a stream); an empty accounting when there is no log. A line
    /// that is not an event ends the reading there (what follows a torn line is not trusted).
    pub fn read(dir: &Path, run_id: &str) -> anyhow::Result<Accounting> {
        let roster = Roster::read(dir, run_id)?;
        let path = dir.join(crate::observations::store::OBSERVATIONS_FILE);
        if !path.exists() {
            return Ok(Accounting { roster, ..Accounting::default() });
        }
        let events = crate::observations::store::events(&path)?.map_while(Result::ok);
        Ok(Accounting::from_events(roster, events))
    }

    pub fn from_events(
        roster: Roster,
        events: impl IntoIterator<Item = crate::observations::store::StoredEvent>,
    ) -> Accounting {
        let mut accounting = Accounting { roster, ..Accounting::default() };
        for event in events {
            let seen = accounting.seen.entry(event.sandbox.clone()).or_insert((event.unix_ms, event.unix_ms));
            seen.0 = seen.0.min(event.unix_ms);
            seen.1 = seen.1.max(event.unix_ms);
            let StoredBody::PhaseDone { command_id, status, error } = event.body else { continue };
            let (Some(side), Some((name, trial))) =
                (accounting.roster.side(&event.sandbox), parse_command(&command_id))
            else {
                continue;
            };
            accounting.done.entry((side, name, trial)).or_insert(Completion {
                sandbox: event.sandbox,
                ok: status == "ok",
                error,
            });
        }
        accounting
    }

    pub fn completion(&self, side: Side, phase: Phase, trial: u32) -> Option<&Completion> {
        self.done.get(&(side, phase, trial))
    }

    /// How a slot ended, when it completed.
    pub fn result(&self, slot: &Slot) -> Option<TrialResult> {
        let done = self.completion(slot.side, slot.phase, slot.trial)?;
        Some(match done.ok {
            true => TrialResult::Ok,
            false => TrialResult::Failed {
                cause: if done.error.is_empty() { "failed".into() } else { done.error.clone() },
                lost: false,
            },
        })
    }

    /// The slots of `stages` not complete, in schedule order.
    pub fn missing(&self, stages: &[Stage]) -> Vec<Slot> {
        stages.iter().flat_map(|s| s.lanes.iter().flatten()).filter(|s| self.result(s).is_none()).copied().collect()
    }

    /// Whether an observation of `sandbox` in command `command_id` counts: it belongs to the
    /// slot's first completion, or, for a slot not complete, to a sandbox of this attempt
    /// (`current`: a trial that failed by its sandbox's loss still reports what it got).
    pub fn counts(&self, sandbox: &str, command_id: &str, current: bool) -> bool {
        let slot = self.roster.side(sandbox).zip(parse_command(command_id));
        match slot.and_then(|(side, (name, trial))| self.completion(side, name, trial)) {
            Some(done) => done.sandbox == sandbox,
            None => current,
        }
    }

    /// When the log first and last heard of `sandbox` (unix ms).
    pub fn seen(&self, sandbox: &str) -> Option<(u64, u64)> {
        self.seen.get(sandbox).copied()
    }

    /// The sandboxes the log heard of.
    pub fn sandboxes(&self) -> impl Iterator<Item = &String> {
        self.seen.keys()
    }

    /// Who the run directory's sandboxes are.
    pub fn roster(&self) -> &Roster {
        &self.roster
    }
}

/// What a resumed run carries into its walk.
#[derive(Debug, Clone)]
pub struct Resumed {
    pub attempt: u32,
    /// The slots complete before this attempt.
    pub accounting: Accounting,
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::observations::store::StoredEvent;
    use crate::run::schedule;

    const RUN: &str = "20261130-120000-abcdef";

    fn event(sandbox: &str, unix_ms: u64, body: StoredBody) -> StoredEvent {
        StoredEvent { sandbox: format!("sandbench-{RUN}-{sandbox}"), seq: unix_ms, unix_ms, body }
    }

    fn done(sandbox: &str, at: u64, command: &str, status: &str) -> StoredEvent {
        let body = StoredBody::PhaseDone { command_id: command.into(), status: status.into(), error: String::new() };
        event(sandbox, at, body)
    }

    fn observation(sandbox: &str, at: u64, command: &str) -> StoredEvent {
        let (name, trial) = parse_command(command).unwrap();
        let body = StoredBody::Observation {
            command_id: command.into(),
            metric: name.to_string(),
            trial,
            value: Some(1.0),
            error: None,
            unit: String::new(),
            sample: 0,
        };
        event(sandbox, at, body)
    }

    fn stages() -> Vec<Stage> {
        schedule::build(&[(Phase::Install, 2), (Phase::Measure, 3), (Phase::Runtime, 0)], 1)
    }

    fn names(slots: &[Slot]) -> Vec<String> {
        slots.iter().map(|s| format!("{}{}-{}", s.phase, s.trial, s.side.as_str())).collect()
    }

    #[test]
    fn a_slot_is_complete_with_its_phase_done_and_a_cut_trial_is_missing() {
        // Killed during head's measure trial 1: its observation is in the log, its phase_done is not.
        let log = vec![
            done("base", 1, "prepare-0", "ok"),
            done("head", 2, "prepare-0", "ok"),
            done("base", 3, "install-0", "ok"),
            done("head", 4, "install-0", "ok"),
            done("head", 5, "install-1", "failed"),
            done("base", 6, "install-1", "ok"),
            observation("base", 7, "measure-0"),
            done("base", 8, "measure-0", "ok"),
            done("head", 9, "measure-0", "ok"),
            observation("head", 10, "measure-1"),
        ];
        let accounting = Accounting::from_events(Roster::unregistered(RUN), log);
        assert_eq!(
            names(&accounting.missing(&stages())),
            ["measure1-head", "measure1-base", "measure2-base", "measure2-head"]
        );
        // A failed trial counts as done (its failure is not retried) and keeps its result.
        let failed = Slot { phase: Phase::Install, trial: 1, pair: 0, side: Side::Head };
        assert!(matches!(accounting.result(&failed), Some(TrialResult::Failed { lost: false, .. })));
        let sandbox = |role: &str| format!("sandbench-{RUN}-{role}");
        // The cut trial's observation is not counted; a complete one is.
        assert!(!accounting.counts(&sandbox("head"), "measure-1", false));
        assert!(accounting.counts(&sandbox("base"), "measure-0", false));
    }

    #[test]
    fn the_first_completion_counts_and_a_resumed_sandbox_s_reinstall_does_not() {
        let log = vec![
            done("base", 1, "install-0", "ok"),
            observation("base", 2, "measure-0"),
            // Resumed: base-r2 installs again (untimed), then runs the missing measure trial.
            observation("base-r2", 10, "install-0"),
            done("base-r2", 11, "install-0", "ok"),
            observation("base-r2", 12, "measure-0"),
            done("base-r2", 13, "measure-0", "ok"),
        ];
        let accounting = Accounting::from_events(Roster::unregistered(RUN), log);
        let sandbox = |role: &str| format!("sandbench-{RUN}-{role}");
        assert_eq!(accounting.completion(Side::Base, Phase::Install, 0).unwrap().sandbox, sandbox("base"));
        assert!(!accounting.counts(&sandbox("base-r2"), "install-0", true));
        assert!(accounting.counts(&sandbox("base"), "install-0", false));
        assert!(!accounting.counts(&sandbox("base"), "measure-0", false), "cut in the dead attempt");
        assert!(accounting.counts(&sandbox("base-r2"), "measure-0", true));
        // A trial of this attempt that never completed (its sandbox lost) still counts.
        assert!(accounting.counts(&sandbox("base-r2"), "measure-2", true));
        assert!(!accounting.counts(&sandbox("base"), "measure-2", false));
    }

    #[test]
    fn pairs_and_attempts_are_told_from_sandbox_ids() {
        // In a run directory written before registrations kept who each sandbox is.
        let roster = Roster::unregistered(RUN);
        assert_eq!(roster.side(&format!("sandbench-{RUN}-head1-r3")), Some(Side::Head));
        assert_eq!(roster.side(&format!("sandbench-{RUN}-base")), Some(Side::Base));
        assert_eq!(roster.side("sandbench-other-base"), None);
        assert_eq!(roster.role(&format!("sandbench-{RUN}-base0-r2")), Some("base0-r2"));
        assert_eq!(role("head0", 1), "head0");
        assert_eq!(role("head0", 2), "head0-r2");
        // With two pairs, a slot is complete whichever pair's sandbox ran it.
        let stages = schedule::build(&[(Phase::Measure, 2)], 2);
        let log = vec![done("base1", 1, "measure-1", "ok"), done("head0-r2", 2, "measure-0", "ok")];
        let accounting = Accounting::from_events(Roster::unregistered(RUN), log);
        assert_eq!(names(&accounting.missing(&stages)), ["measure0-base", "measure1-head"]);
    }

    #[test]
    fn a_rerun_by_hand_or_another_command_completes_no_slot() {
        let log = vec![
            done("base", 1, "measure-0-rerun1", "ok"),
            done("head", 2, "turn-measure-0", "ok"),
            done("head", 3, "measure-00", "ok"),
            done("head", 4, "bench-stream", "ok"),
        ];
        let accounting = Accounting::from_events(Roster::unregistered(RUN), log);
        assert_eq!(accounting.missing(&stages()).len(), 2 * (2 + 3));
        assert!(!accounting.counts(&format!("sandbench-{RUN}-base"), "measure-0-rerun1", false));
    }

    #[test]
    fn a_registered_sandbox_is_who_its_registration_says_whatever_its_name() {
        use sandbench_proto::Placement;

        use crate::observations::server::{Hub, HubConfig};
        let dir = tempfile::tempdir().unwrap();
        let hub = Hub::open(dir.path(), HubConfig::default()).unwrap();
        let placed = |role: &str, side| Registration {
            role: Some(role.into()),
            placement: Some(Placement { side, pair: 0, attempt: 1 }),
        };
        let sandbox = |role: &str| format!("sandbench-{RUN}-{role}");
        hub.register_as(&sandbox("a"), placed("a", Side::Head)).unwrap();
        hub.register_as(&sandbox("base-but-head"), placed("base-but-head", Side::Head)).unwrap();
        hub.register_as(&sandbox("base-debug"), Registration { role: Some("base-debug".into()), placement: None })
            .unwrap();
        let roster = Roster::read(dir.path(), RUN).unwrap();
        assert_eq!(roster.side(&sandbox("a")), Some(Side::Head));
        assert_eq!(roster.side(&sandbox("base-but-head")), Some(Side::Head));
        assert_eq!(roster.side(&sandbox("base-debug")), None, "registered without a place in the run");
        assert_eq!(roster.role(&sandbox("a")), Some("a"));
        // A sandbox the registrations do not know is told by its id, as in an old directory.
        assert_eq!(roster.side(&sandbox("base")), Some(Side::Base));
        // The accounting of that directory counts by those sides.
        let log = vec![done("a", 1, "measure-0", "ok"), done("base-but-head", 2, "measure-1", "ok")];
        let accounting = Accounting::from_events(roster, log);
        let measure = |trial, side| Slot { phase: Phase::Measure, trial, pair: 0, side };
        assert!(
            accounting.result(&measure(0, Side::Head)).is_some()
                && accounting.result(&measure(1, Side::Head)).is_some()
        );
        assert!(accounting.result(&measure(1, Side::Base)).is_none());
    }

    #[test]
    fn an_empty_log_misses_every_slot() {
        let all = Accounting::default().missing(&stages());
        assert_eq!(all.len(), 2 * (2 + 3));
    }
}
