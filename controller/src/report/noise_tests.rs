//! Noise profiles pooled over A/A runs: the floors they give, what the report says they rest
//! on, the practical minimum, profiles written before pooling, and a day whose noise is far from
//! the profile's.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::tests::one_metric;
use super::*;
use crate::stats::sequential::Design;

/// Standard normal by Box–Muller.
fn normal(rng: &mut StdRng) -> f64 {
    let (u, v): (f64, f64) = (rng.random::<f64>().max(1e-300), rng.random());
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

/// A report of `cold` over `pairs` pairs whose log ratios are `shift` plus noise of sd `sd`.
fn run(seed: u64, pairs: usize, shift: f64, sd: f64) -> Report {
    let mut rng = StdRng::seed_from_u64(seed);
    let base: Vec<f64> = (0..pairs).map(|i| 1.0 + 0.001 * i as f64).collect();
    let head: Vec<f64> = base.iter().map(|b| b * (shift + sd * normal(&mut rng)).exp()).collect();
    one_metric(&base, &head)
}

/// The noise profile of an A/A run `aa-<seed>`.
fn a_a(seed: u64, pairs: usize, sd: f64) -> NoiseProfile {
    NoiseProfile { run_id: format!("aa-{seed}"), ..NoiseProfile::from_report(&run(seed, pairs, 0.0, sd)) }
}

fn decision(report: &Report) -> MetricComparison {
    report.analyze().into_iter().find(|c| c.key == "cold").unwrap()
}

#[test]
fn pooled_a_a_runs_narrow_the_floor_and_the_report_says_what_it_rests_on() {
    let runs: Vec<NoiseProfile> = (1..=8).map(|seed| a_a(seed, 20, 0.03)).collect();
    let single = runs[0].metrics["cold"].clone();
    let pooled = NoiseProfile::pool(&runs).unwrap();
    let cold = &pooled.metrics["cold"];
    assert_eq!((pooled.run_id.as_str(), pooled.pooled.len(), pooled.pooled[0].as_str()), ("aa-8", 8, "aa-1"));
    assert_eq!((cold.runs, cold.pairs), (8, 160));
    assert!(cold.between.is_some() && cold.floor < single.floor, "{cold:?} against one run's {single:?}");
    assert!((cold.spread - 0.03).abs() < 0.006, "{cold:?}");
    assert_eq!(pooled.basis(), "8 A/A runs, 160 pairs a metric");
    // One run pooled is that run's own profile.
    assert_eq!(NoiseProfile::pool(&runs[..1]).unwrap().metrics["cold"], single);
    assert_eq!(NoiseProfile::pool(&[]), None);

    // A later run is judged against the pooled floor, and its method line says what it rests on.
    let mut later = run(100, 20, 0.05f64.ln_1p(), 0.03);
    later.noise = Some(pooled.clone());
    let c = decision(&later);
    // The one metric judged against the profile is a family of one, whose margin (0.62
    // standard errors of its mean log ratio) stays below the pooled floor here.
    let defs = later.metric_defs();
    let (pairs, _) = later.pairs_of("cold");
    assert_eq!(later.family(&defs), 1);
    let judged = decide::for_family(decide::floor(&defs[0], None, later.noise.as_ref()), &pairs, 1, later.alpha());
    assert_eq!(judged.value, cold.floor, "the pooled floor stands: {judged:?}");
    assert_eq!(c.paired.floor, (cold.floor * 1e4).round() / 1e4, "{c:?}");
    let md = markdown::render(&later);
    assert!(
        md.contains("Floors come from the A/A noise profile of run `aa-8`: 8 A/A runs, 160 pairs a metric."),
        "{md}"
    );
    assert!(md.contains("their between-run spread counted") && md.contains("never below 0.50%"), "{md}");
    // The family: of one here, of two with a CPU companion calibrated too, each at its margin
    // and at the family's fifth of the report's 5 %.
    let one = format!(
        "The one metric judged against the profile has a floor of at least {:.2} standard errors of its mean log ratio (z at 1 − 0.2α/2 less z at 1 − α/2; ",
        crate::stats::family_margin(1, 0.05)
    );
    assert!(md.contains(&one) && md.contains("calls it changed at most about 1.0% of the time."), "{md}");
    let mut two = later.clone();
    for side in [&mut two.base_side, &mut two.head_side] {
        let cold = side.metrics["cold"].clone();
        side.metrics.insert("cold.cpu".into(), cold);
    }
    let profile = two.noise.as_mut().unwrap();
    let cold_profile = profile.metrics["cold"].clone();
    profile.metrics.insert("cold.cpu".into(), cold_profile);
    assert_eq!(two.family(&two.metric_defs()), 2);
    let md = markdown::render(&two);
    let both = format!(
        "The 2 metrics judged against the profile are one family: each floor is at least {:.2} standard errors of the metric's mean log ratio (z at 1 − 0.2α/4 less z at 1 − α/2, Bonferroni; ",
        crate::stats::family_margin(2, 0.05)
    );
    assert!(md.contains(&both) && md.contains("calls any of them changed at most about 1.0% of the time."), "{md}");
    later.noise = Some(runs[0].clone());
    let md = markdown::render(&later);
    assert!(md.contains(": one A/A run, 20 pairs a metric. One calibration cannot tell"), "{md}");
    // The spec's practical minimum holds the floor up.
    later.noise = Some(NoiseProfile { min_floor: Some(0.04), ..pooled });
    assert_eq!(decision(&later).paired.floor, 0.04);
    assert!(markdown::render(&later).contains("never below 4.00% (`[report] min_floor`)"));
}

#[test]
fn runs_with_too_few_pairs_are_not_pooled() {
    let runs = [a_a(1, 5, 0.03), a_a(2, 6, 0.03)];
    let pooled = NoiseProfile::pool(&runs).unwrap();
    assert_eq!((pooled.metrics["cold"].pairs, pooled.metrics["cold"].runs), (6, 1), "the latest run's, unused");
    assert!(pooled.floor("cold").unwrap_err().contains("has 6 pairs of this metric (at least 10 needed)"));
    assert_eq!(pooled.basis(), "2 A/A runs, none with 10 pairs of a metric");
    // With one calibrated run among them, that one sets the floor alone.
    let runs = [a_a(1, 5, 0.03), a_a(3, 12, 0.03), a_a(2, 6, 0.03)];
    let pooled = NoiseProfile::pool(&runs).unwrap();
    assert_eq!(pooled.metrics["cold"], runs[1].metrics["cold"]);
    assert!(pooled.single_run() && pooled.basis() == "one A/A run, 12 pairs a metric", "what the floors rest on");
}

#[test]
fn profiles_written_before_pooling_load_pool_and_keep_their_format() {
    // A noise.json as main wrote it before runs were pooled.
    let old = r#"{"spec":"demo","run_id":"r1","image":"node:24-bookworm","metrics":{"cold":{"pairs":20,"spread":0.067,"estimate":0.0206,"interval":[-0.0159,0.0492],"floor":0.0492}}}"#;
    let old: NoiseProfile = serde_json::from_str(old).unwrap();
    assert_eq!((old.floor("cold"), old.run_count(), old.metrics["cold"].runs), (Ok(0.0492), 1, 1));
    let again = NoiseProfile { run_id: "r2".into(), ..old.clone() };
    let pooled = NoiseProfile::pool(&[old, again]).unwrap();
    assert_eq!((pooled.metrics["cold"].runs, pooled.metrics["cold"].between), (2, Some(0.0)));
    assert!(pooled.floor("cold").unwrap() < 0.0492);
    // One run's profile is written as before; a pooled one says what it pooled.
    let one = serde_json::to_string(&a_a(1, 12, 0.03)).unwrap();
    assert!(!one.contains("runs") && !one.contains("pooled") && !one.contains("min_floor"), "{one}");
    let json = serde_json::to_string(&pooled).unwrap();
    assert!(json.contains(r#""pooled":["r1","r2"]"#) && json.contains(r#""runs":2"#), "{json}");
    assert_eq!(serde_json::from_str::<NoiseProfile>(&json).unwrap(), pooled);
}

#[test]
fn a_day_whose_pair_sd_is_far_from_the_profiles_is_said_and_the_verdict_uses_its_own() {
    let runs: Vec<NoiseProfile> = (1..=10).map(|seed| a_a(seed, 20, 0.02)).collect();
    let pooled = NoiseProfile::pool(&runs).unwrap();
    // A noisy day: sd 6 % against the profile's 2 %.
    let mut noisy = run(200, 20, 0.0, 0.06);
    noisy.noise = Some(pooled.clone());
    let c = decision(&noisy);
    let today = c.paired.spread.unwrap();
    assert!(today > 0.04, "{c:?}");
    assert!(
        c.notes
            .iter()
            .any(|n| n.starts_with(&format!("pair sd {:.2}% today, far from the noise profile's", today * 100.0))
                && n.contains("over 10 A/A runs")),
        "{:?}",
        c.notes
    );
    // The verdict's MDE is today's, wider than the one the profile planned for.
    let planned = pooled.far("cold", &c.paired).unwrap().planned_mde;
    assert!(c.paired.mde.unwrap() > planned, "{c:?} {planned}");
    noisy.comparisons = noisy.analyze();
    let lines = summary::terminal(&noisy);
    assert!(lines.iter().any(|l| l.starts_with("  pair sd today far from the noise profile's: cold ")), "{lines:?}");
    // An ordinary day: nothing said.
    let mut quiet = run(201, 20, 0.0, 0.02);
    quiet.noise = Some(pooled);
    assert!(decision(&quiet).notes.iter().all(|n| !n.contains("far from")), "{:?}", decision(&quiet).notes);
    quiet.comparisons = quiet.analyze();
    assert!(summary::terminal(&quiet).iter().all(|l| !l.contains("far from")));
}

#[test]
fn the_profile_tells_what_minimum_detectable_effect_to_expect() {
    let runs: Vec<NoiseProfile> = (1..=10).map(|seed| a_a(seed, 20, 0.04)).collect();
    let mut report = run(300, 10, 0.0, 0.04);
    report.noise = NoiseProfile::pool(&runs);
    let gate = ["cold".to_string()];
    // One planned look: the MDE at its pairs, at 95 %.
    let one = Design { alpha: 0.05, initial: 10, max_pairs: 10 };
    let lines = report.expectations(&gate, &one);
    assert!(lines.len() == 1 && lines[0].ends_with("% at 10 pairs"), "{lines:?}");
    assert!(report.expectations(&["warm".to_string()], &one).is_empty(), "a metric the profile does not calibrate");
    // A CPU companion gates before any sample defines it.
    let mut with_cpu = report.clone();
    let mut cpu = with_cpu.noise.as_ref().unwrap().metrics["cold"].clone();
    cpu.spread = 0.01;
    with_cpu.noise.as_mut().unwrap().metrics.insert("cold.cpu".into(), cpu);
    let lines = with_cpu.expectations(&["cold.cpu".to_string()], &one);
    assert!(lines.len() == 1 && lines[0].starts_with("cold.cpu: pair sd 1.00%"), "{lines:?}");
    let design = Design { alpha: 0.05, initial: 10, max_pairs: 20 };
    let lines = report.expectations(&gate, &design);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let sd = report.noise.as_ref().unwrap().metrics["cold"].spread;
    assert!(lines[0].starts_with(&format!("cold: pair sd {:.2}% over 10 A/A runs, floor ±", sd * 100.0)), "{lines:?}");
    // The floor a look plans for: the profile's, or the family of one's margin at the look's
    // alpha where that is higher.
    let defs = report.metric_defs();
    assert_eq!(report.family(&defs), 1);
    let mde = |n: u32, look: usize| {
        let profile = decide::floor(&defs[0], None, report.noise.as_ref());
        let floor = decide::planned(&profile, 1, design.alpha_at(look), n as usize);
        format!("{:.2}% at {n} pairs", crate::stats::mde(floor, sd, n as usize, design.alpha_at(look)) * 100.0)
    };
    assert!(lines[0].ends_with(&format!("minimum detectable effect {}, {}", mde(10, 1), mde(20, 2))), "{lines:?}");
}

#[test]
fn lens_counts_pool_to_the_largest_change_any_run_showed() {
    let count = |floor: f64| noise::MetricNoise {
        pairs: 1,
        spread: floor,
        estimate: 0.0,
        interval: (-floor, floor),
        floor,
        runs: 1,
        between: None,
    };
    let with = |run: &str, floor: f64| {
        let mut p = a_a(1, 12, 0.03);
        p.run_id = run.into();
        p.metrics.insert("work.instructions".into(), count(floor));
        p
    };
    let pooled = NoiseProfile::pool(&[with("a", 2e-4), with("b", 9e-4), with("c", 1e-4)]).unwrap();
    let work = &pooled.metrics["work.instructions"];
    assert_eq!((work.pairs, work.runs, work.floor, work.spread, work.interval), (3, 3, 9e-4, 9e-4, (-9e-4, 9e-4)));
    assert_eq!(pooled.basis(), "3 A/A runs, 36 pairs a metric", "counts are not timed metrics' pairs");
}
