//! The lens a metric looks at its step through: wall time, CPU time, instruction counts, memory,
//! a size, or a plain value. One step can be seen through several lenses (`cold` in wall time,
//! `cold.cpu` in CPU time, `cold.instructions` in instructions); each is judged on its own, and
//! the report names the lens beside each row, so a reader knows which one decided it.
//!
//! [`of`] is the one place that maps a metric to its lens, by the key's facet first, then by the
//! kind of its unit; a new lens is a new facet here.

use sandbench_proto::metric::{Facet, MetricKey};

use crate::spec::MetricDef;
use crate::spec::units::{self, Kind};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Lens {
    Wall,
    Cpu,
    Instructions,
    Memory,
    Size,
    /// A script's number, or anything whose unit says neither time nor size.
    Value,
}

impl Lens {
    pub fn name(self) -> &'static str {
        match self {
            Lens::Wall => "wall",
            Lens::Cpu => "CPU",
            Lens::Instructions => "instructions",
            Lens::Memory => "memory",
            Lens::Size => "size",
            Lens::Value => "value",
        }
    }
}

/// CPU time of a step besides its companion `<key>.cpu` ([`Facet::Cpu`]): a scenario's
/// `cpu_metric`, named `<key>_cpu` by convention.
const CPU_CONVENTION: &str = "_cpu";

/// The lens of `def`: the lens's facets (`.instructions`, `.cycles`) are instructions, `.cpu`
/// (and `_cpu`) CPU time; otherwise a time unit is wall time, and a size unit memory when the
/// metric says it measures memory (an RSS, a `memory` title or group), else a size.
pub fn of(def: &MetricDef) -> Lens {
    let key = def.key.as_str();
    let facet = MetricKey::facet_of(key);
    if facet.is_lens() {
        return Lens::Instructions;
    }
    if facet == Facet::Cpu || key.ends_with(CPU_CONVENTION) {
        return Lens::Cpu;
    }
    match units::parse(&def.unit) {
        Some((Kind::Time, _)) => Lens::Wall,
        Some((Kind::Size, _)) if measures_memory(def) => Lens::Memory,
        Some((Kind::Size, _)) => Lens::Size,
        None => Lens::Value,
    }
}

fn measures_memory(def: &MetricDef) -> bool {
    let says = |text: &str| {
        let text = text.to_lowercase();
        text.contains("rss") || text.contains("memory")
    };
    says(&def.key) || says(&def.title) || says(&def.group)
}

/// The step a metric belongs to, whatever its lens: `cold.cpu`, `cold_cpu` and
/// `cold.instructions` are all of `cold`.
pub fn step(key: &str) -> &str {
    match MetricKey::split(key) {
        (stem, facet) if facet.is_lens() || facet == Facet::Cpu => stem,
        _ => key.strip_suffix(CPU_CONVENTION).filter(|k| !k.is_empty()).unwrap_or(key),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::metrics::built_in;

    fn def(key: &str, unit: &str, title: &str, group: &str) -> MetricDef {
        MetricDef {
            key: key.into(),
            title: title.into(),
            unit: unit.into(),
            scale: 1.0,
            absolute: 0.0,
            relative: 0.2,
            group: group.into(),
            better: crate::stats::Better::Lower,
        }
    }

    #[test]
    fn each_metric_has_the_lens_its_suffix_or_unit_says() {
        let cases = [
            (built_in("cold").unwrap(), Lens::Wall),
            (built_in("install").unwrap(), Lens::Wall),
            (built_in("rss").unwrap(), Lens::Memory),
            (built_in("kernel_rss").unwrap(), Lens::Memory),
            (built_in("bundle").unwrap(), Lens::Size),
            (built_in("disk").unwrap(), Lens::Size),
            (def("cold.cpu", "ms", "Cold startup (CPU)", "CLI"), Lens::Cpu),
            (def("browse_start_cpu", "ms", "CPU, start", "UI interactions"), Lens::Cpu),
            (def("work.instructions", "", "Work (instructions)", "CLI"), Lens::Instructions),
            (def("work.cycles", "", "Work (cycles)", "CLI"), Lens::Instructions),
            (def("heap", "MB", "Heap", "Memory"), Lens::Memory),
            (def("throughput", "ops/s", "Throughput", "Product script"), Lens::Value),
            (def("parse_ms", "ms", "JSON parse", "Product script"), Lens::Wall),
        ];
        for (d, lens) in cases {
            assert_eq!(of(&d), lens, "{}", d.key);
        }
        assert_eq!(Lens::Cpu.name(), "CPU");
    }

    #[test]
    fn every_lens_of_a_step_names_the_step() {
        for key in ["cold", "cold.cpu", "cold_cpu", "cold.instructions", "cold.cycles"] {
            assert_eq!(step(key), "cold", "{key}");
        }
        assert_eq!(step(".cpu"), ".cpu");
    }
}
