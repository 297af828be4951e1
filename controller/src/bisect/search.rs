//! The search of `sandbench bisect` as a value: the commits from good (index 0) to bad (the
//! last), what was read at each one visited, the next one to visit and the answer. No sandbox
//! here; [`super`] measures what [`Search::next`] asks for.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A commit's value is on the bad side when it has come at least this far from good towards bad.
const BAD_SIDE: f64 = 0.5;
/// The first bad commit is "the" commit when its own step is at least this share of the change.
const ONE_COMMIT: f64 = 0.8;
/// Where the change is spread, a value within this share of an end counts as that end.
const AT_AN_END: f64 = 0.1;

/// What was read at a visited commit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reading {
    Value(f64),
    /// It could not be measured (it did not build, install or run), as `git bisect skip`.
    Skipped(String),
}

/// The answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// The commit at `index` is the first on the bad side, and its own step is `share` of the
    /// change from good to bad.
    FirstBad { index: usize, share: f64 },
    /// No one commit: the change builds up over the commits `from..=to` (indices); the largest
    /// step seen, at `largest`, is `share` of it.
    Spread { from: usize, to: usize, largest: usize, share: f64 },
    /// The first bad commit is one of `candidates`: the others in between were skipped (or the
    /// step limit was reached).
    Unresolved { candidates: Vec<usize>, why: String },
    /// Good and bad do not differ: there is nothing to look for.
    NoChange,
}

#[derive(Debug, Clone)]
pub struct Search {
    /// Commits from good to bad, both included.
    len: usize,
    good: f64,
    bad: f64,
    /// Values at or below the tolerance are no change.
    tolerance: f64,
    readings: BTreeMap<usize, Reading>,
    /// The last index known to be on the good side, and the first known on the bad side.
    lo: usize,
    hi: usize,
}

impl Search {
    /// A search over `len` commits (at least 2: good and bad), whose ends read `good` and `bad`;
    /// a relative difference of at most `tolerance` between them is no change.
    pub fn new(len: usize, good: f64, bad: f64, tolerance: f64) -> Search {
        let last = len.saturating_sub(1);
        let readings = BTreeMap::from([(0, Reading::Value(good)), (last, Reading::Value(bad))]);
        Search { len, good, bad, tolerance, readings, lo: 0, hi: last }
    }

    fn changed(&self) -> bool {
        let scale = self.good.abs().max(self.bad.abs());
        scale > 0.0 && (self.bad - self.good).abs() / scale > self.tolerance && self.len >= 2
    }

    /// How far `value` is from good towards bad (0 at good, 1 at bad).
    pub fn progress(&self, value: f64) -> f64 {
        (value - self.good) / (self.bad - self.good)
    }

    fn value(&self, index: usize) -> Option<f64> {
        match self.readings.get(&index) {
            Some(Reading::Value(v)) => Some(*v),
            _ => None,
        }
    }

    /// The next commit to visit (an index), or None when the answer is known: the middle of what
    /// is left, or the nearest to it not yet visited where the middle was skipped.
    pub fn next(&self) -> Option<usize> {
        if !self.changed() || self.hi <= self.lo + 1 {
            return None;
        }
        let mid = (self.lo + self.hi) / 2;
        (0..self.hi - self.lo)
            .flat_map(|d| [mid + d, mid.wrapping_sub(d)])
            .filter(|&i| i > self.lo && i < self.hi)
            .find(|i| !self.readings.contains_key(i))
    }

    /// Records what was read at `index`.
    pub fn record(&mut self, index: usize, reading: Reading) {
        if let Reading::Value(v) = reading
            && index > self.lo
            && index < self.hi
        {
            match self.progress(v) >= BAD_SIDE {
                true => self.hi = index,
                false => self.lo = index,
            }
        }
        self.readings.insert(index, reading);
    }

    pub fn readings(&self) -> &BTreeMap<usize, Reading> {
        &self.readings
    }

    /// The answer from what has been read (call when [`Search::next`] is None, or to give up).
    pub fn outcome(&self) -> Outcome {
        if !self.changed() {
            return Outcome::NoChange;
        }
        if self.hi > self.lo + 1 {
            let why = match self.next() {
                Some(_) => "the step limit was reached".to_string(),
                None => "the commits between could not be measured (skipped)".to_string(),
            };
            return Outcome::Unresolved { candidates: (self.lo + 1..=self.hi).collect(), why };
        }
        let (Some(before), Some(after)) = (self.value(self.lo), self.value(self.hi)) else {
            return Outcome::Unresolved { candidates: vec![self.hi], why: "no values".into() };
        };
        let share = self.progress(after) - self.progress(before);
        if share >= ONE_COMMIT {
            return Outcome::FirstBad { index: self.hi, share };
        }
        // Where it builds up: after the last commit still at good, up to the first already at bad.
        let at = |i: &usize| self.value(*i).map(|v| self.progress(v));
        let from = self.readings.keys().filter(|i| at(i).is_some_and(|p| p <= AT_AN_END)).max().copied().unwrap_or(0);
        let to = self.readings.keys().filter(|i| at(i).is_some_and(|p| p >= 1.0 - AT_AN_END)).min().copied();
        let to = to.unwrap_or(self.len - 1);
        Outcome::Spread { from: from + 1, to, largest: self.hi, share }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a search over `values` (index 0 good, the last bad; None: skipped), returning the
    /// outcome and the indices visited in order.
    fn search(values: &[Option<f64>]) -> (Outcome, Vec<usize>) {
        let mut s = Search::new(values.len(), values[0].unwrap(), values[values.len() - 1].unwrap(), 0.0005);
        let mut visited = Vec::new();
        while let Some(i) = s.next() {
            visited.push(i);
            s.record(i, values[i].map_or(Reading::Skipped("build failed".into()), Reading::Value));
        }
        (s.outcome(), visited)
    }

    fn counts(change_at: &[(usize, f64)], len: usize) -> Vec<Option<f64>> {
        (0..len)
            .map(|i| Some(100.0 + change_at.iter().filter(|(at, _)| i >= *at).map(|(_, d)| d).sum::<f64>()))
            .collect()
    }

    #[test]
    fn one_commit_is_found_in_log2_steps_wherever_it_is() {
        for at in 1..9 {
            let (outcome, visited) = search(&counts(&[(at, 2.0)], 9));
            assert_eq!(outcome, Outcome::FirstBad { index: at, share: 1.0 }, "change at {at}");
            assert!(visited.len() <= 3, "change at {at}: {visited:?}");
        }
    }

    #[test]
    fn a_change_spread_over_three_commits_is_said_to_be() {
        let values = counts(&[(2, 1.0), (4, 1.0), (6, 1.0)], 9);
        let (outcome, _) = search(&values);
        let Outcome::Spread { from, to, share, .. } = outcome else { panic!("{outcome:?}") };
        assert!(from <= 2 && to >= 6, "{from}..{to}");
        assert!((share - 1.0 / 3.0).abs() < 1e-9, "{share}");
    }

    #[test]
    fn skipped_commits_are_stepped_around_and_named_when_they_hide_the_answer() {
        // The middle does not build: its neighbour is visited instead.
        let mut values = counts(&[(5, 2.0)], 9);
        values[6] = None;
        let (outcome, visited) = search(&values);
        assert_eq!(outcome, Outcome::FirstBad { index: 5, share: 1.0 });
        assert_eq!(visited, [4, 6, 7, 5]);
        // The commit just before the first bad one does not build: it could be either.
        let mut values = counts(&[(5, 2.0)], 9);
        values[4] = None;
        let mut s = Search::new(9, 100.0, 102.0, 0.0005);
        for i in [3, 4, 5] {
            s.record(i, values[i].map_or(Reading::Skipped("x".into()), Reading::Value));
        }
        assert_eq!(s.next(), None);
        let Outcome::Unresolved { candidates, .. } = s.outcome() else { panic!() };
        assert_eq!(candidates, [4, 5]);
    }

    #[test]
    fn ends_that_agree_leave_nothing_to_look_for() {
        let (outcome, visited) = search(&counts(&[], 9));
        assert_eq!((outcome, visited), (Outcome::NoChange, vec![]));
        // Improvements are searched for like regressions.
        let (outcome, _) = search(&counts(&[(3, -5.0)], 9));
        assert_eq!(outcome, Outcome::FirstBad { index: 3, share: 1.0 });
    }
}
