//! Where a pull request's head stands against main's history, per changed metric, when the
//! ledger holds one (`crate::history::compare` fills [`Standing`] in at the run's end): a count
//! exactly, against main's latest recorded count; any other value against the band of main's
//! recent recorded values on the same machine and setting (their median ± the metric's floor).
//! Rendered as lines of the comment, kept with the changed rows.

use serde::{Deserialize, Serialize};

use super::format::{escape, number, value};
use crate::spec::MetricDef;

/// One changed metric against main's recent recorded values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Standing {
    pub key: String,
    /// Main's recorded commits it is set against (the most recent on the base's first-parent line).
    pub commits: usize,
    /// The latest of them.
    pub latest: String,
    pub against: Against,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Against {
    /// A count: main's latest recorded count, and how far main's recent counts lie apart
    /// (largest over smallest − 1).
    Count { main: f64, head: f64, spread: f64 },
    /// A measured value: main's level (the median of its recent values on this machine and
    /// setting) and its band, level × (1 ± floor).
    Band { level: f64, low: f64, high: f64, head: f64 },
}

impl Standing {
    /// Whether the head is outside what main's history holds: off the count, or out of the band.
    pub fn outside(&self) -> bool {
        match self.against {
            Against::Count { main, head, .. } => head != main,
            Against::Band { low, high, head, .. } => head < low || head > high,
        }
    }

    /// The comment's line for it (text escaped): "`work` (wall): head 0.145 s is above main's
    /// band, 0.098 s – 0.102 s (…)".
    pub fn line(&self, def: &MetricDef) -> String {
        let key = crate::sanitize::terminal(crate::sanitize::prefix(&self.key, 120)).replace(['`', '\n', '\r'], "'");
        let latest = crate::sanitize::prefix(&self.latest, 8).to_string();
        let of = |n: usize| {
            if n == 1 { "its latest recorded commit".to_string() } else { format!("its last {n} recorded commits") }
        };
        let shown = |v: f64| escape(&value(v, def));
        match self.against {
            Against::Count { main, head, spread } => {
                let agree = match self.commits {
                    1 => String::new(),
                    _ if spread == 0.0 => ", which all agree".to_string(),
                    _ => format!(", which lie within {:.3} % of each other", spread * 100.0),
                };
                let change = if main > 0.0 { format!("{:+.2} %", (head / main - 1.0) * 100.0) } else { "—".into() };
                let context = match self.commits {
                    1 => "main's one recorded commit".to_string(),
                    n => format!("the latest of main's last {n} recorded commits{agree}"),
                };
                // A count exactly: whole, in its own unit (`M instructions` shows as `instructions`).
                let exact = |v: f64| escape(&format!("{} {}", number(v, 0, false), def.unit.trim_start_matches("M ")));
                format!(
                    "`{key}`: head {} is {change} from main's {} at `{latest}` ({context}).",
                    exact(head),
                    exact(main)
                )
            }
            Against::Band { level, low, high, head } => {
                let place = if head > high {
                    "above"
                } else if head < low {
                    "below"
                } else {
                    "inside"
                };
                format!(
                    "`{key}`: head {} is {place} main's band, {} – {} ({} on this machine and setting, up to `{latest}`: level {} ± the floor).",
                    shown(head),
                    shown(low),
                    shown(high),
                    of(self.commits),
                    shown(level)
                )
            }
        }
    }
}

/// The comment's title of the standings.
pub const TITLE: &str = "**Against main's history:**\n\n";

/// The comment's bullets, one per standing whose metric is defined, in the order given.
pub fn lines(standings: &[Standing], defs: &[MetricDef]) -> Vec<String> {
    standings
        .iter()
        .filter_map(|s| defs.iter().find(|d| d.key == s.key).map(|def| format!("- {}\n", s.line(def))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(key: &str, unit: &str, scale: f64) -> MetricDef {
        MetricDef {
            key: key.into(),
            title: key.into(),
            unit: unit.into(),
            scale,
            absolute: 0.005,
            relative: 0.05,
            group: "CLI".into(),
            better: crate::stats::Better::Lower,
        }
    }

    #[test]
    fn a_count_is_set_exactly_against_mains_latest_and_a_time_against_the_band() {
        let count = Standing {
            key: "work.instructions".into(),
            commits: 5,
            latest: "1a2b3c4d5e6f".into(),
            against: Against::Count { main: 3_809_312_012.0, head: 3_885_498_252.0, spread: 0.0 },
        };
        assert!(count.outside());
        assert_eq!(
            count.line(&def("work.instructions", "M instructions", 1e-6)),
            "`work.instructions`: head 3,885,498,252 instructions is +2.00 % from main's 3,809,312,012 instructions at `1a2b3c4d` (the latest of main's last 5 recorded commits, which all agree)."
        );
        let band = |head: f64| Standing {
            key: "work".into(),
            commits: 3,
            latest: "abcdef1234".into(),
            against: Against::Band { level: 0.1, low: 0.095, high: 0.105, head },
        };
        let work = def("work", "ms", 1000.0);
        assert!(band(0.13).line(&work).contains("head 130.0 ms is above main's band, 95.0 ms – 105.0 ms (its last 3"));
        assert!(band(0.1).line(&work).contains("is inside main's band"));
        assert!(!band(0.1).outside() && band(0.09).outside());
        assert!(band(0.09).line(&work).contains("is below"));
        let lines = lines(&[band(0.13), count.clone()], &[work]);
        assert_eq!(lines.len(), 1, "a metric without a definition is left out: {lines:?}");
        assert!(lines[0].starts_with("- `work`: head 130.0 ms is above"), "{lines:?}");
    }
}
