//! The companions of the timed metrics (`sandbench_proto::metric::Facet::COMPANIONS`): what each timed
//! step's process tree cost besides wall time. `<key>.cpu` of a defined metric is judged like
//! any metric ([`super::Report::metric_defs`]); every companion is also shown in the details as
//! medians, base → head ([`table`]).

use std::fmt::Write;

use sandbench_proto::metric::{Facet, MetricKey};

use super::Report;
use super::format::escape;
use crate::stats;

/// The steps that have companions, in report order: the defined metrics' first, then the
/// others (scripts) by name.
pub fn stems(report: &Report) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for side in [&report.base_side, &report.head_side] {
        for key in side.metrics.keys() {
            let (stem, facet) = MetricKey::split(key);
            if facet.is_companion() && !found.iter().any(|s| s == stem) {
                found.push(stem.to_string());
            }
        }
    }
    let position = |stem: &str| report.metrics.iter().position(|d| d.key == stem).unwrap_or(usize::MAX);
    found.sort_by(|a, b| (position(a), a).cmp(&(position(b), b)));
    found
}

/// The details table, or None when no step has companions.
pub fn table(report: &Report) -> Option<String> {
    let stems = stems(report);
    if stems.is_empty() {
        return None;
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nProcess trees of the timed steps (medians, base → head): user + system CPU time, the largest peak RSS of one process, page faults and context switches.\n"
    );
    let _ = writeln!(
        out,
        "| Step | CPU | Max RSS | Minor faults | Major faults | Voluntary switches | Involuntary switches |"
    );
    let _ = writeln!(out, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for stem in &stems {
        let title = report.metrics.iter().find(|d| &d.key == stem).map_or(stem.as_str(), |d| d.title.as_str());
        let cells: Vec<String> = Facet::COMPANIONS
            .into_iter()
            .map(|facet| {
                let key = MetricKey::new(stem.as_str(), facet).to_string();
                let median = |side: &super::Side| {
                    // Each trial's value (the median of its runs), as the metric itself is judged.
                    let values: Vec<f64> = super::values(side.metrics.get(&key)).into_iter().map(|(_, v)| v).collect();
                    stats::median(&values).map_or("—".to_string(), |m| shown(facet, m))
                };
                format!("{} → {}", median(&report.base_side), median(&report.head_side))
            })
            .collect();
        let _ = writeln!(out, "| {} | {} |", escape(title), cells.join(" | "));
    }
    Some(out)
}

/// A companion's value as the table shows it.
fn shown(facet: Facet, value: f64) -> String {
    match facet {
        Facet::Cpu => format!("{:.1} ms", value * 1000.0),
        Facet::MaxRss => format!("{:.1} MB", value / 1e6),
        _ => format!("{value:.0}"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::example;
    use super::super::{Sample, Status};
    use super::*;

    fn samples(values: &[f64]) -> Vec<Sample> {
        values
            .iter()
            .enumerate()
            .map(|(i, v)| Sample { trial: i as u32, sample: 0, value: Some(*v), error: None })
            .collect()
    }

    #[test]
    fn every_companion_is_shown_as_medians_in_report_order() {
        let mut report = example(Status::Completed);
        for (side, scale) in [(&mut report.base_side, 1.0), (&mut report.head_side, 1.1)] {
            side.metrics.insert("script.throughput.cpu".into(), samples(&[0.5]));
            side.metrics.insert("cold.cpu".into(), samples(&[0.1 * scale, 0.2 * scale, 0.3 * scale]));
            side.metrics.insert("cold.maxrss".into(), samples(&[50e6, 52e6, 51e6]));
            side.metrics.insert("cold.majflt".into(), samples(&[2.0, 0.0, 1.0]));
        }
        assert_eq!(stems(&report), ["cold", "script.throughput"]);
        let table = table(&report).unwrap();
        assert!(
            table
                .contains("| Cold startup | 200.0 ms → 220.0 ms | 51.0 MB → 51.0 MB | — → — | 1 → 1 | — → — | — → — |"),
            "{table}"
        );
        assert!(table.contains("| script.throughput | 500.0 ms → 500.0 ms |"), "{table}");
        assert_eq!(super::table(&example(Status::Completed)), None);
    }
}
