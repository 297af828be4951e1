//! Keys of the metrics the agent records by itself, the reference harness's built-in ones. The
//! agent emits them, the controller expects, defines and reports them by these names. A spec's
//! runtime metrics are named by the spec and have no constant. A key is a step's stem and one
//! of its facets ([`MetricKey`], [`Facet`]).

use std::fmt;
use std::str::FromStr;

/// Total size of the release artifacts, bytes (prepare).
pub const BUNDLE: &str = "bundle";
/// The timed install command, seconds (install).
pub const INSTALL: &str = "install";
/// Interactive start-up to the first echo of the typed probe, first start, seconds (measure).
pub const COLD: &str = "cold";
/// The same, second start, seconds (measure).
pub const WARM: &str = "warm";
/// Summed RSS of the user's processes after the settle, bytes (measure).
pub const RSS: &str = "rss";
/// Summed PSS of the same processes, bytes (measure; recorded where the kernel has it).
pub const PSS: &str = "pss";
/// Installed footprint after first use, bytes (measure, trial 0).
pub const DISK: &str = "disk";

/// What a metric key says of its step: which figure of it the metric is. A key is its step's
/// stem followed by the facet's suffix (`cold`, `cold.cpu`, `work.instructions`,
/// `script.x.p95`); [`MetricKey`] parses and prints exactly those keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Facet {
    /// The step's own figure, keyed by the stem alone: its wall time for a timed step (the figure
    /// the companions are of), else the value it records (a size, a count, a script's number).
    Wall,
    /// Companion: user + system CPU seconds of the step's process tree.
    Cpu,
    /// Companion: the largest peak resident set of one process of the tree, bytes.
    MaxRss,
    /// Companion: minor page faults (no disk read).
    MinFlt,
    /// Companion: major page faults (a disk read).
    MajFlt,
    /// Companion: voluntary context switches (the process waited).
    Vcsw,
    /// Companion: involuntary context switches (the scheduler took the CPU away).
    Ivcsw,
    /// Instruction lens: instructions executed (callgrind's `Ir`), summed over the process tree.
    Instructions,
    /// Instruction lens: estimated cycles, L1 hits + 5 × last-level hits + 35 × RAM accesses
    /// (the formula of iai-callgrind and gungraun), from callgrind's cache simulation.
    Cycles,
    /// A distribution's median over a trial's samples.
    P50,
    /// A distribution's 95th percentile over a trial's samples.
    P95,
    /// A distribution's 99th percentile over a trial's samples.
    P99,
    /// A distribution's largest sample of a trial.
    Max,
}

impl Facet {
    /// Every facet, the step's own figure first.
    pub const ALL: [Facet; 13] = [
        Facet::Wall,
        Facet::Cpu,
        Facet::MaxRss,
        Facet::MinFlt,
        Facet::MajFlt,
        Facet::Vcsw,
        Facet::Ivcsw,
        Facet::Instructions,
        Facet::Cycles,
        Facet::P50,
        Facet::P95,
        Facet::P99,
        Facet::Max,
    ];

    /// Companions of a timed step: what its process tree cost besides wall time, in report
    /// order. The agent records them beside every timed step whose process tree it can
    /// attribute; the report judges `.cpu` on its own noise and shows the others in its details.
    pub const COMPANIONS: [Facet; 6] =
        [Facet::Cpu, Facet::MaxRss, Facet::MinFlt, Facet::MajFlt, Facet::Vcsw, Facet::Ivcsw];

    /// What the instruction lens counts, judged as deterministic metrics.
    pub const LENS: [Facet; 2] = [Facet::Instructions, Facet::Cycles];

    /// What follows the stem in the key: empty for [`Facet::Wall`], else a dot and the name.
    pub const fn suffix(self) -> &'static str {
        match self {
            Facet::Wall => "",
            Facet::Cpu => ".cpu",
            Facet::MaxRss => ".maxrss",
            Facet::MinFlt => ".minflt",
            Facet::MajFlt => ".majflt",
            Facet::Vcsw => ".vcsw",
            Facet::Ivcsw => ".ivcsw",
            Facet::Instructions => ".instructions",
            Facet::Cycles => ".cycles",
            Facet::P50 => ".p50",
            Facet::P95 => ".p95",
            Facet::P99 => ".p99",
            Facet::Max => ".max",
        }
    }

    /// The unit the agent records the facet's observations in; None for the facets in the
    /// step's own unit.
    pub const fn unit(self) -> Option<&'static str> {
        match self {
            Facet::Cpu => Some("s"),
            Facet::MaxRss => Some("bytes"),
            Facet::MinFlt | Facet::MajFlt | Facet::Vcsw | Facet::Ivcsw => Some(""),
            Facet::Instructions | Facet::Cycles => Some("count"),
            Facet::Wall | Facet::P50 | Facet::P95 | Facet::P99 | Facet::Max => None,
        }
    }

    /// Whether it is a companion of a timed step ([`Facet::COMPANIONS`]).
    pub fn is_companion(self) -> bool {
        Facet::COMPANIONS.contains(&self)
    }

    /// Whether the instruction lens counts it ([`Facet::LENS`]).
    pub fn is_lens(self) -> bool {
        Facet::LENS.contains(&self)
    }
}

/// A metric's key: its step's stem and the facet of the step it is. Its text is the key as
/// the agent records it and the report shows it, `<stem><suffix>`: a key whose end is no
/// facet's suffix (or is nothing but one) is a stem of its own, [`Facet::Wall`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MetricKey {
    pub stem: String,
    pub facet: Facet,
}

impl MetricKey {
    pub fn new(stem: impl Into<String>, facet: Facet) -> MetricKey {
        MetricKey { stem: stem.into(), facet }
    }

    /// The key's stem and facet, borrowed from the key: `cold.cpu` → (`cold`, [`Facet::Cpu`]),
    /// `cold` and `.cpu` → themselves and [`Facet::Wall`].
    pub fn split(key: &str) -> (&str, Facet) {
        Facet::ALL[1..]
            .iter()
            .find_map(|f| key.strip_suffix(f.suffix()).filter(|stem| !stem.is_empty()).map(|stem| (stem, *f)))
            .unwrap_or((key, Facet::Wall))
    }

    pub fn parse(key: &str) -> MetricKey {
        let (stem, facet) = MetricKey::split(key);
        MetricKey::new(stem, facet)
    }

    /// The stem of a key: the key itself for [`Facet::Wall`].
    pub fn stem_of(key: &str) -> &str {
        MetricKey::split(key).0
    }

    /// The facet of a key.
    pub fn facet_of(key: &str) -> Facet {
        MetricKey::split(key).1
    }

    /// The stem of `key` when the key is that facet of its step: `cold.cpu` is [`Facet::Cpu`]
    /// of `cold`; `cold` is no facet but [`Facet::Wall`] of anything.
    pub fn stem_if(key: &str, facet: Facet) -> Option<&str> {
        let (stem, is) = MetricKey::split(key);
        (is == facet).then_some(stem)
    }

    /// Another facet of the same step (`cold` → `cold.cpu`).
    pub fn with(&self, facet: Facet) -> MetricKey {
        MetricKey::new(self.stem.clone(), facet)
    }
}

impl fmt::Display for MetricKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.stem, self.facet.suffix())
    }
}

impl FromStr for MetricKey {
    type Err = std::convert::Infallible;

    fn from_str(key: &str) -> Result<MetricKey, Self::Err> {
        Ok(MetricKey::parse(key))
    }
}

impl From<MetricKey> for String {
    fn from(key: MetricKey) -> String {
        key.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::{Facet, MetricKey};

    #[test]
    fn a_key_splits_into_stem_and_facet_and_prints_back() {
        let cases = [
            ("cold", "cold", Facet::Wall),
            ("cold.cpu", "cold", Facet::Cpu),
            ("install.maxrss", "install", Facet::MaxRss),
            ("cold.minflt", "cold", Facet::MinFlt),
            ("cold.majflt", "cold", Facet::MajFlt),
            ("cold.vcsw", "cold", Facet::Vcsw),
            ("cold.ivcsw", "cold", Facet::Ivcsw),
            ("work.instructions", "work", Facet::Instructions),
            ("script.x.cycles", "script.x", Facet::Cycles),
            ("script.x.p50", "script.x", Facet::P50),
            ("latency.p95", "latency", Facet::P95),
            ("latency.p99", "latency", Facet::P99),
            ("latency.max", "latency", Facet::Max),
            ("script.throughput.cpu", "script.throughput", Facet::Cpu),
            // Nothing but a suffix, or a near one, is a stem of its own.
            (".instructions", ".instructions", Facet::Wall),
            (".cpu", ".cpu", Facet::Wall),
            ("cold_cpu", "cold_cpu", Facet::Wall),
            ("cold.CPU", "cold.CPU", Facet::Wall),
            ("rss", "rss", Facet::Wall),
            ("", "", Facet::Wall),
        ];
        for (key, stem, facet) in cases {
            let parsed = MetricKey::parse(key);
            assert_eq!((parsed.stem.as_str(), parsed.facet), (stem, facet), "{key}");
            assert_eq!(MetricKey::split(key), (stem, facet), "{key}");
            assert_eq!((MetricKey::stem_of(key), MetricKey::facet_of(key)), (stem, facet));
            assert_eq!(parsed.to_string(), key, "{key} prints back");
            assert_eq!(key.parse::<MetricKey>().unwrap(), parsed);
        }
        // Every facet of a stem round-trips.
        for facet in Facet::ALL {
            let key = MetricKey::new("script.x", facet);
            assert_eq!(MetricKey::parse(&key.to_string()), key);
            assert_eq!(String::from(key.clone()), key.to_string());
        }
        assert_eq!(MetricKey::parse("cold").with(Facet::Cpu).to_string(), "cold.cpu");
        assert_eq!(MetricKey::stem_if("cold.cpu", Facet::Cpu), Some("cold"));
        assert_eq!(MetricKey::stem_if("cold.cpu", Facet::Wall), None);
        assert_eq!(MetricKey::stem_if("cold.maxrss", Facet::Cpu), None);
        assert_eq!(MetricKey::stem_if(".cpu", Facet::Cpu), None);
    }

    #[test]
    fn facets_group_and_carry_their_units() {
        let companions: Vec<(&str, Option<&str>)> = Facet::COMPANIONS.iter().map(|f| (f.suffix(), f.unit())).collect();
        assert_eq!(
            companions,
            [
                (".cpu", Some("s")),
                (".maxrss", Some("bytes")),
                (".minflt", Some("")),
                (".majflt", Some("")),
                (".vcsw", Some("")),
                (".ivcsw", Some(""))
            ]
        );
        assert_eq!(Facet::LENS.map(|f| f.suffix()), [".instructions", ".cycles"]);
        assert!(Facet::LENS.iter().all(|f| f.is_lens() && !f.is_companion() && f.unit() == Some("count")));
        assert!(Facet::COMPANIONS.iter().all(|f| f.is_companion() && !f.is_lens()));
        for facet in [Facet::Wall, Facet::P50, Facet::P95, Facet::P99, Facet::Max] {
            assert!(!facet.is_companion() && !facet.is_lens() && facet.unit().is_none(), "{facet:?}");
        }
        assert_eq!(Facet::Wall.suffix(), "");
        // Every suffix is its facet's own: none ends another.
        for a in Facet::ALL[1..].iter() {
            for b in Facet::ALL[1..].iter().filter(|b| *b != a) {
                assert!(!a.suffix().ends_with(b.suffix()), "{a:?} {b:?}");
            }
        }
    }
}
