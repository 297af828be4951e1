//! What a metric is in reports (its title, unit and scale, floors, group and direction), the
//! reference harness's built-in definitions (its tables, §3 "Metric definitions") and the order
//! reports list metrics in. The definitions a spec adds or changes are validated in `metrics`
//! and resolved by family in `metrics_families`, both on top of this.

use std::collections::BTreeMap;

use sandbench_proto::metric;
use serde::{Deserialize, Serialize};

use crate::stats::Better;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricDef {
    pub key: String,
    pub title: String,
    /// Display unit, and the factor from raw units (seconds, bytes) to it.
    pub unit: String,
    pub scale: f64,
    /// Changes below this many raw units are noise.
    pub absolute: f64,
    /// Changes below this fraction of the base median are noise.
    pub relative: f64,
    pub group: String,
    /// Which way is better (`better = "higher"` for throughput); left out of `report.json`
    /// when lower, the default.
    #[serde(default, skip_serializing_if = "Better::is_lower")]
    pub better: Better,
}

/// (key, title, scale, unit, absolute, relative, group)
const BUILT_IN: &[(&str, &str, f64, &str, f64, f64, &str)] = &[
    (metric::COLD, "Cold startup", 1000.0, "ms", 0.1, 0.20, "CLI"),
    (metric::WARM, "Warm startup", 1000.0, "ms", 0.1, 0.20, "CLI"),
    (metric::INSTALL, "Installation", 1.0, "s", 1.0, 0.20, "CLI"),
    (metric::BUNDLE, "Compressed release artifacts", 1e-6, "MB", 65_536.0, 0.005, "CLI"),
    (metric::DISK, "Installed footprint", 1e-6, "MB", 1_048_576.0, 0.01, "CLI"),
    (metric::RSS, "Idle memory, summed RSS", 1e-6, "MB", 10_485_760.0, 0.20, "CLI"),
    ("kernel_start", "Python kernel startup", 1000.0, "ms", 0.005, 0.20, "Python runtime"),
    ("kernel_exec", "Python cell round trip", 1000.0, "ms", 0.0001, 0.20, "Python runtime"),
    ("bash", "Empty bash command", 1000.0, "ms", 0.001, 0.20, "Python runtime"),
    ("git_status", "Bash git status", 1000.0, "ms", 0.001, 0.20, "Python runtime"),
    ("output", "Bash 32 KiB output", 1000.0, "ms", 0.001, 0.20, "Python runtime"),
    ("mixed", "35 cells / 9 shell calls", 1000.0, "ms", 0.005, 0.20, "Python runtime"),
    ("interrupt", "Python interrupt to done", 1000.0, "ms", 0.0005, 0.20, "Python runtime"),
    ("snapshot", "Python state snapshot", 1000.0, "ms", 0.001, 0.20, "Python runtime"),
    ("restore", "Python state restore", 1000.0, "ms", 0.001, 0.20, "Python runtime"),
    ("kernel_rss", "Python idle RSS", 1e-6, "MB", 1_048_576.0, 0.20, "Python runtime"),
    ("loaded_rss", "Python RSS after pandas workload", 1e-6, "MB", 1_048_576.0, 0.20, "Python runtime"),
    ("switch_fetch", "Full-history transfers per warm session switch", 1.0, "transfers", 0.5, 0.0, TRANSPORT),
    ("frame_decode", "Private frame decode, 32 MiB in 8 KiB chunks", 1000.0, "ms", 0.02, 0.20, TRANSPORT),
    ("resume_large", "Resume large session (cold)", 1000.0, "ms", 0.1, 0.20, UI),
    ("resume_large_cpu", "CPU, resume large session", 1000.0, "ms", 0.05, 0.20, UI),
    ("switch_large", "Switch into large session", 1000.0, "ms", 0.05, 0.20, UI),
    ("switch_large_cpu", "CPU, switch into large session", 1000.0, "ms", 0.02, 0.20, UI),
    ("agents_view", "Open agents view from a session", 1000.0, "ms", 0.02, 0.20, UI),
    ("agents_view_cpu", "CPU, open agents view", 1000.0, "ms", 0.01, 0.20, UI),
    ("agents_roster", "Full agents roster, many sessions", 1.0, "s", 0.1, 0.20, UI),
    ("agents_roster_cpu", "CPU, full agents roster", 1.0, "s", 0.05, 0.20, UI),
    ("agents_open", "Open another session from agents view", 1000.0, "ms", 0.1, 0.20, UI),
    ("agents_open_cpu", "CPU, open from agents view", 1000.0, "ms", 0.05, 0.20, UI),
    ("agents_reopen", "Reopen resident large session", 1000.0, "ms", 0.02, 0.20, UI),
    ("agents_reopen_cpu", "CPU, reopen resident session", 1000.0, "ms", 0.01, 0.20, UI),
    ("subagent_open", "Open subagent session at depth 6", 1000.0, "ms", 0.1, 0.20, UI),
    ("subagent_open_cpu", "CPU, open subagent at depth 6", 1000.0, "ms", 0.05, 0.20, UI),
    ("parent_open", "Open chain parent from agents view", 1000.0, "ms", 0.1, 0.20, UI),
    ("parent_open_cpu", "CPU, open chain parent", 1000.0, "ms", 0.05, 0.20, UI),
    ("scheduled_catalog", "Scheduled catalog, first request", 1000.0, "ms", 0.05, 0.20, UI),
    ("scheduled_catalog_cpu", "CPU, scheduled catalog", 1000.0, "ms", 0.02, 0.20, UI),
    ("scheduled_catalog_warm", "Scheduled catalog, repeated request", 1000.0, "ms", 0.05, 0.20, UI),
    ("scheduled_catalog_warm_cpu", "CPU, repeated catalog", 1000.0, "ms", 0.02, 0.20, UI),
    ("cold_open_catalog", "Cold worker with three catalog scans", 1000.0, "ms", 0.05, 0.20, UI),
    ("cold_open_catalog_cpu", "CPU, cold worker and scans", 1000.0, "ms", 0.02, 0.20, UI),
    ("ui_rss", "UI memory after interactions", 1e-6, "MB", 10_485_760.0, 0.20, UI),
];

const TRANSPORT: &str = "Session transport";
const UI: &str = "UI interactions";

/// The reference's report sections, in the order it prints them; a spec's own groups follow.
pub const SECTIONS: [&str; 4] = ["CLI", "Python runtime", TRANSPORT, UI];

/// `defs` in report order: sections as the reference prints them (then the spec's own groups in
/// the order they first appear); within a section the reference's metrics in its order, each of
/// the spec's own right after the reference metric recorded before it (at the section's start
/// when none was), in the order the phases record them.
pub fn report_order(defs: Vec<MetricDef>) -> Vec<MetricDef> {
    let mut groups: Vec<String> = SECTIONS.iter().map(|s| s.to_string()).collect();
    for def in &defs {
        if !groups.contains(&def.group) {
            groups.push(def.group.clone());
        }
    }
    let reference = |def: &MetricDef| BUILT_IN.iter().position(|b| b.0 == def.key && b.6 == def.group);
    let mut anchors: BTreeMap<String, i64> = BTreeMap::new();
    let mut ranked: Vec<((usize, i64, usize), MetricDef)> = Vec::new();
    for (i, def) in defs.into_iter().enumerate() {
        let group = groups.iter().position(|g| *g == def.group).unwrap_or(usize::MAX);
        let rank = match reference(&def) {
            Some(at) => {
                anchors.insert(def.group.clone(), at as i64);
                (group, at as i64, 0)
            }
            None => (group, anchors.get(&def.group).copied().unwrap_or(-1), 1 + i),
        };
        ranked.push((rank, def));
    }
    ranked.sort_by_key(|(rank, _)| *rank);
    ranked.into_iter().map(|(_, def)| def).collect()
}

/// The built-in definition of `key`, if the reference has one.
pub fn built_in(key: &str) -> Option<MetricDef> {
    BUILT_IN.iter().find(|d| d.0 == key).map(|&(key, title, scale, unit, absolute, relative, group)| MetricDef {
        key: key.into(),
        title: title.into(),
        unit: unit.into(),
        scale,
        absolute,
        relative,
        group: group.into(),
        better: Better::Lower,
    })
}
