//! A run resolved once, before anything is made: the final plan (the command line applied to
//! the spec, no `auto` left), its schedule, the revisions, the noise profile and the open
//! ledger. The walk below reads it; nothing below changes the plan.

use std::path::Path;

use anyhow::{Context, bail};

use super::options::{RunOptions, check};
use super::output::NoiseProfile;
use super::schedule::{self, CpuSets, Stage};
use crate::cost::ledger::{Ledger, this_machine};
use crate::report::{self, Revision};
use crate::spec::{Plan, SourceSettings};

/// A run as it will be walked.
pub struct Resolved {
    /// What was asked for, every value checked.
    pub(super) opts: RunOptions,
    /// The spec with the command line applied: trials, pairs' order, ttl, budget, rates.
    pub(super) plan: Plan,
    /// Notes for the report (raised install trials, adaptive pairs off in a shard, the noise
    /// profile's provenance or why none was read).
    pub(super) notes: Vec<String>,
    /// The floors' noise profile: `--noise`, or the ledger's A/A runs pooled.
    pub(super) noise: Option<NoiseProfile>,
    /// Whether `noise` was found in the ledger (the run keeps a copy in its directory, which a
    /// resume reads).
    pub(super) noise_from_ledger: bool,
    pub(super) base: Revision,
    pub(super) head: Revision,
    /// The timed trials' schedule in its order, built once.
    pub(super) stages: Vec<Stage>,
    /// The CPUs each pair's sandboxes are given, and a duet's two sets, resolved with the
    /// schedule.
    pub(super) cpus: CpuSets,
    /// The ledger, opened once for the whole run: its noise profiles were read from it, its
    /// entry is begun in it, dead runs are reconciled in it.
    pub(super) ledger: Option<Ledger>,
}

impl Resolved {
    /// The final plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The base and head revisions, resolved to commits.
    pub fn revisions(&self) -> (&Revision, &Revision) {
        (&self.base, &self.head)
    }
}

/// Resolves a new run: the spec loaded and the options applied (each checked, with the error
/// naming the option), the revisions resolved to commits, the ledger opened (a ledger that
/// cannot be opened stops the run here, before its directory) and its noise profiles pooled.
pub async fn resolve(opts: RunOptions) -> anyhow::Result<Resolved> {
    let (plan, mut notes, noise) = plan_for(&opts)?;
    let (base, head) = revisions(&plan, &opts.base, &opts.head).await?;
    let ledger = opts.ledger.as_deref().map(Ledger::open).transpose()?;
    // An A/A run too: its verdicts are judged against the runs before it (its own noise.json
    // is from its pairs alone).
    let from_ledger = match ledger.as_ref().filter(|_| noise.is_none() && opts.noise_from_ledger) {
        Some(ledger) => noise_from_ledger(ledger, &plan, &mut notes),
        None => None,
    };
    let noise_from_ledger = from_ledger.is_some();
    Resolved::new(opts, plan, notes, noise.or(from_ledger), noise_from_ledger, (base, head), ledger)
}

/// Resolves a resumed run: the options its mark recorded applied to the spec again, the
/// revisions as it recorded them, and the ledger already opened (dead attempts reconciled).
pub(super) fn again(
    opts: RunOptions,
    (base, head): (Revision, Revision),
    ledger: Option<Ledger>,
) -> anyhow::Result<Resolved> {
    let (plan, notes, noise) = plan_for(&opts)?;
    Resolved::new(opts, plan, notes, noise, false, (base, head), ledger)
}

impl Resolved {
    fn new(
        opts: RunOptions,
        plan: Plan,
        notes: Vec<String>,
        noise: Option<NoiseProfile>,
        noise_from_ledger: bool,
        (base, head): (Revision, Revision),
        ledger: Option<Ledger>,
    ) -> anyhow::Result<Resolved> {
        let stages = schedule::for_run(&plan, opts.pairs, opts.shard, opts.record);
        let cpus = CpuSets::for_run(&plan, opts.pairs)?;
        Ok(Resolved { opts, plan, notes, noise, noise_from_ledger, base, head, stages, cpus, ledger })
    }
}

/// The spec with `opts` applied, the notes for the report and the noise profile `--noise` names.
fn plan_for(opts: &RunOptions) -> anyhow::Result<(Plan, Vec<String>, Option<NoiseProfile>)> {
    let mut plan = crate::spec::load(&opts.spec).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (notes, noise) = apply_options(&mut plan, opts)?;
    Ok((plan, notes, noise))
}

/// Applies the command line to the plan, checking each value; returns notes for the report and
/// the noise profile asked for.
fn apply_options(plan: &mut Plan, opts: &RunOptions) -> anyhow::Result<(Vec<String>, Option<NoiseProfile>)> {
    if let Some(n) = opts.trials {
        check::trials(n).map_err(anyhow::Error::msg)?;
        // A phase with nothing to do keeps its none.
        for trials in [&mut plan.trials.measure, &mut plan.trials.runtime, &mut plan.trials.transport] {
            if *trials > 0 {
                *trials = n;
            }
        }
    }
    // The sandboxes expire after the longest this run can take: the plan's worst case with the
    // trials asked for here, or the run timeout (the run is halted then), and the margin for
    // teardown. The spec's ttl is at least the worst case (`check` refuses less).
    plan.sandbox.ttl = crate::spec::default_ttl(plan.worst_case().min(opts.run_timeout));
    plan.check_host()?;
    check::pairs(opts.pairs).map_err(anyhow::Error::msg)?;
    plan.trials.order = plan.trials.order.resolve(opts.pairs, plan.duet_cpus_here().is_ok());
    if opts.record {
        if opts.pairs > 1 || opts.shard.is_some() {
            bail!("a record measures one revision in one sandbox: it takes neither --pairs nor --shard");
        }
        // One sandbox: no other side to interleave or share the machine with.
        plan.trials.order = crate::spec::Order::Abba;
    }
    if plan.trials.order == crate::spec::Order::Duet && opts.pairs > 1 {
        bail!(
            "{}: trials.order = \"duet\" runs one pair at a time, its two sandboxes on CPUs of their own; --pairs {} \
             asks for more",
            plan.spec_path.display(),
            opts.pairs
        );
    }
    if let Some(b) = opts.budget_usd {
        plan.cost.budget_usd = Some(check::budget(b).map_err(anyhow::Error::msg)?);
    }
    for (value, field, name) in [
        (opts.rates.cpu_usd_per_hour, &mut plan.cost.cpu_usd_per_hour, "--cpu-usd-per-hour"),
        (opts.rates.memory_usd_per_gb_hour, &mut plan.cost.memory_usd_per_gb_hour, "--memory-usd-per-gb-hour"),
        (opts.rates.disk_usd_per_gb_hour, &mut plan.cost.disk_usd_per_gb_hour, "--disk-usd-per-gb-hour"),
    ] {
        if let Some(v) = value {
            *field = check::rate(name, v).map_err(anyhow::Error::msg)?;
        }
    }
    let mut noise = None;
    if let Some(path) = &opts.noise {
        let mut profile = NoiseProfile::load(path)?;
        if profile.spec != plan.name {
            bail!("the noise profile {} was measured for spec {:?}, not {:?}", path.display(), profile.spec, plan.name);
        }
        profile.min_floor = Some(plan.min_floor);
        noise = Some(profile);
    }
    let mut notes = Vec::new();
    if opts.shard.is_some() && report::Sequential::for_plan(plan).is_some() {
        notes.push(format!(
            "adaptive pairs are off in a sharded run (each shard sees only its share): the planned {} pairs are run, not up to trials.max_pairs ({})",
            plan.gated_trials(&plan.trials.gate),
            plan.trials.max_pairs
        ));
    }
    let install = schedule::sharded_install_trials(plan.trials.install, opts.pairs as usize, opts.shard);
    if install != plan.trials.install {
        let shards = opts.shard.map(|s| format!(" of each of the {} shards", s.count)).unwrap_or_default();
        notes.push(format!(
            "install trials raised from {} to {install}: each of the {} pairs{shards} needs its own first installation",
            plan.trials.install, opts.pairs
        ));
        plan.trials.install = install;
    }
    Ok((notes, noise))
}

async fn revisions(plan: &Plan, base: &str, head: &str) -> anyhow::Result<(Revision, Revision)> {
    let resolve = |rev: &str| {
        let rev = rev.to_string();
        async move {
            let commit = match &plan.source {
                SourceSettings::Local { repository } => crate::source::resolve(repository, &rev).await?,
                SourceSettings::Url { .. } => {
                    if rev.len() != 40 || !rev.chars().all(|c| c.is_ascii_hexdigit()) {
                        bail!("with a git URL source, revisions must be full 40-character commit ids; got {rev:?}");
                    }
                    rev.to_ascii_lowercase()
                }
                SourceSettings::None => rev.clone(),
            };
            anyhow::Ok(Revision { rev, commit })
        }
    };
    Ok((resolve(base).await.context("--base")?, resolve(head).await.context("--head")?))
}

/// Where a run keeps the noise profile it found in the ledger (a resume reads it there).
pub(super) const NOISE_USED: &str = "noise-used.json";

/// Keeps the profile a run found in the ledger in its directory as [`NOISE_USED`]; a profile
/// that cannot be kept is not used (a resume could not read it), and a note says why.
pub(super) fn keep_noise_used(noise: &mut Option<NoiseProfile>, dir: &Path, notes: &mut Vec<String>) -> bool {
    let Some(profile) = noise.as_ref() else { return false };
    let kept = serde_json::to_vec_pretty(profile).map_err(anyhow::Error::from);
    if let Err(err) = kept.and_then(|json| Ok(std::fs::write(dir.join(NOISE_USED), json)?)) {
        notes.push(format!("the noise profile found in the ledger cannot be kept in the run directory: {err:#}"));
        *noise = None;
        return false;
    }
    true
}

/// Every A/A noise profile the ledger keeps of this spec, image and machine, pooled
/// ([`NoiseProfile::pool`]); a note says which it is, or why none (or some) could be read.
fn noise_from_ledger(ledger: &Ledger, plan: &Plan, notes: &mut Vec<String>) -> Option<NoiseProfile> {
    let found = ledger.noise_profiles(&plan.name, &plan.sandbox.image, &this_machine());
    let stored = match found {
        Ok(stored) => stored,
        Err(err) => {
            notes.push(format!("no noise profile from the ledger: {err:#}"));
            return None;
        }
    };
    let mut runs = Vec::new();
    let mut latest_at = String::new();
    for stored in stored {
        match serde_json::from_str::<NoiseProfile>(&stored.profile) {
            Ok(profile) => {
                runs.push(profile);
                latest_at = stored.recorded_at;
            }
            Err(err) => notes.push(format!(
                "the ledger's noise profile of A/A run {} cannot be read: {err}; the floors pool the others",
                stored.run_id
            )),
        }
    }
    let mut profile = NoiseProfile::pool(&runs)?;
    let earlier = match runs.len() - 1 {
        0 => String::new(),
        1 => ", pooled with the one before it".to_string(),
        n => format!(", pooled with the {n} before it"),
    };
    profile.found = Some(format!("the ledger's latest A/A run of this spec, image and machine, {latest_at}{earlier}"));
    profile.min_floor = Some(plan.min_floor);
    Some(profile)
}
