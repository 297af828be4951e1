//! Metric definitions: how a metric is titled, scaled, floored and grouped in reports. The
//! reference harness's metrics are built in (its tables, §3 "Metric definitions"), so a spec
//! only defines what it adds or changes.

use serde::{Deserialize, Serialize};

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
}

/// (key, title, scale, unit, absolute, relative, group)
const BUILT_IN: &[(&str, &str, f64, &str, f64, f64, &str)] = &[
    ("cold", "Cold startup", 1000.0, "ms", 0.1, 0.20, "CLI"),
    ("warm", "Warm startup", 1000.0, "ms", 0.1, 0.20, "CLI"),
    ("install", "Installation", 1.0, "s", 1.0, 0.20, "CLI"),
    ("bundle", "Compressed release artifacts", 1e-6, "MB", 65_536.0, 0.005, "CLI"),
    ("disk", "Installed footprint", 1e-6, "MB", 1_048_576.0, 0.01, "CLI"),
    ("rss", "Idle memory, summed RSS", 1e-6, "MB", 10_485_760.0, 0.20, "CLI"),
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
];

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
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_reference_definitions_are_built_in() {
        let cold = super::built_in("cold").unwrap();
        assert_eq!((cold.scale, cold.unit.as_str(), cold.absolute, cold.relative), (1000.0, "ms", 0.1, 0.2));
        assert_eq!(super::built_in("bundle").unwrap().absolute, 65_536.0);
        assert!(super::built_in("pss").is_none());
    }
}
