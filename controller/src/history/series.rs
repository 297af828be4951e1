//! A spec's records as series, pure: one series per metric and what makes its values
//! comparable. Counts (the instruction lens) are the same on every machine and day, so a count's
//! series is its metric on one image, whatever machine measured it; every other value depends on
//! the machine, so its series is its metric on one image, one machine and one setting. Within a
//! series, one point per commit: the trial values of every record of that commit, pooled (main's
//! commit measured as the base of many pull requests gathers them all), in the order of the
//! branch's first-parent line. Trials whose conditions are flagged (heavy steal, throttling) are
//! kept out of a measured point and counted.

use std::collections::BTreeMap;

use super::store::{CommitInfo, Record};

/// How a series' values compare, and so how its change points are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Counts of the instruction lens: comparable everywhere, an exact step rule.
    Count,
    /// Wall time and every other measured value: comparable within one machine and setting,
    /// E-Divisive means.
    Measured,
}

impl Kind {
    /// The kind of a metric seen through `lens` (`crate::report::lens::Lens::name`).
    pub fn of_lens(lens: &str) -> Kind {
        if lens == crate::report::lens::Lens::Instructions.name() { Kind::Count } else { Kind::Measured }
    }
}

/// What a series' values have in common.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SeriesKey {
    pub metric: String,
    pub kind: Kind,
    pub lens: String,
    pub image: String,
    /// The machine and setting, for a measured series (None for counts).
    pub machine: Option<String>,
    pub setting: Option<String>,
}

/// One commit of a series.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Its place in the line's recorded commits ([`Line::commits`]).
    pub at: usize,
    /// Every trial value of every record of the commit (flagged trials left out).
    pub values: Vec<f64>,
    /// Trials left out for their conditions.
    pub flagged: usize,
    /// Records pooled into it.
    pub records: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub key: SeriesKey,
    /// In line order; commits without a value of this series have no point.
    pub points: Vec<Point>,
}

/// The recorded commits of a line, in its order, and the records left out of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub commits: Vec<CommitInfo>,
    /// Records of commits not on the line (a pull request's head, another branch).
    pub off_line: usize,
}

/// Orders the records' commits: by `line` (a first-parent line, oldest first) when given, the
/// records of other commits left out; else by commit time, then by when first recorded.
pub fn line(records: &[Record], first_parents: Option<&[String]>) -> Line {
    let places: Option<std::collections::HashMap<&str, usize>> =
        first_parents.map(|line| line.iter().enumerate().map(|(i, c)| (c.as_str(), i)).collect());
    let mut commits: Vec<(usize, CommitInfo)> = Vec::new();
    let mut off_line = 0;
    for (n, record) in records.iter().enumerate() {
        let rank = match &places {
            Some(places) => match places.get(record.commit.commit.as_str()).copied() {
                Some(p) => p,
                None => {
                    off_line += 1;
                    continue;
                }
            },
            None => n,
        };
        // A commit's first record gives its place; later ones of the same commit join it.
        match commits.iter_mut().find(|(_, c)| c.commit == record.commit.commit) {
            Some((r, _)) => *r = (*r).min(rank),
            None => commits.push((rank, record.commit.clone())),
        }
    }
    if places.is_none() {
        // Stable: commits of one time keep the order they were first recorded in.
        commits.sort_by(|a, b| a.1.committed_at.cmp(&b.1.committed_at).then(a.0.cmp(&b.0)));
    } else {
        commits.sort_by_key(|(rank, _)| *rank);
    }
    Line { commits: commits.into_iter().map(|(_, c)| c).collect(), off_line }
}

/// The series of `records` along `line`, in the order of their keys.
pub fn series(records: &[Record], line: &Line) -> Vec<Series> {
    let places: std::collections::HashMap<&str, usize> =
        line.commits.iter().enumerate().map(|(i, c)| (c.commit.as_str(), i)).collect();
    let mut found: BTreeMap<SeriesKey, BTreeMap<usize, Point>> = BTreeMap::new();
    for record in records {
        let Some(&at) = places.get(record.commit.commit.as_str()) else { continue };
        let mut seen: Vec<SeriesKey> = Vec::new();
        for value in &record.values {
            let kind = Kind::of_lens(&value.lens);
            let measured = kind == Kind::Measured;
            let key = SeriesKey {
                metric: value.metric.clone(),
                kind,
                lens: value.lens.clone(),
                image: record.image.clone(),
                machine: measured.then(|| record.machine.clone()),
                setting: measured.then(|| record.setting.clone()),
            };
            let point = found.entry(key.clone()).or_default().entry(at).or_insert(Point {
                at,
                values: Vec::new(),
                flagged: 0,
                records: 0,
            });
            if !seen.contains(&key) {
                point.records += 1;
                seen.push(key);
            }
            match value.flagged && measured {
                true => point.flagged += 1,
                false if value.value.is_finite() => point.values.push(value.value),
                false => {}
            }
        }
    }
    found.into_iter().map(|(key, points)| Series { key, points: points.into_values().collect() }).collect()
}

impl Series {
    /// Each point's values, one slot per point (empty for a point of flagged trials only).
    pub fn values(&self) -> Vec<Vec<f64>> {
        self.points.iter().map(|p| p.values.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::store::TrialValue;
    use super::*;

    fn record(run: &str, commit: &str, at: &str, machine: &str, values: &[(&str, &str, f64, bool)]) -> Record {
        Record {
            record_id: format!("{run}/base"),
            run_id: run.into(),
            origin: "base".into(),
            spec: "demo".into(),
            repository: "/repo".into(),
            commit: CommitInfo { commit: commit.into(), committed_at: at.into(), subject: format!("subject {commit}") },
            image: "node:24".into(),
            machine: machine.into(),
            setting: "1 CPU, 2 GiB, duet".into(),
            recorded_at: "2026-12-01T00:00:00Z".into(),
            values: values
                .iter()
                .enumerate()
                .map(|(t, (metric, lens, value, flagged))| TrialValue {
                    metric: metric.to_string(),
                    lens: lens.to_string(),
                    trial: t as u32,
                    value: *value,
                    steal: None,
                    throttled: None,
                    flagged: *flagged,
                })
                .collect(),
        }
    }

    #[test]
    fn counts_pool_across_machines_and_measured_values_do_not() {
        let records = [
            record(
                "r1",
                "c1",
                "2026-01-01",
                "m1",
                &[("work", "wall", 1.0, false), ("work.instructions", "instructions", 5.0, false)],
            ),
            record(
                "r2",
                "c1",
                "2026-01-01",
                "m2",
                &[("work", "wall", 2.0, false), ("work.instructions", "instructions", 5.0, false)],
            ),
            record("r3", "c2", "2026-01-02", "m1", &[("work", "wall", 1.1, false), ("work", "wall", 9.0, true)]),
        ];
        let line = line(&records, None);
        assert_eq!(line.commits.iter().map(|c| c.commit.as_str()).collect::<Vec<_>>(), ["c1", "c2"]);
        let all = series(&records, &line);
        let count = all.iter().find(|s| s.key.kind == Kind::Count).unwrap();
        assert_eq!((count.key.machine.as_deref(), count.points.len()), (None, 1));
        assert_eq!((count.points[0].values.as_slice(), count.points[0].records), (&[5.0, 5.0][..], 2));
        let m1 = all.iter().find(|s| s.key.machine.as_deref() == Some("m1")).unwrap();
        assert_eq!(m1.points.iter().map(|p| p.at).collect::<Vec<_>>(), [0, 1]);
        assert_eq!((m1.points[1].values.as_slice(), m1.points[1].flagged), (&[1.1][..], 1), "the flagged trial is out");
        assert_eq!(all.iter().filter(|s| s.key.metric == "work").count(), 2, "one series per machine");
    }

    #[test]
    fn a_first_parent_line_orders_the_commits_and_leaves_others_out() {
        // Same commit time (commits made within one second): the line decides.
        let records = [
            record("r1", "c3", "t", "m", &[("work", "wall", 3.0, false)]),
            record("r2", "c1", "t", "m", &[("work", "wall", 1.0, false)]),
            record("r3", "pr", "t", "m", &[("work", "wall", 9.0, false)]),
            record("r4", "c2", "t", "m", &[("work", "wall", 2.0, false)]),
        ];
        let first_parents: Vec<String> = ["c0", "c1", "c2", "c3"].map(String::from).to_vec();
        let line = line(&records, Some(&first_parents));
        assert_eq!(line.commits.iter().map(|c| c.commit.as_str()).collect::<Vec<_>>(), ["c1", "c2", "c3"]);
        assert_eq!(line.off_line, 1);
        let all = series(&records, &line);
        assert_eq!(all[0].values(), [vec![1.0], vec![2.0], vec![3.0]]);
    }
}
