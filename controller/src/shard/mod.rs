//! Sharding a run across machines: `--shard I/N` runs a balanced share of a spec's pairs, and
//! [`crate::merge`] combines the shards' run directories into one.
//!
//! A *pair* is trial `t` of base and trial `t` of head of one timed phase (they run back to back,
//! ABBA, in the same sandbox pair). Shard `I` of `N` owns the trials `t` with `t mod N = I − 1`,
//! in every phase alike: each shard gets ⌈P/N⌉ or ⌊P/N⌋ of a phase's P pairs, the shards are
//! disjoint and together cover every pair, and a trial's owner is known from its number alone.
//! Both trials of a pair always come from the same shard, so from the same machine.
//!
//! A shard's run directory holds `shard.json` ([`ShardRecord`]): the shard, the trials it owns
//! per phase, and what [`crate::merge`] checks the shards agree on (spec, plan, base and head commits).

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::source::Revision;

/// The file in a shard's run directory that says which shard it is.
pub const SHARD_FILE: &str = "shard.json";

/// Most shards a run may be split into.
pub const MAX_SHARDS: u32 = 64;

/// Shard `index` (1-based) of `count`; read from JSON only when 1 ≤ index ≤ count ≤ [`MAX_SHARDS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "RawShard")]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

/// A shard as the JSON has it, before it is checked.
#[derive(Deserialize)]
struct RawShard {
    index: u32,
    count: u32,
}

impl TryFrom<RawShard> for Shard {
    type Error = String;

    fn try_from(raw: RawShard) -> Result<Shard, String> {
        format!("{}/{}", raw.index, raw.count).parse()
    }
}

impl Shard {
    /// Whether trial `trial` (of any phase) belongs to this shard.
    pub fn owns(&self, trial: u32) -> bool {
        self.count > 0 && trial % self.count == self.index.wrapping_sub(1)
    }

    /// The trials of a phase of `count` trials this shard runs, in order.
    pub fn trials(&self, count: u32) -> Vec<u32> {
        (0..count).filter(|t| self.owns(*t)).collect()
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl std::str::FromStr for Shard {
    type Err = String;

    /// `I/N`, 1 ≤ I ≤ N ≤ [`MAX_SHARDS`].
    fn from_str(text: &str) -> Result<Shard, String> {
        let expected = "expected I/N (shard I of N, 1 ≤ I ≤ N), e.g. 1/2";
        let (i, n) = text.trim().split_once('/').ok_or_else(|| format!("{text:?}: {expected}"))?;
        let number =
            |s: &str| s.trim().parse::<u32>().map_err(|_| format!("{text:?}: {s:?} is not a number; {expected}"));
        let (index, count) = (number(i)?, number(n)?);
        if count == 0 || count > MAX_SHARDS {
            return Err(format!("{text:?}: the number of shards must be from 1 to {MAX_SHARDS}, got {count}"));
        }
        if index == 0 || index > count {
            return Err(format!("{text:?}: the shard must be from 1 to {count}, got {index}"));
        }
        Ok(Shard { index, count })
    }
}

/// clap's parser of `--shard`.
pub fn parse_shard(text: &str) -> Result<Shard, String> {
    text.parse()
}

/// One shard of a run as its report and `shard.json` record it: which shard, its run, and the
/// trials (pair indices) it owns per timed phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardPart {
    pub shard: Shard,
    pub run_id: String,
    pub trials: BTreeMap<String, Vec<u32>>,
}

impl ShardPart {
    /// Shard `shard` of a plan whose timed phases have these trial counts.
    pub fn new(shard: Shard, run_id: &str, phases: &[(sandbench_proto::Phase, u32)]) -> ShardPart {
        let trials = phases.iter().filter(|(_, n)| *n > 0).map(|&(p, n)| (p.to_string(), shard.trials(n))).collect();
        ShardPart { shard, run_id: run_id.to_string(), trials }
    }
}

/// `shard.json`: the shard, and the identity of what it measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardRecord {
    #[serde(flatten)]
    pub part: ShardPart,
    pub spec: String,
    pub base: Revision,
    pub head: Revision,
}

impl ShardRecord {
    pub fn save(&self, dir: &Path) -> anyhow::Result<()> {
        let path = dir.join(SHARD_FILE);
        std::fs::write(&path, serde_json::to_string_pretty(self)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))
    }

    /// The record of a run directory; an error naming the directory when it has none.
    pub fn load(dir: &Path) -> anyhow::Result<ShardRecord> {
        let path = dir.join(SHARD_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => anyhow::bail!(
                "{}: not a shard's run directory (no {SHARD_FILE}; run it with --shard I/N)",
                dir.display()
            ),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        serde_json::from_str(&text).with_context(|| format!("{} is not a sandbench shard record", path.display()))
    }
}
