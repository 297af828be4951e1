//! A phase command's id: the phase, the trial, and which rerun it is. Its text is the command id
//! on the wire and in the run directory (`observations.jsonl`): `measure-1` for trial 1 of
//! measure as a run asks for it (one per phase and trial, so a repeated request is the same
//! command and the agent runs it once), `measure-1-rerun2` for the second rerun a person asked
//! for (`sandbench phase`). [`StepId`] prints and parses exactly those.

use std::fmt;
use std::str::FromStr;

use crate::phase::Phase;

/// One phase command of a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StepId {
    pub phase: Phase,
    pub trial: u32,
    /// 0 for the command of a run; `n` for the n-th rerun asked for by hand (from 1).
    pub rerun: u32,
}

impl StepId {
    /// The command of trial `trial` of `phase`, as a run asks for it.
    pub const fn new(phase: Phase, trial: u32) -> StepId {
        StepId { phase, trial, rerun: 0 }
    }

    /// The `n`-th rerun (from 1) of the same phase and trial.
    pub const fn rerun(self, n: u32) -> StepId {
        StepId { rerun: n, ..self }
    }

    /// Whether this is the command a run asks for (no rerun).
    pub const fn is_run_command(self) -> bool {
        self.rerun == 0
    }

    /// The id of the command that grants this one's turns (`turn-measure-1`).
    pub fn turn_id(self) -> String {
        format!("turn-{self}")
    }
}

impl fmt::Display for StepId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.phase, self.trial)?;
        if self.rerun > 0 {
            write!(f, "-rerun{}", self.rerun)?;
        }
        Ok(())
    }
}

/// A command id that is no phase command's (a turn's, a benchmark's stream, a mistyped one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotAStep(pub String);

impl fmt::Display for NotAStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} is not a phase command's id (`<phase>-<trial>`, `<phase>-<trial>-rerun<n>`)", self.0)
    }
}

impl std::error::Error for NotAStep {}

/// A number as [`StepId`] prints it: decimal digits, no sign, no leading zero.
fn number(text: &str) -> Option<u32> {
    let canonical =
        !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) && (text == "0" || !text.starts_with('0'));
    canonical.then(|| text.parse().ok()).flatten()
}

impl FromStr for StepId {
    type Err = NotAStep;

    fn from_str(id: &str) -> Result<StepId, NotAStep> {
        let parse = || {
            let (head, rerun) = match id.rsplit_once("-rerun") {
                Some((head, n)) => (head, number(n).filter(|n| *n > 0)?),
                None => (id, 0),
            };
            let (phase, trial) = head.rsplit_once('-')?;
            Some(StepId { phase: phase.parse().ok()?, trial: number(trial)?, rerun })
        };
        parse().ok_or_else(|| NotAStep(id.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::StepId;
    use crate::phase::Phase;

    #[test]
    fn a_step_id_prints_and_parses_as_the_command_id() {
        let measure = StepId::new(Phase::Measure, 1);
        assert_eq!(measure.to_string(), "measure-1");
        assert_eq!(measure.rerun(2).to_string(), "measure-1-rerun2");
        assert_eq!(StepId::new(Phase::Ui, 0).to_string(), "ui-0");
        assert_eq!(measure.turn_id(), "turn-measure-1");
        assert!(measure.is_run_command() && !measure.rerun(1).is_run_command());
        for phase in Phase::KNOWN {
            for step in [StepId::new(phase, 0), StepId::new(phase, 17), StepId::new(phase, u32::MAX).rerun(3)] {
                assert_eq!(step.to_string().parse::<StepId>(), Ok(step), "{step}");
            }
        }
        assert_eq!("install-3".parse::<StepId>(), Ok(StepId::new(Phase::Install, 3)));
    }

    #[test]
    fn anything_else_is_no_step_id() {
        for id in [
            "",
            "measure",
            "measure-",
            "-1",
            "deploy-1",
            "Measure-1",
            "measure-01",
            "measure-+1",
            "measure-1-rerun0",
            "measure-1-rerun",
            "measure-1-rerun02",
            "measure-4294967296",
            "turn-measure-1",
            "bench-3-stream",
            "measure-1 ",
        ] {
            assert!(id.parse::<StepId>().is_err(), "{id:?}");
        }
        let err = "turn-measure-1".parse::<StepId>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "\"turn-measure-1\" is not a phase command's id (`<phase>-<trial>`, `<phase>-<trial>-rerun<n>`)"
        );
    }
}
