//! `sandbench cost` output, pure: runs, runs grouped by day, spec or repository, or one run by
//! sandbox and phase, as a table, JSON or CSV; and the command's arguments.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use super::ledger::{PhaseRow, RunRow, UNFINISHED};

/// `sandbench cost [RUN] [--since DATE] [--by day|spec|repo] [--format table|json|csv]`.
#[derive(Debug, Clone, clap::Args)]
pub struct CostArgs {
    /// A run id: its cost by sandbox and phase.
    pub run: Option<String>,
    /// Only runs started on or after this date (YYYY-MM-DD, in UTC; or an RFC 3339 time).
    #[arg(long, value_name = "DATE", value_parser = parse_since)]
    pub since: Option<jiff::Timestamp>,
    /// Sum runs by day, spec or repository.
    #[arg(long, value_enum)]
    pub by: Option<GroupBy>,
    /// How to print: a table, JSON or CSV.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Create the ledger (empty) when it does not exist, rather than refusing a path that may be
    /// mistyped.
    #[arg(long)]
    pub create_ledger: bool,
}

/// The start of `--since`: a day (from its midnight, UTC) like 2026-11-29, or a time like
/// 2026-11-29T10:00:00Z. A date that does not exist is an error naming it.
pub fn parse_since(text: &str) -> Result<jiff::Timestamp, String> {
    let parsed = if text.contains(['T', 't', ' ']) {
        text.parse::<jiff::Timestamp>()
    } else {
        text.parse::<jiff::civil::Date>().and_then(|day| day.to_zoned(jiff::tz::TimeZone::UTC)).map(|z| z.timestamp())
    };
    parsed.map_err(|err| {
        format!("expected a date like 2026-11-29 or a time like 2026-11-29T10:00:00Z, got {text:?} ({err})")
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GroupBy {
    Day,
    Spec,
    Repo,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Csv,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    pub key: String,
    pub runs: usize,
    pub unfinished: usize,
    pub seconds: f64,
    pub allocation_usd: f64,
    pub max_usd: f64,
    pub usage_usd: f64,
}

pub fn group(rows: &[RunRow], by: GroupBy) -> Vec<Group> {
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    for r in rows {
        let key = match by {
            GroupBy::Day => r.started_at.chars().take(10).collect(),
            GroupBy::Spec => r.spec.clone(),
            GroupBy::Repo => r.repository.clone(),
        };
        let g = groups.entry(key.clone()).or_insert(Group {
            key,
            runs: 0,
            unfinished: 0,
            seconds: 0.0,
            allocation_usd: 0.0,
            max_usd: 0.0,
            usage_usd: 0.0,
        });
        g.runs += 1;
        g.unfinished += usize::from(r.status == UNFINISHED);
        g.seconds += r.seconds;
        g.allocation_usd += r.allocation_usd;
        g.max_usd += r.max_usd;
        g.usage_usd += r.usage_usd;
    }
    groups.into_values().collect()
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() }
}

fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<String>, out: &mut String| {
        let text: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        let _ = writeln!(out, "{}", text.join("  ").trim_end());
    };
    line(header.iter().map(|h| h.to_string()).collect(), &mut out);
    for row in rows {
        line(row.clone(), &mut out);
    }
    out
}

fn render<T: Serialize>(format: Format, header: &[&str], rows: Vec<Vec<String>>, data: &T) -> String {
    match format {
        Format::Json => serde_json::to_string_pretty(data).unwrap_or_default() + "\n",
        Format::Csv => {
            let mut out = header.join(",") + "\n";
            for row in rows {
                out.push_str(&row.iter().map(|c| csv_field(c)).collect::<Vec<_>>().join(","));
                out.push('\n');
            }
            out
        }
        Format::Table => table(header, &rows),
    }
}

fn usd(v: f64) -> String {
    format!("{v:.4}")
}

pub fn runs(rows: &[RunRow], format: Format) -> String {
    let header = [
        "run",
        "spec",
        "status",
        "started",
        "sandboxes",
        "seconds",
        "allocation_usd",
        "max_usd",
        "usage_usd",
        "lens_seconds",
    ];
    let cells = rows
        .iter()
        .map(|r| {
            vec![
                r.run_id.clone(),
                r.spec.clone(),
                r.status.clone(),
                r.started_at.clone(),
                r.sandboxes.to_string(),
                format!("{:.1}", r.seconds),
                usd(r.allocation_usd),
                usd(r.max_usd),
                usd(r.usage_usd),
                format!("{:.1}", r.lens_seconds),
            ]
        })
        .collect();
    render(format, &header, cells, &rows)
}

pub fn groups(groups: &[Group], by: GroupBy, format: Format) -> String {
    let key = match by {
        GroupBy::Day => "day",
        GroupBy::Spec => "spec",
        GroupBy::Repo => "repository",
    };
    let header = [key, "runs", "unfinished", "seconds", "allocation_usd", "max_usd", "usage_usd"];
    let cells = groups
        .iter()
        .map(|g| {
            vec![
                g.key.clone(),
                g.runs.to_string(),
                g.unfinished.to_string(),
                format!("{:.1}", g.seconds),
                usd(g.allocation_usd),
                usd(g.max_usd),
                usd(g.usage_usd),
            ]
        })
        .collect();
    render(format, &header, cells, &groups)
}

/// The instruction lens's part of a run, for the run's line: empty when it did not run.
fn lens_words(run: &RunRow) -> String {
    if run.lens_seconds <= 0.0 {
        return String::new();
    }
    format!(
        "\ninstruction lens: {:.0} s of the {:.0} s of sandbox time (~${:.4})",
        run.lens_seconds, run.seconds, run.lens_usd
    )
}

pub fn run(run: &RunRow, phases: &[PhaseRow], format: Format) -> String {
    #[derive(Serialize)]
    struct Detail<'a> {
        run: &'a RunRow,
        phases: &'a [PhaseRow],
    }
    let header =
        ["sandbox", "phase", "seconds", "cpu_seconds", "memory_gib_seconds", "allocation_usd", "max_usd", "usage_usd"];
    let cells: Vec<Vec<String>> = phases
        .iter()
        .map(|p| {
            vec![
                p.role.clone(),
                p.phase.clone(),
                format!("{:.1}", p.seconds),
                format!("{:.2}", p.cpu_seconds),
                format!("{:.2}", p.memory_gib_seconds),
                format!("{:.5}", p.allocation_usd),
                format!("{:.5}", p.max_usd),
                format!("{:.5}", p.usage_usd),
            ]
        })
        .collect();
    match format {
        Format::Table => format!(
            "run {} ({}, {}): allocation ${:.4} · max(request, usage) ${:.4} · usage ${:.4}{}\n\n{}",
            run.run_id,
            run.spec,
            run.status,
            run.allocation_usd,
            run.max_usd,
            run.usage_usd,
            lens_words(run),
            table(&header, &cells)
        ),
        _ => render(format, &header, cells, &Detail { run, phases }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, spec: &str, day: &str, usd: f64, status: &str) -> RunRow {
        RunRow {
            run_id: id.into(),
            spec: spec.into(),
            repository: "/repo".into(),
            base_commit: "a".into(),
            head_commit: "b".into(),
            status: status.into(),
            started_at: format!("{day}T10:00:00Z"),
            finished_at: None,
            sandboxes: 2,
            seconds: 60.0,
            allocation_usd: usd,
            max_usd: usd,
            usage_usd: usd / 2.0,
            lens_seconds: 0.0,
            lens_usd: 0.0,
        }
    }

    #[test]
    fn a_run_says_what_its_instruction_lens_took() {
        let plain = row("r1", "demo", "2026-11-28", 0.01, "completed");
        assert!(!run(&plain, &[], Format::Table).contains("instruction lens"));
        let lensed = RunRow { lens_seconds: 45.0, lens_usd: 0.0075, ..plain };
        let text = run(&lensed, &[], Format::Table);
        assert!(text.contains("instruction lens: 45 s of the 60 s of sandbox time (~$0.0075)"), "{text}");
        let csv = runs(std::slice::from_ref(&lensed), Format::Csv);
        assert!(
            csv.starts_with(
                "run,spec,status,started,sandboxes,seconds,allocation_usd,max_usd,usage_usd,lens_seconds\n"
            )
        );
        assert!(csv.lines().nth(1).unwrap().ends_with(",45.0"), "{csv}");
        let json: serde_json::Value = serde_json::from_str(&run(&lensed, &[], Format::Json)).unwrap();
        assert_eq!(
            (json["run"]["lens_seconds"].as_f64(), json["run"]["lens_usd"].as_f64()),
            (Some(45.0), Some(0.0075))
        );
    }

    #[test]
    fn groups_sum_by_day_and_spec() {
        let rows = [
            row("r1", "demo", "2026-11-28", 0.01, "completed"),
            row("r2", "demo", "2026-11-29", 0.02, "unfinished"),
            row("r3", "x", "2026-11-29", 0.04, "failed"),
        ];
        let by_day = group(&rows, GroupBy::Day);
        assert_eq!(by_day.len(), 2);
        assert_eq!((by_day[1].key.as_str(), by_day[1].runs, by_day[1].unfinished), ("2026-11-29", 2, 1));
        assert!((by_day[1].allocation_usd - 0.06).abs() < 1e-12);
        let by_spec = group(&rows, GroupBy::Spec);
        assert_eq!(by_spec.iter().map(|g| (g.key.as_str(), g.runs)).collect::<Vec<_>>(), [("demo", 2), ("x", 1)]);
        let csv = groups(&by_spec, GroupBy::Spec, Format::Csv);
        assert_eq!(csv.lines().next(), Some("spec,runs,unfinished,seconds,allocation_usd,max_usd,usage_usd"));
        assert_eq!(csv.lines().nth(1), Some("demo,2,1,120.0,0.0300,0.0300,0.0150"));
        assert!(runs(&rows, Format::Table).lines().nth(2).unwrap().contains("unfinished"));
        let json: serde_json::Value = serde_json::from_str(&runs(&rows, Format::Json)).unwrap();
        assert_eq!(json[0]["run_id"], "r1");
        assert_eq!(csv_field("a,\"b\""), "\"a,\"\"b\"\"\"");
    }

    #[test]
    fn since_is_a_real_day_or_time() {
        let at = |text: &str| parse_since(text).map(|t| t.to_string());
        assert_eq!(at("2026-11-29").unwrap(), "2026-11-29T00:00:00Z");
        assert_eq!(at("2026-11-29T10:30:00+02:00").unwrap(), "2026-11-29T08:30:00Z");
        for bad in ["2026-13-01", "2026-02-30", "yesterday", "2026-11-29T25:00:00Z", ""] {
            let err = at(bad).unwrap_err();
            assert!(err.contains(&format!("got {bad:?}")) && err.contains("2026-11-29"), "{bad}: {err}");
        }
    }
}
