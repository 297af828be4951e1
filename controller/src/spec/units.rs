//! Units: what each metric's observations are measured in, and how they become the unit the
//! metric is shown in. The agent records every timed step in seconds and every memory, size
//! and footprint in bytes; a script's values are in whatever unit it prints. A metric declared
//! in a known unit of the same kind (`ms` for seconds, `MB` for bytes) gets the conversion as
//! its `scale`; a unit of another kind, an unknown unit for a timed or sized metric, or a
//! `scale` that contradicts the unit is a spec error. (`absolute` floors stay in the observed
//! unit: seconds, bytes.)

use sandbench_proto::Phase;
use sandbench_proto::metric;
use sandbench_proto::plan::ScenarioStep;

use super::Plan;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Time,
    Size,
}

impl Kind {
    fn describe(self) -> &'static str {
        match self {
            Kind::Time => "a time",
            Kind::Size => "a size",
        }
    }

    /// The units of this kind, for error messages.
    fn names(self) -> String {
        UNITS.iter().filter(|u| u.1 == self).map(|u| u.0).collect::<Vec<_>>().join(", ")
    }
}

/// (name, kind, size in seconds or bytes)
const UNITS: &[(&str, Kind, f64)] = &[
    ("ns", Kind::Time, 1e-9),
    ("µs", Kind::Time, 1e-6),
    ("us", Kind::Time, 1e-6),
    ("ms", Kind::Time, 1e-3),
    ("s", Kind::Time, 1.0),
    ("min", Kind::Time, 60.0),
    ("h", Kind::Time, 3600.0),
    ("bytes", Kind::Size, 1.0),
    ("B", Kind::Size, 1.0),
    ("KB", Kind::Size, 1e3),
    ("kB", Kind::Size, 1e3),
    ("MB", Kind::Size, 1e6),
    ("GB", Kind::Size, 1e9),
    ("KiB", Kind::Size, 1024.0),
    ("MiB", Kind::Size, 1_048_576.0),
    ("GiB", Kind::Size, 1_073_741_824.0),
];

/// The kind of a known unit and its size in seconds or bytes.
pub fn parse(unit: &str) -> Option<(Kind, f64)> {
    UNITS.iter().find(|u| u.0 == unit.trim()).map(|u| (u.1, u.2))
}

/// The factor from `observed` to `shown` (1000 from `s` to `ms`), or why there is none.
pub fn factor(observed: &str, shown: &str) -> Result<f64, String> {
    let (kind, from) = parse(observed).ok_or_else(|| format!("unknown unit {observed:?}"))?;
    match parse(shown) {
        Some((k, to)) if k == kind => Ok(from / to),
        Some((k, _)) => Err(format!(
            "the metric is {} (recorded in {observed}) but unit {shown:?} is {}; expected one of {}",
            kind.describe(),
            k.describe(),
            kind.names()
        )),
        None => Err(format!(
            "the metric is {} (recorded in {observed}); unit {shown:?} cannot be converted to: expected one of {}",
            kind.describe(),
            kind.names()
        )),
    }
}

impl Plan {
    /// The unit the agent records `key` in: `s` for timed steps, `bytes` for memory, sizes and
    /// footprints; None for a script's metrics (their unit is what the script prints).
    pub fn observed_unit(&self, key: &str) -> Option<&'static str> {
        const BYTES: &str = "bytes";
        if sandbench_proto::metric::MetricKey::facet_of(key).is_lens() {
            // Counts, in their own unit (`metrics::lens_def`).
            return None;
        }
        for name in Phase::ALL {
            let produced = self.metrics_of_phase(name);
            if !produced.iter().any(|m| m == key) {
                continue;
            }
            let Some(section) = self.section(name) else {
                let sized = [metric::BUNDLE, metric::DISK, metric::RSS, metric::PSS].contains(&key);
                return Some(if sized { BYTES } else { "s" });
            };
            for script in &section.scripts {
                for combination in sandbench_proto::plan::combinations(&script.matrix) {
                    let key_of = |k: &String| sandbench_proto::plan::child_key(&script.name, &combination, k) == key;
                    if script.sizes.iter().any(|s| key_of(&s.metric)) {
                        return Some(BYTES);
                    }
                    if script.metrics.iter().any(key_of) {
                        return None;
                    }
                }
            }
            let memory = section.scenarios.iter().any(|s| steps_record_memory(&s.steps, key));
            return Some(if memory { BYTES } else { "s" });
        }
        None
    }
}

fn steps_record_memory(steps: &[ScenarioStep], key: &str) -> bool {
    steps.iter().any(|step| match step {
        ScenarioStep::Memory { metric } | ScenarioStep::Size { metric, .. } => metric == key,
        ScenarioStep::Retry { steps, .. } => steps_record_memory(steps, key),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_of_a_kind_convert_and_others_do_not() {
        assert_eq!(factor("s", "ms"), Ok(1000.0));
        assert_eq!(factor("s", "µs"), Ok(1e6));
        assert_eq!(factor("s", "s"), Ok(1.0));
        assert_eq!(factor("bytes", "MB"), Ok(1e-6));
        assert_eq!(factor("bytes", "KiB"), Ok(1.0 / 1024.0));
        let err = factor("bytes", "s").unwrap_err();
        assert!(err.contains("is a size (recorded in bytes) but unit \"s\" is a time"), "{err}");
        assert!(err.contains("bytes, B, KB, kB, MB, GB, KiB, MiB, GiB"), "{err}");
        let err = factor("s", "transfers").unwrap_err();
        assert!(err.contains("cannot be converted") && err.contains("ns, µs, us, ms, s, min, h"), "{err}");
    }
}
