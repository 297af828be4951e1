//! A spec's history as `history.json` holds it, pure: every series with its points by commit,
//! its floor and the band of each segment between change points, and its change points
//! ([`crate::stats::change_points`]) with the commits on both sides. Metrics come in the spec's
//! report order, grouped as the report groups them.

use serde::{Deserialize, Serialize};

use super::series::{Kind, Line, Series};
use super::store::CommitInfo;
use crate::report::Revision;
use crate::report::decide;
use crate::report::noise::NoiseProfile;
use crate::spec::MetricDef;
use crate::stats::change_points::{self, ChangePoint};

pub const SCHEMA_VERSION: u32 = 1;

/// `history.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct History {
    pub schema_version: u32,
    pub spec: String,
    pub generated_at: String,
    /// The revision whose first-parent line orders the commits; None: ordered by commit time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<Revision>,
    /// The recorded commits, in order (points refer to them by place).
    pub commits: Vec<CommitInfo>,
    /// Records of commits off the line (a pull request's head), left out.
    pub off_line: usize,
    /// The significance of a measured change point (after the correction for the splits tried).
    pub alpha: f64,
    pub metrics: Vec<MetricHistory>,
    /// Why something could not be done (a bisection that failed, a ledger unreadable in part).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// One series: a metric on one image (a count), or on one image, machine and setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricHistory {
    pub key: String,
    pub title: String,
    pub unit: String,
    pub scale: f64,
    pub group: String,
    pub lens: String,
    pub kind: Kind,
    pub image: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setting: Option<String>,
    /// The relative step a change point must exceed, and where it comes from.
    pub floor: f64,
    pub floor_source: String,
    pub points: Vec<HistoryPoint>,
    /// The level of each stretch between change points, and (measured values) its noise band.
    pub segments: Vec<Segment>,
    pub change_points: Vec<ChangeAt>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryPoint {
    /// Its commit's place in [`History::commits`].
    pub at: usize,
    pub commit: String,
    /// The median of its values (None: every trial was flagged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median: Option<f64>,
    pub values: Vec<f64>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub flagged: usize,
    pub records: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// A stretch of points between change points: its level (the median of its values) and the band
/// level × (1 ± floor) a value inside the noise stays in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    /// First and last point (places in [`MetricHistory::points`]).
    pub from: usize,
    pub to: usize,
    pub level: f64,
    pub low: f64,
    pub high: f64,
}

/// A change point: the series moved between two recorded commits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangeAt {
    /// The last recorded commit before and the first after (places in [`History::commits`]).
    pub before_at: usize,
    pub after_at: usize,
    pub before_commit: String,
    pub after_commit: String,
    pub before: f64,
    pub after: f64,
    /// after / before − 1.
    pub size: f64,
    /// Measured values: the split's p-value (corrected); counts: none, the step is exact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p_value: Option<f64>,
    /// First-parent commits between the two that were not recorded (None: no line to count on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unrecorded: Option<usize>,
    /// The bisection over the lens between the two, when one ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bisection: Option<Bisection>,
}

/// A bisection between two recorded commits, as the history shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bisection {
    /// Its folder beside `history.json` (`bisect.json`, `bisect.md`).
    pub dir: String,
    /// Its answer after the metric's name (`crate::bisect::words`; product text, raw).
    pub words: String,
    /// The first bad commit, when it found one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_bad: Option<CommitInfo>,
    pub steps: usize,
    pub sandbox_seconds: f64,
    pub cost_usd: f64,
}

/// What the analysis needs of the world: each metric's definition, the noise profile of an image
/// and machine, and the first-parent line the commits lie on (for the commits not recorded).
pub struct Context<'a> {
    pub spec: &'a str,
    pub defs: &'a [MetricDef],
    pub noise: &'a dyn Fn(&str, Option<&str>) -> Option<NoiseProfile>,
    /// Every first-parent commit of the line, oldest first (None: no line).
    pub first_parents: Option<&'a [String]>,
    pub line: Option<Revision>,
    pub generated_at: String,
}

/// The history of `series` along `line`.
pub fn analyse(cx: &Context<'_>, line: &Line, series: &[Series]) -> History {
    let mut metrics: Vec<(usize, MetricHistory)> = series
        .iter()
        .map(|s| {
            let (order, def) = definition(cx.defs, &s.key.metric);
            (order, metric(cx, line, s, &def))
        })
        .collect();
    metrics.sort_by_key(|(order, _)| *order);
    let groups: Vec<String> = metrics.iter().map(|(_, m)| m.group.clone()).fold(Vec::new(), |mut g, x| {
        if !g.contains(&x) {
            g.push(x);
        }
        g
    });
    // Grouped as the report groups them: each group where its first metric comes.
    metrics.sort_by_key(|(order, m)| (groups.iter().position(|g| *g == m.group), *order));
    History {
        schema_version: SCHEMA_VERSION,
        spec: cx.spec.to_string(),
        generated_at: cx.generated_at.clone(),
        line: cx.line.clone(),
        commits: line.commits.clone(),
        off_line: line.off_line,
        alpha: change_points::ALPHA,
        metrics: metrics.into_iter().map(|(_, m)| m).collect(),
        warnings: Vec::new(),
    }
}

/// The definition of `key` and its place in the report order: the spec's, or its stem's for a
/// CPU companion ("<title> (CPU)"), or a plain one after all others.
fn definition(defs: &[MetricDef], key: &str) -> (usize, MetricDef) {
    if let Some(at) = defs.iter().position(|d| d.key == key) {
        return (at * 2, defs[at].clone());
    }
    let stem = crate::report::lens::step(key);
    if let Some(at) = defs.iter().position(|d| d.key == stem && stem != key) {
        let def = &defs[at];
        return (at * 2 + 1, MetricDef { key: key.to_string(), title: format!("{} (CPU)", def.title), ..def.clone() });
    }
    let plain = MetricDef {
        key: key.to_string(),
        title: key.to_string(),
        unit: String::new(),
        scale: 1.0,
        absolute: 0.0,
        relative: 0.05,
        group: "Other".into(),
        better: crate::stats::Better::Lower,
    };
    (usize::MAX, plain)
}

fn metric(cx: &Context<'_>, line: &Line, series: &Series, def: &MetricDef) -> MetricHistory {
    let key = &series.key;
    let noise = (cx.noise)(&key.image, key.machine.as_deref());
    let values = series.values();
    let all: Vec<f64> = values.iter().flatten().copied().collect();
    let (floor, floor_source) = match key.kind {
        Kind::Count => (decide::count_floor(def, noise.as_ref()).value, count_floor_source(def, noise.as_ref())),
        Kind::Measured => {
            let floor = decide::floor(def, crate::stats::median(&all), noise.as_ref());
            (floor.value, measured_floor_source(def, noise.as_ref()))
        }
    };
    let found = match key.kind {
        Kind::Count => change_points::counts(&values, floor),
        Kind::Measured => change_points::measured(&values, change_points::ALPHA, floor),
    };
    let points: Vec<HistoryPoint> = series
        .points
        .iter()
        .map(|p| HistoryPoint {
            at: p.at,
            commit: line.commits[p.at].commit.clone(),
            median: crate::stats::median(&p.values),
            values: p.values.clone(),
            flagged: p.flagged,
            records: p.records,
        })
        .collect();
    MetricHistory {
        key: key.metric.clone(),
        title: def.title.clone(),
        unit: def.unit.clone(),
        scale: def.scale,
        group: def.group.clone(),
        lens: key.lens.clone(),
        kind: key.kind,
        image: key.image.clone(),
        machine: key.machine.clone(),
        setting: key.setting.clone(),
        floor,
        floor_source,
        segments: segments(&values, &found, floor),
        change_points: found.iter().map(|c| change_at(cx, line, series, c)).collect(),
        points,
    }
}

fn count_floor_source(def: &MetricDef, noise: Option<&NoiseProfile>) -> String {
    match noise.filter(|n| n.metrics.get(&def.key).is_some_and(|m| m.pairs >= 1)) {
        Some(n) => format!("the A/A noise profile of run {}", n.run_id),
        None => "the spec's relative floor".into(),
    }
}

fn measured_floor_source(def: &MetricDef, noise: Option<&NoiseProfile>) -> String {
    match noise.map(|n| (n, n.floor(&def.key))) {
        Some((n, Ok(_))) => format!("the A/A noise profile of run {} on this machine", n.run_id),
        _ => "the spec's floor".into(),
    }
}

/// The stretches between change points, with their level and band.
fn segments(values: &[Vec<f64>], found: &[ChangePoint], floor: f64) -> Vec<Segment> {
    let bounds: Vec<usize> = std::iter::once(0).chain(found.iter().map(|c| c.index)).chain([values.len()]).collect();
    bounds
        .windows(2)
        .filter(|w| w[1] > w[0])
        .filter_map(|w| {
            let all: Vec<f64> = values[w[0]..w[1]].iter().flatten().copied().collect();
            let level = crate::stats::median(&all)?;
            Some(Segment { from: w[0], to: w[1] - 1, level, low: level * (1.0 - floor), high: level * (1.0 + floor) })
        })
        .collect()
}

/// A change point between the last point with values before it and its own point.
fn change_at(cx: &Context<'_>, line: &Line, series: &Series, c: &ChangePoint) -> ChangeAt {
    let after_at = series.points[c.index].at;
    let before_at = series.points[..c.index].iter().rev().find(|p| !p.values.is_empty()).map_or(after_at, |p| p.at);
    let (before_commit, after_commit) = (&line.commits[before_at].commit, &line.commits[after_at].commit);
    let unrecorded = cx.first_parents.and_then(|fp| {
        let position = |c: &str| fp.iter().position(|x| x == c);
        Some(position(after_commit)?.saturating_sub(position(before_commit)? + 1))
    });
    ChangeAt {
        before_at,
        after_at,
        before_commit: before_commit.clone(),
        after_commit: after_commit.clone(),
        before: c.before,
        after: c.after,
        size: c.size,
        p_value: (series.key.kind == Kind::Measured).then_some(c.p_value),
        unrecorded,
        bisection: None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::series::{self, Kind};
    use super::super::store::{CommitInfo, Record, TrialValue};
    use super::*;

    /// 16 commits, recorded every 4th and the last; `work` +30 % wall from commit 10, its count
    /// +2 % from commit 6.
    fn records() -> (Vec<Record>, Vec<String>) {
        let first_parents: Vec<String> = (0..16).map(|i| format!("{i:040x}")).collect();
        let recorded = [0usize, 4, 8, 12, 15];
        let records = recorded
            .iter()
            .map(|&i| {
                let wall = if i >= 10 { 0.13 } else { 0.1 };
                let count = if i >= 6 { 3.06e9 } else { 3e9 };
                let mut values: Vec<TrialValue> = (0..5)
                    .map(|t| TrialValue {
                        metric: "work".into(),
                        lens: "wall".into(),
                        trial: t,
                        value: wall * (1.0 + 0.01 * (f64::from(t) - 2.0)),
                        steal: Some(0.0),
                        throttled: None,
                        flagged: false,
                    })
                    .collect();
                values.push(TrialValue {
                    metric: "work.instructions".into(),
                    lens: "instructions".into(),
                    trial: 0,
                    value: count,
                    steal: None,
                    throttled: None,
                    flagged: false,
                });
                Record {
                    record_id: format!("r{i}/record"),
                    run_id: format!("r{i}"),
                    origin: "record".into(),
                    spec: "demo".into(),
                    repository: "/repo".into(),
                    commit: CommitInfo {
                        commit: first_parents[i].clone(),
                        committed_at: "2026-12-01T00:00:00Z".into(),
                        subject: format!("commit {i}"),
                    },
                    image: "node:24".into(),
                    machine: "m".into(),
                    setting: "1 CPU".into(),
                    recorded_at: "2026-12-02T00:00:00Z".into(),
                    values,
                }
            })
            .collect();
        (records, first_parents)
    }

    #[test]
    fn both_steps_are_found_with_their_sizes_and_the_commits_on_both_sides() {
        let (records, first_parents) = records();
        let line = series::line(&records, Some(&first_parents));
        let all = series::series(&records, &line);
        let defs = [
            crate::spec::metrics::built_in("cold").map(|d| MetricDef {
                key: "work".into(),
                title: "Fixed CPU work".into(),
                group: "CLI".into(),
                absolute: 0.0,
                relative: 0.05,
                ..d
            }),
            crate::spec::metrics::built_in("cold").map(|d| MetricDef {
                key: "work.instructions".into(),
                title: "Fixed CPU work (instructions)".into(),
                unit: "count".into(),
                scale: 1.0,
                relative: 0.005,
                group: "CLI".into(),
                ..d
            }),
        ]
        .map(Option::unwrap);
        let cx = Context {
            spec: "demo",
            defs: &defs,
            noise: &|_, _| None,
            first_parents: Some(&first_parents),
            line: None,
            generated_at: "now".into(),
        };
        let history = analyse(&cx, &line, &all);
        assert_eq!(history.metrics.iter().map(|m| m.key.as_str()).collect::<Vec<_>>(), ["work", "work.instructions"]);
        let wall = &history.metrics[0];
        assert_eq!(wall.kind, Kind::Measured);
        assert_eq!(wall.change_points.len(), 1, "{:?}", wall.change_points);
        let c = &wall.change_points[0];
        assert_eq!((c.before_at, c.after_at, c.unrecorded), (2, 3, Some(3)), "between commits 8 and 12");
        assert_eq!(c.after_commit, first_parents[12]);
        assert!((c.size - 0.3).abs() < 1e-9, "{c:?}");
        assert_eq!(wall.segments.len(), 2);
        assert!((wall.segments[0].high / wall.segments[0].level - 1.05).abs() < 1e-12, "the band is ±floor");
        let count = &history.metrics[1];
        assert_eq!(count.kind, Kind::Count);
        let c = &count.change_points[0];
        assert_eq!(
            (c.before_commit.as_str(), c.after_commit.as_str()),
            (first_parents[4].as_str(), first_parents[8].as_str())
        );
        assert_eq!((c.unrecorded, c.p_value), (Some(3), None));
        assert!((c.size - 0.02).abs() < 1e-12);
    }
}
