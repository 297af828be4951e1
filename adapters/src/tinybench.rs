//! tinybench's task results, as a suite writes them: `JSON.stringify(bench.tasks.map(({ name,
//! result }) => ({ name, result })))`. tinybench 3 to 6 give `result.state`, `result.latency`
//! (milliseconds) and `result.throughput` (operations per second); tinybench 2 gives `hz`, `mean`
//! … on the result itself, and `error` for a task that threw. The estimate is the median
//! throughput of the samples (`throughput.p50`), operations per second, higher is better;
//! tinybench 2 has no median, and gives its `hz`, the mean's inverse. The mean is dominated by
//! the few samples a collection or the scheduler stretched: the median is the figure to
//! compare.

use serde_json::Value;

use crate::json::Node;
use crate::{Better, Figure, Measure, Read, Statistic, figures, times_beside_rate};

pub fn parse(document: &Value) -> Result<Vec<Read>, String> {
    let root = Node::root(document);
    let mut read = Vec::new();
    for task in root.elements()? {
        let name = task.field("name")?.string()?;
        let Some(result) = task.optional("result")? else {
            read.push(Read::failed(name, "tinybench has no result for it (the task did not run)"));
            continue;
        };
        read.push(match outcome(&result)? {
            Ok(measure) => Read::ran(name, vec![measure]),
            Err(why) => Read::failed(name, why),
        });
    }
    Ok(read)
}

/// The task's measure, or why tinybench says it failed; Err(_) outside when the result is in
/// neither shape.
fn outcome(result: &Node<'_>) -> Result<Result<Measure, String>, String> {
    if let Some(state) = result.optional("state")? {
        let state = state.string()?;
        if state != "completed" {
            let message = result.value.pointer("/error/message").and_then(Value::as_str).unwrap_or("");
            return Ok(Err(format!("tinybench: the task {state}{}", suffix(message))));
        }
        let throughput = result.field("throughput")?;
        let latency = result.field("latency")?;
        let mut spread = figures(&throughput, &[("mean", "mean"), ("sd", "sd"), ("min", "min"), ("max", "max")]);
        spread.extend(times_beside_rate(&latency, 1e-3));
        spread.extend(throughput.figure("rme").map(|v| Figure::count("rme_percent", v)));
        spread.extend(latency.figure("samplesCount").map(|v| Figure::count("samples", v)));
        return Ok(Ok(rate(throughput.number_at("p50")?, Statistic::Median, spread)));
    }
    if let Some(error) = result.optional("error")? {
        let message = error.value.get("message").and_then(Value::as_str).unwrap_or("");
        return Ok(Err(format!("tinybench: the task threw{}", suffix(message))));
    }
    let mut spread = times_beside_rate(result, 1e-3);
    spread.extend(result.figure("rme").map(|v| Figure::count("rme_percent", v)));
    let samples = result.value.get("samples").and_then(Value::as_array).map_or(0, Vec::len);
    if samples > 0 {
        spread.push(Figure::count("samples", samples as f64));
    }
    Ok(Ok(rate(result.number_at("hz")?, Statistic::Mean, spread)))
}

fn rate(value: f64, statistic: Statistic, spread: Vec<Figure>) -> Measure {
    Measure { segment: None, value, statistic, unit: "ops/s".to_string(), better: Better::Higher, spread }
}

fn suffix(message: &str) -> String {
    if message.is_empty() { String::new() } else { format!(": {}", crate::segment::title(message)) }
}

#[cfg(test)]
mod tests {
    use crate::{Better, Figure, Format, Statistic, parse};

    #[test]
    fn reads_tinybench_6_tasks_and_the_one_that_threw() {
        let got = parse(Format::Tinybench, include_bytes!("../fixtures/tinybench/tinybench.json")).unwrap();
        let segments: Vec<&str> = got.iter().map(|b| b.segment.as_str()).collect();
        assert_eq!(segments, ["sort_small", "sort_large", "throws"]);
        let small = got[0].primary().unwrap();
        assert_eq!((small.unit.as_str(), small.better), ("ops/s", Better::Higher));
        assert_eq!(small.statistic, Statistic::Median);
        assert_eq!(small.value, 531_067.445_591_803_9);
        assert!(small.spread.iter().any(|f| f.label == "mean" && (f.value - 694_502.0).abs() < 1.0));
        assert!(small.spread.contains(&Figure::count("samples", 43_981.0)));
        assert!(small.spread.iter().any(|f| f.label == "median_s" && f.value < 1e-5));
        // JSON.stringify keeps no Error's message: the state says what happened.
        assert_eq!(got[2].outcome, Err("tinybench: the task errored".to_string()));
    }

    #[test]
    fn reads_tinybench_2_tasks() {
        let got = parse(Format::Tinybench, include_bytes!("../fixtures/tinybench/tinybench2.json")).unwrap();
        assert_eq!(got.len(), 2);
        let small = got[0].primary().unwrap();
        assert!((small.value - 283_639.585_886_190_5).abs() < 1e-6);
        let mean = small.spread.iter().find(|f| f.label == "mean_s").unwrap();
        assert!((mean.value * small.value - 1.0).abs() < 1e-9);
    }

    #[test]
    fn refuses_other_files() {
        let err = parse(Format::Tinybench, include_bytes!("../fixtures/mitata/mitata.json")).unwrap_err();
        assert_eq!(err.reason, "the document: expected an array, got an object");
        let err = parse(Format::Tinybench, br#"[{"name": "a", "result": {"state": "completed"}}]"#).unwrap_err();
        assert_eq!(err.reason, "[0].result.throughput: missing (it has \"state\")");
    }
}
