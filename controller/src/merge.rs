//! `sandbench merge DIR… [--out DIR]`: combines the run directories of the shards of one run
//! (same spec, plan, base and head; every shard 1..N exactly once; each one finished) into one
//! run directory, as if one run had measured every pair:
//!
//! - `observations.jsonl`: every shard's events, in shard order, each with `shard` (`I/N`) and
//!   `shard_run` (the shard's run id) added; trial numbers are the plan's, so a pair's identity
//!   (phase, trial, side) is unique across shards and names its shard (`trial mod N`);
//! - `sandboxes/<id>/`: every shard's sandbox folders (ids are unique across shards);
//!   `shards/<I>/`: each shard's `report.json`, `plan.json`, `shard.json`, `controller.log`;
//! - `report.json`, `report.md`, `report.html`: the samples of each trial from the shard that
//!   owns it, analysed by the report code as any run (statistics blocked by shard, see
//!   [`crate::report`]'s `blocks`); every shard's sandboxes, so the run's cost is theirs summed;
//! - `plan.json` and `forge.json` (the publishing context, when the shards have one), so that
//!   `sandbench publish` takes the merged directory;
//! - one ledger entry for the merged run; the shards' entries in the same ledger are marked
//!   merged into it and no longer counted ([`crate::cost::ledger`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};

use crate::cost::ledger::{Entry, Ledger};
use crate::display::Display;
use crate::publish::Target;
use crate::report::{Report, Status};
use crate::shard::{SHARD_FILE, ShardRecord};

/// `sandbench merge`.
#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// The shards' run directories (runs/<run-id> of each `--shard I/N` run).
    #[arg(required = true, num_args = 1..)]
    pub dirs: Vec<PathBuf>,
    /// The merged run directory (created; must not exist or be empty). Default: runs/<new id>.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// The largest `report.json` read (as `sandbench report` reads one).
const MAX_REPORT_BYTES: u64 = 64 << 20;

/// One shard's run directory, read.
pub struct Loaded {
    pub dir: PathBuf,
    pub record: ShardRecord,
    pub report: Report,
    plan: serde_json::Value,
    forge: Option<Target>,
}

impl Loaded {
    fn label(&self) -> String {
        format!("shard {} ({})", self.record.part.shard, self.dir.display())
    }
}

/// Reads a shard's run directory: an error naming it when it is not one, or is unfinished.
pub fn load(dir: &Path) -> anyhow::Result<Loaded> {
    let record = ShardRecord::load(dir)?;
    let path = dir.join("report.json");
    let size = std::fs::metadata(&path).with_context(|| format!("{}: cannot read report.json", dir.display()))?.len();
    if size > MAX_REPORT_BYTES {
        bail!("{}: report.json is {size} bytes, more than a sandbench report", dir.display());
    }
    let report: Report = serde_json::from_slice(&std::fs::read(&path)?)
        .with_context(|| format!("{} is not a sandbench report", path.display()))?;
    if matches!(report.status, Status::Running | Status::Abandoned) || report.finished_at.is_none() {
        bail!(
            "{}: shard {} is unfinished (its report says {}: still running, or its controller was killed); \
             resume it (`sandbench run --resume DIR`) or run that shard again",
            dir.display(),
            record.part.shard,
            report.status.as_str()
        );
    }
    if report.run_id != record.part.run_id {
        bail!(
            "{}: report.json is of run {}, but {SHARD_FILE} of run {}",
            dir.display(),
            report.run_id,
            record.part.run_id
        );
    }
    let plan_path = dir.join("plan.json");
    let plan = serde_json::from_slice(
        &std::fs::read(&plan_path).with_context(|| format!("cannot read {}", plan_path.display()))?,
    )
    .with_context(|| format!("{} is not JSON", plan_path.display()))?;
    let forge = Target::load(dir)?;
    Ok(Loaded { dir: dir.to_path_buf(), record, report, plan, forge })
}

/// The first top-level field where two JSON objects differ.
fn first_difference(a: &serde_json::Value, b: &serde_json::Value) -> Option<String> {
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            keys.into_iter().find(|k| a.get(*k) != b.get(*k)).cloned()
        }
        _ => (a != b).then(String::new),
    }
}

/// Checks that the shards are the shards of one run, each once and all of them; returns them
/// in shard order.
pub fn check(mut shards: Vec<Loaded>) -> anyhow::Result<Vec<Loaded>> {
    let Some(first) = shards.first() else { bail!("no shard to merge") };
    for other in &shards[1..] {
        let (a, b) = (&first.record, &other.record);
        let fields: [(&str, String, String); 6] = [
            ("the number of shards", a.part.shard.count.to_string(), b.part.shard.count.to_string()),
            ("spec", a.spec.clone(), b.spec.clone()),
            ("base commit", a.base.commit.clone(), b.base.commit.clone()),
            ("head commit", a.head.commit.clone(), b.head.commit.clone()),
            ("image", first.report.image.clone(), other.report.image.clone()),
            ("noise profile", serde_json::to_string(&first.report.noise)?, serde_json::to_string(&other.report.noise)?),
        ];
        for (field, want, got) in fields {
            if want != got {
                bail!(
                    "{}: its {field} is {got}, but {} has {want}; only shards of one run merge",
                    other.dir.display(),
                    first.dir.display()
                );
            }
        }
        if let Some(field) = first_difference(&first.plan, &other.plan) {
            bail!(
                "{}: its plan.json differs from {}'s in {field:?} (the spec or options such as --trials, \
                 --pairs or the rates differ); only shards of one run merge",
                other.dir.display(),
                first.dir.display()
            );
        }
        if first.forge != other.forge {
            bail!(
                "{}: its forge.json differs from {}'s (a different pull request, attempt or commits, or one has none)",
                other.dir.display(),
                first.dir.display()
            );
        }
    }
    let count = first.record.part.shard.count;
    shards.sort_by_key(|s| s.record.part.shard.index);
    for pair in shards.windows(2) {
        if pair[0].record.part.shard == pair[1].record.part.shard {
            bail!(
                "shard {} is given twice: {} and {}",
                pair[0].record.part.shard,
                pair[0].dir.display(),
                pair[1].dir.display()
            );
        }
    }
    let have: BTreeSet<u32> = shards.iter().map(|s| s.record.part.shard.index).collect();
    let missing: Vec<String> = (1..=count).filter(|i| !have.contains(i)).map(|i| format!("{i}/{count}")).collect();
    if !missing.is_empty() {
        let given: Vec<String> = shards.iter().map(Loaded::label).collect();
        bail!("shard {} is missing (given: {})", missing.join(", "), given.join(", "));
    }
    let mut seen: BTreeMap<&str, &Loaded> = BTreeMap::new();
    for shard in &shards {
        for sandbox in &shard.report.sandboxes {
            if let Some(other) = seen.insert(&sandbox.id, shard) {
                bail!("{} and {} both name the sandbox {}", other.label(), shard.label(), sandbox.id);
            }
        }
    }
    Ok(shards)
}

/// The worst of the shards' statuses: failed, canceled, partial, completed.
fn worst(statuses: impl Iterator<Item = Status>) -> Status {
    let rank = |s: &Status| match s {
        Status::Failed | Status::Running | Status::Abandoned => 3,
        Status::Canceled => 2,
        Status::Partial => 1,
        Status::Completed => 0,
    };
    statuses.max_by_key(rank).unwrap_or(Status::Failed)
}

/// The merged report of checked shards, under the run id `run_id`.
pub fn merged_report(shards: &[Loaded], run_id: &str) -> Report {
    let mut report = shards[0].report.clone();
    report.run_id = run_id.to_string();
    report.started_at = shards.iter().map(|s| s.report.started_at.clone()).min().unwrap_or_default();
    report.finished_at = shards.iter().filter_map(|s| s.report.finished_at.clone()).max();
    report.shards = shards.iter().map(|s| s.record.part.clone()).collect();
    report.sequential = None;
    report.sandboxes.clear();
    report.errors.clear();
    report.warnings.clear();
    // Every shard's trials ran under their own conditions.
    report.conditions = shards.iter().flat_map(|s| s.report.conditions.iter().cloned()).collect();
    report.lens = crate::report::instructions::LensSummary::merge(shards.iter().filter_map(|s| s.report.lens.clone()));
    for side in [&mut report.base_side, &mut report.head_side] {
        side.metrics.clear();
        side.cpus.clear();
    }
    let everywhere = |text: &String| shards.iter().all(|s| s.report.warnings.contains(text));
    for shard in shards {
        let (r, tag) = (&shard.report, shard.record.part.shard);
        for (from, to) in [(&r.base_side, &mut report.base_side), (&r.head_side, &mut report.head_side)] {
            for (key, samples) in &from.metrics {
                let owned = samples.iter().filter(|s| tag.owns(s.trial)).cloned();
                to.metrics.entry(key.clone()).or_default().extend(owned);
            }
            for (key, unit) in &from.units {
                to.units.entry(key.clone()).or_insert_with(|| unit.clone());
            }
            to.cpus.extend(from.cpus.iter().map(|c| {
                let mut c = c.clone();
                c.sandbox = format!("{} (shard {tag})", c.sandbox);
                c
            }));
        }
        for (key, note) in &r.estimates {
            report.estimates.entry(key.clone()).or_insert_with(|| note.clone());
        }
        let cpu = |r: &Report| r.base_side.facts.get("cpu").cloned().unwrap_or_default();
        if cpu(r) != cpu(&shards[0].report) {
            report.warnings.push(format!("shard {tag} ran on another kind of CPU: {}", cpu(r)));
        }
        report.sandboxes.extend(r.sandboxes.iter().map(|s| {
            let mut s = s.clone();
            s.role = format!("{} (shard {tag})", s.role);
            s
        }));
        report.errors.extend(r.errors.iter().map(|e| format!("shard {tag}: {e}")));
        for warning in &r.warnings {
            if !everywhere(warning) {
                report.warnings.push(format!("shard {tag}: {warning}"));
            } else if shard.record.part.shard.index == 1 {
                report.warnings.push(warning.clone());
            }
        }
    }
    for side in [&mut report.base_side, &mut report.head_side] {
        for samples in side.metrics.values_mut() {
            samples.sort_by_key(|s| s.trial);
        }
    }
    let ids: Vec<String> = shards.iter().map(|s| format!("{} ({})", s.record.part.shard, s.report.run_id)).collect();
    report.warnings.push(format!(
        "merged from {} shards: {}; each pair ran within one shard, and medians and spreads scale out each \
         shard's speed",
        shards.len(),
        ids.join(", ")
    ));
    report.status = worst(shards.iter().map(|s| s.report.status));
    if report.status == Status::Completed && !report.complete() {
        report.status = Status::Partial;
    }
    report
}

/// Every shard's events, in shard order, each tagged with its shard and the shard's run.
fn merge_observations(shards: &[Loaded], out: &Path) -> anyhow::Result<u64> {
    let path = out.join(crate::observations::store::OBSERVATIONS_FILE);
    let mut file = std::io::BufWriter::new(
        std::fs::File::create(&path).with_context(|| format!("cannot write {}", path.display()))?,
    );
    let mut count = 0;
    for shard in shards {
        let log = shard.dir.join(crate::observations::store::OBSERVATIONS_FILE);
        if !log.exists() {
            continue;
        }
        for event in crate::observations::store::events(&log)? {
            let event = event.with_context(|| format!("{}", log.display()))?;
            let mut value = serde_json::to_value(&event)?;
            if let Some(object) = value.as_object_mut() {
                object.insert("shard".into(), shard.record.part.shard.to_string().into());
                object.insert("shard_run".into(), shard.record.part.run_id.clone().into());
            }
            serde_json::to_writer(&mut file, &value)?;
            file.write_all(b"\n")?;
            count += 1;
        }
    }
    let file = file.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    Ok(count)
}

/// Copies a folder's regular files and folders (never a link) into `to`.
fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target).with_context(|| format!("cannot copy {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// Writes the merged run directory's files but the reports.
fn write_files(shards: &[Loaded], out: &Path) -> anyhow::Result<()> {
    merge_observations(shards, out)?;
    for shard in shards {
        let sandboxes = shard.dir.join("sandboxes");
        if sandboxes.is_dir() {
            copy_tree(&sandboxes, &out.join("sandboxes"))?;
        }
        let keep = out.join("shards").join(shard.record.part.shard.index.to_string());
        std::fs::create_dir_all(&keep)?;
        for name in ["report.json", "plan.json", SHARD_FILE, "controller.log"] {
            let from = shard.dir.join(name);
            if from.is_file() {
                std::fs::copy(&from, keep.join(name)).with_context(|| format!("cannot copy {}", from.display()))?;
            }
        }
    }
    std::fs::copy(shards[0].dir.join("plan.json"), out.join("plan.json"))?;
    if let Some(target) = &shards[0].forge {
        target.save(out)?;
    }
    Ok(())
}

/// Records the merged run in the ledger and marks its shards merged into it.
fn record(ledger: &Path, shards: &[Loaded], report: &Report, out: &Path) -> anyhow::Result<usize> {
    let source = &shards[0].plan["source"];
    let repository = source["repository"].as_str().or(source["url"].as_str()).unwrap_or_default().to_string();
    let start = report.run_start(&report.spec_name, repository, out, 0.0);
    let mut entry = Entry::begin(Ledger::open(ledger)?, &start, false)?;
    let finished = report.finished_at.clone().unwrap_or_default();
    entry.finish(report.status.as_str(), &finished, &report.sandboxes)?;
    crate::run::record_lens(entry.ledger(), report)?;
    let ids: Vec<String> = shards.iter().map(|s| s.record.part.run_id.clone()).collect();
    entry.ledger().mark_merged(&ids, &report.run_id)
}

/// Merges the shard directories `dirs` into `out` (None: `runs/<new id>`), recording the merged
/// run in `ledger`; the merged report and its directory.
pub fn merge(dirs: &[PathBuf], out: Option<&Path>, ledger: Option<&Path>) -> anyhow::Result<(Report, PathBuf)> {
    let loaded = dirs.iter().map(|d| load(d)).collect::<anyhow::Result<Vec<_>>>()?;
    let shards = check(loaded)?;
    let run_id = crate::run::run_id();
    let out = out.map_or_else(|| PathBuf::from("runs").join(&run_id), Path::to_path_buf);
    if out.exists() && std::fs::read_dir(&out).map(|mut d| d.next().is_some()).unwrap_or(true) {
        bail!("--out {}: exists and is not empty; name a new directory", out.display());
    }
    crate::station::run_dir(&out)?;
    let mut report = merged_report(&shards, &run_id);
    write_files(&shards, &out)?;
    if let Some(path) = ledger
        && let Err(err) = record(path, &shards, &report, &out)
    {
        report.warnings.push(format!("cannot record the merged run in the ledger {}: {err:#}", path.display()));
    }
    crate::run::write_reports(&out, &mut report)?;
    if report.base.commit == report.head.commit && report.status == Status::Completed {
        let profile = crate::report::NoiseProfile::from_report(&report);
        std::fs::write(out.join("noise.json"), serde_json::to_vec_pretty(&profile)?)?;
    }
    Ok((report, out))
}

/// `sandbench merge`: prints where the reports are, and exits by the merged run's status.
pub fn command(args: MergeArgs, ledger: &Path) -> anyhow::Result<ExitCode> {
    let (report, dir) = merge(&args.dirs, args.out.as_deref(), Some(ledger))?;
    let display = Display::new();
    display.line(&format!(
        "merged {} shards into run {} ({})",
        report.shards.len(),
        report.run_id,
        report.status.as_str()
    ));
    for name in ["report.md", "report.html", "report.json"] {
        display.result(&dir.join(name).display().to_string());
    }
    Ok(crate::options::exit_code(report.status))
}
