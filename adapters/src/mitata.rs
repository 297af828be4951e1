//! mitata's JSON (`run({ format: 'json' })`, best with `{ json: { debug: false, samples: false
//! } }`): `{ "layout": [{ "name" }], "benchmarks": [{ "alias", "group", "runs": [{ "name",
//! "stats": { "avg", "min", "p50", "p99", "ticks", … } | "error" }] }] }`, times in
//! nanoseconds. Each run is a benchmark (one per combination of `.args`), named by its group's
//! name when the group has one, ` / `, and the run's name. The estimate is `p50`, the median
//! time per iteration, lower is better; mitata's headline `avg`, the mean, is dominated by the
//! few samples a collection or the scheduler stretched, and goes to the details.

use serde_json::Value;

use crate::json::Node;
use crate::{Figure, Read, Statistic, figures, time};

pub fn parse(document: &Value) -> Result<Vec<Read>, String> {
    let root = Node::root(document);
    let groups = root.field("layout")?.elements()?;
    let mut read = Vec::new();
    for bench in root.field("benchmarks")?.elements()? {
        let group = match bench.optional("group")? {
            None => None,
            Some(index) => {
                let i = index.value.as_u64().ok_or_else(|| index.expected("a layout index"))?;
                let layout = groups.get(i as usize).ok_or_else(|| format!("{}: no layout[{i}]", index.path))?;
                layout.optional("name")?.map(|n| n.string()).transpose()?
            }
        };
        for run in bench.field("runs")?.elements()? {
            let run_name = run.field("name")?.string()?;
            let name = match group {
                Some(group) => format!("{group} / {run_name}"),
                None => run_name.to_string(),
            };
            read.push(match run.optional("stats")? {
                Some(stats) => Read::ran(name, vec![measure(&stats)?]),
                None => {
                    let message = run.value.pointer("/error/message").and_then(Value::as_str).unwrap_or("no stats");
                    Read::failed(name, format!("mitata: {}", crate::segment::title(message)))
                }
            });
        }
    }
    Ok(read)
}

fn measure(stats: &Node<'_>) -> Result<crate::Measure, String> {
    let median = stats.number_at("p50")?;
    let mut spread = figures(
        stats,
        &[
            ("mean", "avg"),
            ("min", "min"),
            ("p25", "p25"),
            ("p75", "p75"),
            ("p99", "p99"),
            ("p999", "p999"),
            ("max", "max"),
        ],
    );
    spread.extend(stats.figure("ticks").map(|v| Figure::count("iterations", v)));
    if let Some(heap) = stats.value.get("heap").and_then(|h| h.get("avg")).and_then(Value::as_f64) {
        spread.push(Figure::count("heap_bytes_per_iteration", heap));
    }
    Ok(time(median, Statistic::Median, 1e-9, spread))
}

#[cfg(test)]
mod tests {
    use crate::{Better, Figure, Format, Statistic, parse};

    #[test]
    fn reads_mitata_1_runs_with_their_groups_and_the_one_that_threw() {
        let got = parse(Format::Mitata, include_bytes!("../fixtures/mitata/mitata.json")).unwrap();
        let names: Vec<(&str, &str)> = got.iter().map(|b| (b.name.as_str(), b.segment.as_str())).collect();
        assert_eq!(
            names,
            [
                ("sort small", "sort_small"),
                ("sizes / sort 100", "sizes_sort_100"),
                ("sizes / sort 1000", "sizes_sort_1000"),
                ("throws", "throws")
            ]
        );
        let large = got[2].primary().unwrap();
        assert_eq!((large.unit.as_str(), large.better, large.statistic), ("s", Better::Lower, Statistic::Median));
        assert!((large.value - 84_088e-9).abs() < 1e-18);
        assert!(large.spread.iter().any(|f| f.label == "mean" && (f.value - 215_537.260_641_781_26e-9).abs() < 1e-15));
        assert!(large.spread.contains(&Figure::count("iterations", 3054.0)));
        assert_eq!(got[3].outcome, Err("mitata: no input".to_string()));
    }

    #[test]
    fn refuses_other_files() {
        let err = parse(Format::Mitata, include_bytes!("../fixtures/google-benchmark/gbench.json")).unwrap_err();
        assert_eq!(err.reason, "layout: missing (it has \"benchmarks\", \"context\")");
    }
}
