//! The phases of a sandbox's work and what each needs before it. On the wire (`RunPhase.phase`,
//! `PhaseStarted.phase`), in the run directory and in reports a phase is its lowercase name,
//! `prepare`, `install`, …; [`Phase`] parses and prints exactly those names.
//!
//! This is the one place that says which phase needs which: [`Phase::needs`] (what must have
//! run in a sandbox before a trial of the phase) and [`Phase::follows`] (the phase a sandbox
//! takes right before it when a person steps through them, `sandbench debug`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One phase of a sandbox's work. Ordered as a run takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Builds the source as the builder, and its release artifacts.
    Prepare,
    /// The timed installation, as benchmark user `t + 1` in trial `t`.
    Install,
    /// Start-up, memory and footprint of the installed product.
    Measure,
    /// The spec's scenarios, commands and scripts against the installed product.
    Runtime,
    /// RESULT benches and scenarios run as the builder against the prepared source (not gated on
    /// an installation).
    Transport,
    /// Interactions with the installed product on generated fixtures (terminal and socket
    /// scenarios), gated on the first installation like measure and runtime.
    Ui,
    /// The agent's test phase, no spec's: it streams a number of observations for the delivery
    /// path's tests and benchmark (`sandbench bench`), so it is in neither [`Phase::ALL`] nor
    /// [`Phase::TIMED`].
    Synthetic,
}

impl Phase {
    /// Every phase of a spec, in the order a run takes them.
    pub const ALL: [Phase; 6] =
        [Phase::Prepare, Phase::Install, Phase::Measure, Phase::Runtime, Phase::Transport, Phase::Ui];
    /// The timed phases, in order.
    pub const TIMED: [Phase; 5] = [Phase::Install, Phase::Measure, Phase::Runtime, Phase::Transport, Phase::Ui];
    /// Every phase an agent runs: a spec's, and the synthetic one.
    pub const KNOWN: [Phase; 7] =
        [Phase::Prepare, Phase::Install, Phase::Measure, Phase::Runtime, Phase::Transport, Phase::Ui, Phase::Synthetic];

    /// The phase's name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Phase::Prepare => "prepare",
            Phase::Install => "install",
            Phase::Measure => "measure",
            Phase::Runtime => "runtime",
            Phase::Transport => "transport",
            Phase::Ui => "ui",
            Phase::Synthetic => "synthetic",
        }
    }

    /// A phase of a spec by its name: what a person may ask for (`sandbench debug --phase`,
    /// `sandbench phase`), so not the synthetic one.
    pub fn of_spec(name: &str) -> Result<Phase, UnknownPhase> {
        Phase::ALL.into_iter().find(|p| p.as_str() == name).ok_or_else(|| UnknownPhase(name.to_string()))
    }

    /// Whether its trials are timed (every phase of a spec but prepare).
    pub fn is_timed(self) -> bool {
        Phase::TIMED.contains(&self)
    }

    /// What must have run in a sandbox before a trial of this phase, in order, each once (its
    /// first trial): the prepared source for every phase of a spec, and the sandbox's first
    /// installation for the phases that use the installed product (measure, runtime, ui).
    /// Transport runs against the source build, so it needs no installation.
    pub const fn needs(self) -> &'static [Phase] {
        match self {
            Phase::Prepare | Phase::Synthetic => &[],
            Phase::Install | Phase::Transport => &[Phase::Prepare],
            Phase::Measure | Phase::Runtime | Phase::Ui => &[Phase::Prepare, Phase::Install],
        }
    }

    /// Whether a trial of this phase needs the sandbox's first installation.
    pub fn needs_install(self) -> bool {
        self.needs().contains(&Phase::Install)
    }

    /// The phase a sandbox takes right before this one when a person steps through a spec's
    /// phases: what it needs, and measure before runtime, as a run takes them.
    pub const fn follows(self) -> Option<Phase> {
        match self {
            Phase::Prepare | Phase::Synthetic => None,
            Phase::Install | Phase::Transport => Some(Phase::Prepare),
            Phase::Measure | Phase::Ui => Some(Phase::Install),
            Phase::Runtime => Some(Phase::Measure),
        }
    }

    /// The phase commands, (phase, trial), that bring a fresh sandbox to trial `trial` of this
    /// phase stepping through the phases it follows ([`Phase::follows`]): each of those at
    /// trial 0, then this one (a later install trial after the first installation).
    pub fn path(self, trial: u32) -> Vec<(Phase, u32)> {
        let mut path = vec![(self, trial)];
        if self == Phase::Install && trial > 0 {
            path.push((Phase::Install, 0));
        }
        let mut at = self.follows();
        while let Some(phase) = at {
            path.push((phase, 0));
            at = phase.follows();
        }
        path.reverse();
        path
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for Phase {
    fn eq(&self, name: &str) -> bool {
        self.as_str() == name
    }
}

impl PartialEq<&str> for Phase {
    fn eq(&self, name: &&str) -> bool {
        self.as_str() == *name
    }
}

/// A name that is no phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownPhase(pub String);

impl fmt::Display for UnknownPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Phase::ALL.iter().map(|p| p.as_str()).collect();
        write!(f, "unknown phase {:?}; phases are {}", self.0, names.join(", "))
    }
}

impl std::error::Error for UnknownPhase {}

impl FromStr for Phase {
    type Err = UnknownPhase;

    fn from_str(name: &str) -> Result<Phase, UnknownPhase> {
        Phase::KNOWN.into_iter().find(|p| p.as_str() == name).ok_or_else(|| UnknownPhase(name.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::Phase;

    #[test]
    fn a_phase_reads_and_writes_as_its_lowercase_name() {
        let names = ["prepare", "install", "measure", "runtime", "transport", "ui", "synthetic"];
        for (phase, name) in Phase::KNOWN.into_iter().zip(names) {
            assert_eq!(phase.as_str(), name);
            assert_eq!(phase.to_string(), name);
            assert_eq!(name.parse::<Phase>(), Ok(phase));
            assert!(phase == name && phase == *name);
            assert_eq!(serde_json::to_string(&phase).unwrap(), format!("\"{name}\""));
            assert_eq!(serde_json::from_str::<Phase>(&format!("\"{name}\"")).unwrap(), phase);
        }
        let err = "deploy".parse::<Phase>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown phase \"deploy\"; phases are prepare, install, measure, runtime, transport, ui"
        );
        assert_eq!(Phase::of_spec("ui"), Ok(Phase::Ui));
        assert_eq!(
            Phase::of_spec("synthetic").unwrap_err().to_string(),
            "unknown phase \"synthetic\"; phases are prepare, install, measure, runtime, transport, ui"
        );
        assert!("Measure".parse::<Phase>().is_err() && serde_json::from_str::<Phase>("\"UI\"").is_err());
        assert!(Phase::ALL.windows(2).all(|w| w[0] < w[1]), "ordered as a run takes them");
        assert_eq!(Phase::TIMED, Phase::ALL[1..]);
        assert!(
            Phase::TIMED.iter().all(|p| p.is_timed()) && !Phase::Prepare.is_timed() && !Phase::Synthetic.is_timed()
        );
    }

    #[test]
    fn each_phase_says_what_must_run_before_it() {
        use Phase::*;
        assert_eq!(Ui.needs(), [Prepare, Install]);
        assert_eq!(Measure.needs(), [Prepare, Install]);
        assert_eq!(Runtime.needs(), [Prepare, Install]);
        assert_eq!(Transport.needs(), [Prepare]);
        assert_eq!(Install.needs(), [Prepare]);
        assert!(Prepare.needs().is_empty() && Synthetic.needs().is_empty());
        let installed: Vec<Phase> = Phase::KNOWN.into_iter().filter(|p| p.needs_install()).collect();
        assert_eq!(installed, [Measure, Runtime, Ui]);
        // What a phase needs is on the way a person steps to it, in the same order.
        for phase in Phase::KNOWN {
            let on_the_way: Vec<Phase> = phase.path(0).into_iter().map(|(p, _)| p).filter(|p| *p != phase).collect();
            let needed: Vec<Phase> = on_the_way.iter().copied().filter(|p| phase.needs().contains(p)).collect();
            assert_eq!(needed, phase.needs(), "{phase}");
        }
    }

    #[test]
    fn a_fresh_sandbox_steps_through_what_a_phase_follows() {
        use Phase::*;
        assert_eq!(Prepare.path(0), [(Prepare, 0)]);
        assert_eq!(Install.path(0), [(Prepare, 0), (Install, 0)]);
        assert_eq!(Install.path(2), [(Prepare, 0), (Install, 0), (Install, 2)]);
        assert_eq!(Measure.path(1), [(Prepare, 0), (Install, 0), (Measure, 1)]);
        assert_eq!(Runtime.path(0), [(Prepare, 0), (Install, 0), (Measure, 0), (Runtime, 0)]);
        assert_eq!(Transport.path(2), [(Prepare, 0), (Transport, 2)]);
        assert_eq!(Ui.path(1), [(Prepare, 0), (Install, 0), (Ui, 1)]);
        assert_eq!(Synthetic.path(3), [(Synthetic, 3)]);
    }
}
