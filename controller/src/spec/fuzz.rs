//! Fuzzing the spec parser (proptest): text of any shape, and valid specs with lines replaced,
//! inserted or deleted and values set to hostile ones, never panic the parser, and every error
//! names the file, a line of it and a field. Cases: `PROPTEST_CASES` (256 by default) per target.

use std::path::Path;

use proptest::prelude::*;

use super::{SpecErrors, parse};

const DEMO: &str = include_str!("../../../examples/demo/bench.toml");

const KEYS: &[&str] = &[
    "name",
    "image",
    "cpus",
    "cpuset",
    "memory_gb",
    "disk_gb",
    "pids",
    "output_kb",
    "network",
    "ttl_minutes",
    "repository",
    "url",
    "install",
    "measure",
    "runtime",
    "failure_limit",
    "max_pairs",
    "order",
    "gate",
    "commands",
    "timeout_s",
    "artifacts",
    "release_dir",
    "origin_port",
    "origin_path",
    "artifact_format",
    "versions",
    "when",
    "incomplete",
    "compiled",
    "command",
    "entry_point",
    "inventory",
    "expect_format",
    "env",
    "checks",
    "fixture",
    "dir",
    "files",
    "home_files",
    "startup",
    "cwd",
    "settle_s",
    "between",
    "footprint",
    "channel",
    "ready_event",
    "start_metric",
    "kind",
    "metric",
    "send",
    "repeat",
    "aggregate",
    "text",
    "seconds",
    "run",
    "metrics",
    "title",
    "unit",
    "scale",
    "absolute",
    "relative",
    "group",
    "rule",
    "min_floor",
    "budget_usd",
    "id_field",
    "keep",
    "path",
    "count",
    "size",
    "percentiles",
    "max",
    "sizes",
    "matrix",
    "distributions",
    "max_samples",
    "format",
    "results",
    "max_benchmarks",
    "instructions",
    "ignore",
];

const SECTIONS: &[&str] = &[
    "[sandbox]",
    "[source]",
    "[trials]",
    "[env]",
    "[prepare]",
    "[[prepare.optional]]",
    "[install]",
    "[install.fixture]",
    "[measure]",
    "[[runtime.scenario]]",
    "[[runtime.scenario.step]]",
    "[[runtime.command]]",
    "[[runtime.script]]",
    "[[runtime.bench]]",
    "[metrics.x]",
    "[metrics.\"bench.x.*\"]",
    "[cost]",
    "[report]",
];

/// A TOML value, often a hostile one.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| format!("{f:?}")),
        Just("nan".to_string()),
        Just("-inf".to_string()),
        Just("true".to_string()),
        "[^\"\\\\\n]{0,40}".prop_map(|s| format!("{s:?}")),
        prop::sample::select(vec![
            "\"../../../etc\"",
            "\"/etc/passwd\"",
            "\"../../../../escape\"",
            "\"0-9999,abc\"",
            "\"A=B\"",
            "\"\"",
            "\"~/../x\"",
            "\"a\\u0000b\"",
            "\"\\u001b[31m-->|<script>\"",
            "\"aéééé\"",
            "[]",
            "[\"a\", 1]",
            "{ \"A=B\" = \"x\", \"\" = \"y\" }",
            "{ type = \"x\" }",
            "[{ output = \"x\" }]",
        ])
        .prop_map(String::from),
    ]
}

/// One line a spec could have, or nearly.
fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(SECTIONS).prop_map(String::from),
        (prop::sample::select(KEYS), value()).prop_map(|(k, v)| format!("{k} = {v}")),
        "[ -~]{0,60}",
        any::<String>(),
    ]
}

fn check(text: &str) -> Result<(), TestCaseError> {
    let lines = text.lines().count().max(1) + 1;
    if let Err(SpecErrors(errors)) = parse(Path::new("fuzz.toml"), text) {
        prop_assert!(!errors.is_empty());
        for e in errors {
            prop_assert_eq!(e.file.as_path(), Path::new("fuzz.toml"));
            prop_assert!((1..=lines).contains(&e.line), "line {} of {lines}: {e}", e.line);
            prop_assert!(!e.field.is_empty(), "no field: {e}");
            prop_assert!(!e.message.is_empty(), "no message: {e}");
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn any_text_is_parsed_or_refused_with_a_place(text in any::<String>()) {
        check(&text)?;
    }

    #[test]
    fn spec_shaped_text_is_parsed_or_refused_with_a_place(lines in prop::collection::vec(line(), 1..40)) {
        let text = format!("name = \"f\"\n{}\n[install]\ncommand = \"true\"\n", lines.join("\n"));
        check(&text)?;
    }

    #[test]
    fn edited_demo_specs_are_parsed_or_refused_with_a_place(
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0..3u8, line()), 1..6)
    ) {
        let mut lines: Vec<String> = DEMO.lines().map(String::from).collect();
        for (at, how, new) in edits {
            let i = at.index(lines.len());
            match how {
                0 => lines[i] = new,
                1 => lines.insert(i, new),
                _ => {
                    lines.remove(i);
                }
            }
        }
        check(&lines.join("\n"))?;
    }
}
