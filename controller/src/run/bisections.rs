//! `run --bisect`: once the run is decided, each regressed metric is bisected between base and
//! head ([`crate::bisect`]), each in a folder of the run directory (`bisect-KEY/`), within
//! `[bisect] max_steps` and what is left of the budget. Its sandboxes join the run's (its cost
//! and ledger entry); its answer joins the report and the comment. A resumed run goes on with a
//! bisection from the commits it measured already.

use std::path::Path;
use std::sync::Arc;

use sandbench_proto::metric::{Facet, MetricKey};
use tokio::sync::watch;

use crate::bisect::{Job, Lens, Target};
use crate::display::Display;
use crate::provision::{AgentShipping, Provisioner};
use crate::report::{BisectLine, Report, Status};
use crate::spec::{Plan, SourceSettings};
use crate::stats::Outcome;

/// What the bisections need beside the report.
pub(super) struct Bisecting<'a> {
    pub plan: &'a Plan,
    pub dir: &'a Path,
    pub display: &'a Display,
    pub agent: Option<std::path::PathBuf>,
    pub shipping: AgentShipping,
    pub dead_man: std::time::Duration,
}

/// The metrics to bisect: every one that regressed, but a stem's cycles not beside its
/// instructions (one search answers both).
pub(super) fn regressed(report: &Report) -> Vec<String> {
    let keys: Vec<String> =
        report.analyze().into_iter().filter(|c| c.outcome() == Outcome::Regressed).map(|c| c.key).collect();
    let counted = |stem: &str| keys.iter().any(|k| *k == MetricKey::new(stem, Facet::Instructions).to_string());
    keys.iter()
        .filter(|k| match MetricKey::split(k) {
            (stem, Facet::Cycles) => !counted(stem),
            _ => true,
        })
        .cloned()
        .collect()
}

/// Bisects what regressed, adding each answer, its sandboxes and any warning to `report`.
pub(super) async fn bisect_regressions(
    at: Bisecting<'_>,
    report: &mut Report,
    provisioner: Arc<dyn Provisioner>,
    cancel: watch::Receiver<bool>,
) {
    if report.status != Status::Completed {
        return;
    }
    let keys = regressed(report);
    if keys.is_empty() {
        at.display.line("--bisect: nothing regressed, nothing to bisect");
        return;
    }
    let SourceSettings::Local { repository } = &at.plan.source else {
        report.warnings.push("--bisect needs the spec's source to be a local repository: nothing bisected".into());
        return;
    };
    for key in keys {
        if *cancel.borrow() {
            report.warnings.push(format!("--bisect: canceled before {key} was bisected"));
            break;
        }
        let lens = if MetricKey::facet_of(&key).is_lens() { Lens::Instructions } else { Lens::Wall };
        let target = match Target::of(at.plan, &key, lens) {
            Ok(target) => target,
            Err(err) => {
                report.warnings.push(format!("--bisect: {key} cannot be bisected: {err:#}"));
                continue;
            }
        };
        let budget = at.plan.cost.budget_usd.map(|b| b - report.total_cost_usd().unwrap_or(0.0));
        if budget.is_some_and(|b| b <= 0.0) {
            report.warnings.push(format!("--bisect: the budget is spent; {key} was not bisected"));
            continue;
        }
        let folder = folder(&key);
        at.display.line(&format!("--bisect: {key} regressed; bisecting it in {folder}/"));
        let job = Job {
            plan: at.plan,
            repository: repository.clone(),
            good: report.base.clone(),
            bad: report.head.clone(),
            target,
            max_steps: at.plan.bisect.max_steps,
            budget_usd: budget,
            dir: at.dir.join(&folder),
            id: format!("{}-{folder}", report.run_id),
            agent: at.agent.clone(),
            shipping: at.shipping,
            dead_man: at.dead_man,
            display: at.display.clone(),
        };
        match crate::bisect::conduct(provisioner.clone(), job, cancel.clone()).await {
            Ok(bisected) => {
                report.sandboxes.extend(bisected.made);
                if let Some(error) = bisected.error {
                    report.warnings.push(format!("--bisect: the bisection of {key} did not finish: {error}"));
                }
                at.display.line(&crate::sanitize::terminal(&crate::bisect::headline(&bisected.report)));
                report.bisections.push(BisectLine {
                    key,
                    words: crate::bisect::words(&bisected.report),
                    dir: folder,
                    steps: bisected.report.steps,
                    sandbox_seconds: bisected.report.sandbox_seconds,
                    cost_usd: bisected.report.cost_usd,
                });
            }
            Err(err) => report.warnings.push(format!("--bisect: {key} cannot be bisected: {err:#}")),
        }
    }
}

/// The folder of a metric's bisection: `bisect-` and the key, anything but letters, digits, `.`,
/// `_` and `-` replaced.
fn folder(key: &str) -> String {
    let safe: String =
        key.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '-' }).collect();
    format!("bisect-{}", crate::sanitize::prefix(&safe, 64))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_folder_name_is_safe_whatever_the_key() {
        assert_eq!(super::folder("work.instructions"), "bisect-work.instructions");
        assert_eq!(super::folder("../x y"), "bisect-..-x-y");
    }
}
