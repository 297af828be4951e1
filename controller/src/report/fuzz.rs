//! Fuzzing the escapers (proptest): whatever text a spec, a revision or a sandbox gives, the
//! Markdown escape leaves no tag start, no comment end, no table pipe, no newline and no control
//! character; the HTML escape no `<`, `>`, quote or control; a marker field nothing but
//! `[A-Za-z0-9._%-]` without `--`; the terminal sanitizer no escape sequence or control; and a
//! whole report with such text in every field keeps exactly its three markers and no live tag,
//! and its comment no mention, reference or link GitHub would make live ([`live`]).
//! Cases: `PROPTEST_CASES` (256 by default) per target.

use proptest::prelude::*;

use super::format::{escape, marker_field};
use super::tests::example;
use super::{Report, Rule, Status, html, markdown};
use crate::sanitize::terminal;

/// Text built from the pieces attacks are made of, and any other characters.
fn hostile() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        prop::sample::select(vec![
            "-->",
            "--!>",
            "<!--",
            "<script>",
            "</script>",
            "<img src=x onerror=alert(1)>",
            "<",
            ">",
            "|",
            "`",
            "\n",
            "\r",
            "\t",
            "%",
            "\\",
            "$",
            "&",
            "&lt;",
            "\"",
            "'",
            "[x](http://e)",
            "\u{1b}[31m",
            "\u{1b}]0;t\u{7}",
            "\u{1b}",
            "\u{9b}",
            "\u{202e}",
            "\u{0}",
            "\u{7f}",
            "é",
            "漢",
            "\u{fffd}",
            "--",
            "-",
            ":",
            "@octocat",
            "@org/team",
            "owner/repo#1",
            "#123",
            "GH-1",
            "gh-42",
            "https://evil.example/x",
            "HTTP://X.Y",
            "www.evil.example",
            "WwW.x",
            "a@b.co",
            "mailto:a@b.co",
            "@",
            "#",
            "www",
            "http",
            "//",
        ])
        .prop_map(String::from),
        any::<char>().prop_map(String::from),
        "[a-z ]{1,5}",
    ];
    prop::collection::vec(piece, 0..24).prop_map(|pieces| pieces.concat())
}

/// What GitHub would make live in `md`: a mention (`@name`), a reference (`#1`, `GH-1`), a link
/// (`scheme://`, `www.`). The comment's own entities (`&#124;`) and colours (`{#b9625f}`) are
/// not text GitHub reads.
fn live(md: &str) -> Vec<String> {
    let chars: Vec<char> = md.chars().collect();
    let lower: Vec<char> = chars.iter().map(|c| c.to_ascii_lowercase()).collect();
    let at = |i: usize| chars.get(i).copied().unwrap_or(' ');
    let mut found = Vec::new();
    for i in 0..chars.len() {
        let after_entity_start = i > 0 && (chars[i - 1] == '&' || chars[i - 1] == '{');
        let hit = match chars[i] {
            '@' => at(i + 1).is_ascii_alphanumeric() || at(i + 1) == '-' || at(i + 1) == '_',
            '#' => !after_entity_start && at(i + 1).is_ascii_digit(),
            ':' => i > 0 && chars[i - 1].is_ascii_alphanumeric() && at(i + 1) == '/' && at(i + 2) == '/',
            '-' => i >= 2 && lower[i - 2] == 'g' && lower[i - 1] == 'h' && at(i + 1).is_ascii_digit(),
            '.' => i >= 3 && lower[i - 3..i] == ['w', 'w', 'w'],
            _ => false,
        };
        if hit {
            found.push(chars[i.saturating_sub(12)..(i + 12).min(chars.len())].iter().collect());
        }
    }
    found
}

/// Whether every `$` of `md` is one the renderer writes itself: a colour's math (`$\``, `\`$`) or
/// an amount (`$0.0021`).
fn only_own_dollars(md: &str) -> bool {
    let chars: Vec<char> = md.chars().collect();
    chars.iter().enumerate().filter(|(_, c)| **c == '$').all(|(i, _)| {
        let next = chars.get(i + 1).copied().unwrap_or(' ');
        next == '`' || next.is_ascii_digit() || (i > 0 && chars[i - 1] == '`')
    })
}

fn no_control(text: &str) -> bool {
    !text.chars().any(|c| c.is_control() && c != '\n' && c != '\t')
}

proptest! {
    #[test]
    fn markdown_escape_leaves_nothing_live(text in hostile()) {
        let out = escape(&text);
        prop_assert!(!out.contains('<') && !out.contains('>'), "{out:?}");
        prop_assert!(!out.contains('|') && !out.contains('`') && !out.contains('\n'), "{out:?}");
        prop_assert!(no_control(&out), "{out:?}");
        prop_assert!(!out.contains('\u{1b}') && !out.contains('\u{9b}') && !out.contains('\u{202e}'), "{out:?}");
    }

    #[test]
    fn markdown_escape_leaves_no_math_delimiter(text in hostile()) {
        // GitHub reads inline math between dollar signs after undoing Markdown's escapes and
        // entities: a `$` of the product's, escaped or not, could draw anything.
        let out = escape(&text);
        prop_assert!(!out.contains('$'), "{:?} → {:?}", text, out);
    }

    #[test]
    fn markdown_escape_leaves_no_ping_and_no_link(text in hostile()) {
        let out = escape(&text);
        prop_assert!(live(&out).is_empty(), "{:?} → {:?}", text, out);
        // Only zero-width spaces were added to what GitHub shows.
        let shown = out.replace('\u{200b}', "");
        prop_assert_eq!(shown, escape(&text.replace('\u{200b}', "")).replace('\u{200b}', ""));
    }

    #[test]
    fn marker_fields_cannot_close_or_split_a_marker(text in hostile()) {
        let field = marker_field(&text);
        prop_assert!(field.chars().all(|c| c.is_ascii_alphanumeric() || "._%-".contains(c)), "{field:?}");
        prop_assert!(!field.contains("--"), "{field:?}");
    }

    #[test]
    fn json_written_for_a_terminal_keeps_its_value_and_obeys_nothing(text in hostile()) {
        let value = serde_json::json!({ "text": text });
        let written = serde_json::to_string_pretty(&value).unwrap();
        let safe = crate::sanitize::json(&written);
        prop_assert!(no_control(&safe), "{safe:?}");
        prop_assert!(!safe.contains('\u{202e}') && !safe.contains('\u{2066}'), "{safe:?}");
        prop_assert_eq!(serde_json::from_str::<serde_json::Value>(&safe).unwrap(), value);
    }

    #[test]
    fn the_terminal_sees_no_escape_sequence(text in hostile()) {
        let out = terminal(&text);
        prop_assert!(no_control(&out), "{out:?}");
        prop_assert!(!out.contains('\u{202e}'), "{out:?}");
        // Idempotent: what it lets through is already clean.
        let again = terminal(&out).into_owned();
        prop_assert_eq!(again, out.into_owned());
    }

    #[test]
    fn a_report_full_of_hostile_text_renders_inert(
        texts in prop::collection::vec(hostile(), 12),
        paired in any::<bool>(),
    ) {
        let mut report = Report { rule: if paired { Rule::Paired } else { Rule::Reference }, ..example(Status::Failed) };
        report.run_id = texts[0].clone();
        report.spec_name = texts[1].clone();
        report.image = texts[2].clone();
        report.head.commit = texts[3].clone();
        report.head.rev = texts[4].clone();
        report.base.commit = texts[5].clone();
        report.metrics[0].title = texts[6].clone();
        report.metrics[0].unit = texts[7].clone();
        report.metrics[1].group = texts[8].clone();
        report.errors = vec![texts[9].clone()];
        report.warnings = vec![texts[10].clone()];
        report.base_side.facts.insert("os".into(), texts[11].clone());
        let md = markdown::render(&report);
        // The markers are HTML comments: GitHub renders none of their text.
        let pings = live(&md.lines().skip(3).collect::<Vec<_>>().join("\n"));
        prop_assert!(pings.is_empty(), "live in the comment: {:?}\n{}", pings, md);
        prop_assert_eq!(md.matches("-->").count(), 3, "{}", md);
        prop_assert_eq!(md.matches("<!--").count(), 3, "{}", md);
        prop_assert!(md.lines().take(3).all(|l| l.starts_with("<!-- ") && l.ends_with(" -->")), "{}", md);
        prop_assert!(!md.contains("<script") && !md.contains("<img") && !md.contains('\u{1b}'), "{}", md);
        prop_assert!(only_own_dollars(&md), "a `$` of the product's in the comment:\n{}", md);
        let html = html::render(&report);
        prop_assert!(!html.contains("<script") && !html.contains("<img") && !html.contains("<!--"), "{}", html);
        prop_assert!(!html.contains('\u{1b}') && no_control(&html), "{}", html);
    }
}

#[test]
fn the_checker_sees_what_github_would_make_live() {
    for text in ["@octocat", "x @org/team", "owner/repo#1", "#123", "GH-1", "https://e.x", "www.e.x", "a@b.co"] {
        assert!(!live(text).is_empty(), "{text}");
    }
    for text in ["&#124; &#96;", "$`\\textcolor{#1f924e}{x}`$", "C# 5-6 @ # www", "a:b"] {
        assert!(live(text).is_empty(), "{text}");
    }
    // The comment's own text has nothing live; the run's own link, added by publish, is.
    let md = markdown::render(&Report { rule: Rule::Paired, ..example(Status::Completed) });
    assert!(live(&md).is_empty(), "{:?}", live(&md));
    assert!(!live("[Run, logs, and downloadable raw results](https://github.com/o/r/actions/runs/1)").is_empty());
}
