//! The warnings a report shows, written once for the comment and `report.html`: the run's
//! operational warnings (log collection, sandbox cleanup, isolation, trial conditions) and
//! hyperfine's warnings about runs of a trial that disagree. Each renderer lays the groups out in
//! its own markup; what they are, their order and their words are decided here.

use super::{MetricComparison, Report};

/// One group of warnings under its title.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub title: &'static str,
    pub items: Vec<String>,
    /// What the reader should know about the whole group.
    pub footer: Option<&'static str>,
}

/// The non-empty groups, operational first.
pub fn groups(report: &Report, comparisons: &[MetricComparison]) -> Vec<Group> {
    let groups = [
        Group {
            title: "Operational warnings — log collection or sandbox cleanup needs attention",
            items: report.warnings.clone(),
            footer: Some("These warnings do not change measurement completeness."),
        },
        Group {
            title: "Measurement warnings — runs of a trial that disagree",
            items: comparisons.iter().flat_map(|c| c.warnings.iter().cloned()).collect(),
            footer: None,
        },
    ];
    groups.into_iter().filter(|g| !g.items.is_empty()).collect()
}

/// `3 warnings` for a summary line.
pub fn count(groups: &[Group]) -> String {
    let n: usize = groups.iter().map(|g| g.items.len()).sum();
    format!("{n} warning{}", if n == 1 { "" } else { "s" })
}
