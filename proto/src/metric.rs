//! Keys of the metrics the agent records by itself, the reference harness's built-in ones. The
//! agent emits them, the controller expects, defines and reports them by these names. A spec's
//! runtime metrics are named by the spec and have no constant. A key is a step's stem and one
//! of its facets ([`MetricKey`], [`Facet`]).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

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
    /// A distribution's N-th percentile (1–99) over a trial's samples (`.p50`, `.p95`, …):
    /// R type 7, linear between the closest ranks. Make one with [`Facet::percentile`].
    Percentile(u8),
    /// A distribution's largest sample of a trial.
    Max,
}

impl Facet {
    /// A distribution's median.
    pub const P50: Facet = Facet::Percentile(50);
    /// A distribution's 95th percentile.
    pub const P95: Facet = Facet::Percentile(95);
    /// A distribution's 99th percentile.
    pub const P99: Facet = Facet::Percentile(99);

    /// Every named facet and the usual percentiles, the step's own figure first (any percentile
    /// 1–99 is a facet too).
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

    /// The N-th percentile, for N in 1–99; None otherwise.
    pub const fn percentile(n: u8) -> Option<Facet> {
        if matches!(n, 1..=99) { Some(Facet::Percentile(n)) } else { None }
    }

    /// What follows the stem in the key: empty for [`Facet::Wall`], else a dot and the name.
    /// A percentile outside 1–99 (which [`Facet::percentile`] never makes) prints as the
    /// nearest one.
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
            Facet::Percentile(n) => {
                PERCENTILE_SUFFIXES[if n == 0 {
                    0
                } else if n > 99 {
                    98
                } else {
                    n as usize - 1
                }]
            }
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
            Facet::Wall | Facet::Percentile(_) | Facet::Max => None,
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

    /// Whether it is a distribution's reduction of a trial's samples (a percentile or the max).
    pub fn is_distribution(self) -> bool {
        matches!(self, Facet::Percentile(_) | Facet::Max)
    }

    /// The facet a key's end names, if any (`.cpu`, `.p90`, …); percentiles are `.p` and 1–99
    /// without a leading zero.
    fn of_suffix(key: &str) -> Option<(&str, Facet)> {
        let named = Facet::ALL[1..].iter().filter(|f| !matches!(f, Facet::Percentile(_)));
        let found = named.clone().find_map(|f| key.strip_suffix(f.suffix()).map(|stem| (stem, *f)));
        found.or_else(|| {
            let (stem, digits) = key.rsplit_once(".p")?;
            let plain = !digits.is_empty() && digits.len() <= 2 && !digits.starts_with('0');
            let n = digits.parse::<u8>().ok().filter(|_| plain && digits.bytes().all(|b| b.is_ascii_digit()))?;
            Some((stem, Facet::percentile(n)?))
        })
    }
}

/// `.p1` … `.p99`: a percentile's suffix is as static as every other facet's.
const PERCENTILE_SUFFIXES: [&str; 99] = [
    ".p1", ".p2", ".p3", ".p4", ".p5", ".p6", ".p7", ".p8", ".p9", ".p10", ".p11", ".p12", ".p13", ".p14", ".p15",
    ".p16", ".p17", ".p18", ".p19", ".p20", ".p21", ".p22", ".p23", ".p24", ".p25", ".p26", ".p27", ".p28", ".p29",
    ".p30", ".p31", ".p32", ".p33", ".p34", ".p35", ".p36", ".p37", ".p38", ".p39", ".p40", ".p41", ".p42", ".p43",
    ".p44", ".p45", ".p46", ".p47", ".p48", ".p49", ".p50", ".p51", ".p52", ".p53", ".p54", ".p55", ".p56", ".p57",
    ".p58", ".p59", ".p60", ".p61", ".p62", ".p63", ".p64", ".p65", ".p66", ".p67", ".p68", ".p69", ".p70", ".p71",
    ".p72", ".p73", ".p74", ".p75", ".p76", ".p77", ".p78", ".p79", ".p80", ".p81", ".p82", ".p83", ".p84", ".p85",
    ".p86", ".p87", ".p88", ".p89", ".p90", ".p91", ".p92", ".p93", ".p94", ".p95", ".p96", ".p97", ".p98", ".p99",
];

/// A step whose metric is a distribution: one sample per request or operation, reduced per
/// trial to these facets (`<metric>.p<N>`, `<metric>.max`), each judged from the pairs like any
/// metric; the stem itself is then no judged row. Filled by the spec's validator from the step's
/// `percentiles` and `max` ([`crate::plan::AgentPlan::distributions`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Distribution {
    /// Percentiles, each 1–99, in the order the report shows them.
    #[serde(default)]
    pub percentiles: Vec<u8>,
    /// The trial's largest sample too.
    #[serde(default)]
    pub max: bool,
}

impl Distribution {
    /// The facets derived per trial: the percentiles in order (out-of-range ones left out), then
    /// the max.
    pub fn facets(&self) -> Vec<Facet> {
        let mut out: Vec<Facet> = self.percentiles.iter().filter_map(|n| Facet::percentile(*n)).collect();
        out.dedup();
        if self.max {
            out.push(Facet::Max);
        }
        out
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
        Facet::of_suffix(key).filter(|(stem, _)| !stem.is_empty()).unwrap_or((key, Facet::Wall))
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
            ("latency.p90", "latency", Facet::Percentile(90)),
            ("latency.p1", "latency", Facet::Percentile(1)),
            ("store.sqlite.high.commit_ms.p999", "store.sqlite.high.commit_ms.p999", Facet::Wall),
            ("latency.p0", "latency.p0", Facet::Wall),
            ("latency.p05", "latency.p05", Facet::Wall),
            ("latency.p100", "latency.p100", Facet::Wall),
            ("latency.p+5", "latency.p+5", Facet::Wall),
            ("latency.p", "latency.p", Facet::Wall),
            (".p50", ".p50", Facet::Wall),
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
        for facet in [Facet::Wall, Facet::P50, Facet::P95, Facet::P99, Facet::Max, Facet::Percentile(7)] {
            assert!(!facet.is_companion() && !facet.is_lens() && facet.unit().is_none(), "{facet:?}");
        }
        assert_eq!(Facet::Wall.suffix(), "");
        // Every percentile 1–99 is a facet of its own that round-trips; 0 and 100 are none.
        for n in 1..=99u8 {
            let facet = Facet::percentile(n).unwrap();
            assert_eq!(facet.suffix(), format!(".p{n}"));
            assert_eq!(MetricKey::parse(&format!("rt.p{n}")), MetricKey::new("rt", facet));
            assert!(facet.is_distribution() && !facet.is_companion());
        }
        assert_eq!((Facet::percentile(0), Facet::percentile(100)), (None, None));
        assert_eq!(Facet::P95, Facet::Percentile(95));
        // Every suffix is its facet's own: none ends another.
        for a in Facet::ALL[1..].iter() {
            for b in Facet::ALL[1..].iter().filter(|b| *b != a) {
                assert!(!a.suffix().ends_with(b.suffix()), "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn a_distribution_names_its_facets_in_order() {
        let d = super::Distribution { percentiles: vec![50, 95, 99, 0, 100], max: true };
        assert_eq!(d.facets(), [Facet::P50, Facet::P95, Facet::P99, Facet::Max]);
        let keys: Vec<String> = d.facets().into_iter().map(|f| MetricKey::new("rt", f).to_string()).collect();
        assert_eq!(keys, ["rt.p50", "rt.p95", "rt.p99", "rt.max"]);
        assert!(super::Distribution::default().facets().is_empty());
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(serde_json::from_str::<super::Distribution>(&json).unwrap(), d);
    }
}
