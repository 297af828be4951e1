//! The size bound of the pull-request comment, in one place. GitHub refuses a comment over
//! 65,536 characters (422), and a refused comment leaves the pull request without a verdict, so
//! every comment sandbench writes — a run's `report.md`, `sandbench report`, `merge`, `publish`
//! and `ci`'s notices — fits, whatever the run produced.
//!
//! The bound is counted in UTF-8 bytes, never fewer than characters or UTF-16 units, so it
//! holds however GitHub counts. A comment is assembled from [`Block`]s: text that is always kept
//! (the markers, the title, the status, the headline) and lists of items that give way when the
//! whole does not fit, in this order: unchanged rows, then details, then warnings; the changed
//! rows only as a last resort, when they alone are more than the bound. A list that gave way
//! keeps its first items and says how many were left out and that `report.html` has them.
//! [`guard`] bounds a text built elsewhere (a notice, a `report.md` read back) by cutting whole
//! lines from its end.

use std::borrow::Cow;

/// The largest comment GitHub accepts.
pub const MAX_BYTES: usize = 65_536;
/// The longest CI run link `publish` puts into a comment (`check_url` refuses longer ones).
pub const MAX_URL_BYTES: usize = 1_900;
/// What `publish` may add to a rendered comment: the CI attempt's digits in the marker and the
/// link to the CI run in place of the local-run sentence.
pub const STAMP_ROOM: usize = MAX_URL_BYTES + 100;
/// What a renderer may write: the bound less the stamp's room.
pub const RENDER_BYTES: usize = MAX_BYTES - STAMP_ROOM;

/// What a list is, in the order lists give way (first to last).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    Unchanged,
    Details,
    Warnings,
    /// The changed rows: given way only when everything else is gone and still too much.
    Changed,
    /// Never dropped.
    Kept,
}

/// A part of a comment: `head`, its items, `tail`. Items give way from the last, but those
/// marked fixed; when some gave way, the tail is followed by a line saying how many of which
/// `noun` were left out; when none is left, the head and tail go too.
#[derive(Debug, Clone)]
pub struct Block {
    class: Class,
    head: String,
    items: Vec<Item>,
    tail: String,
    noun: &'static str,
}

#[derive(Debug, Clone)]
struct Item {
    text: String,
    fixed: bool,
    kept: bool,
}

impl Block {
    pub fn kept(text: impl Into<String>) -> Block {
        Block { class: Class::Kept, head: text.into(), items: Vec::new(), tail: String::new(), noun: "" }
    }

    pub fn list(class: Class, head: String, items: Vec<String>, tail: String, noun: &'static str) -> Block {
        Block::mixed(class, head, items.into_iter().map(|t| (t, false)).collect(), tail, noun)
    }

    /// A list of which some items (`true`) never give way.
    pub fn mixed(class: Class, head: String, items: Vec<(String, bool)>, tail: String, noun: &'static str) -> Block {
        let items = items.into_iter().map(|(text, fixed)| Item { text, fixed, kept: true }).collect();
        Block { class, head, items, tail, noun }
    }

    fn droppable(&self) -> usize {
        self.items.iter().filter(|i| !i.fixed).count()
    }

    fn dropped(&self) -> usize {
        self.items.iter().filter(|i| !i.kept).count()
    }

    /// Leaves out the last item that can give way; false when none is left.
    fn give_way(&mut self) -> bool {
        match self.items.iter_mut().rev().find(|i| i.kept && !i.fixed) {
            Some(item) => {
                item.kept = false;
                true
            }
            None => false,
        }
    }

    fn note(&self) -> Option<String> {
        (self.dropped() > 0).then(|| {
            format!(
                "_{} of {} {} left out to keep this comment within GitHub's limit of {} characters: report.html has them._\n\n",
                self.dropped(),
                self.droppable(),
                self.noun,
                crate::spec::numbers::number(MAX_BYTES as f64, 0, false)
            )
        })
    }

    fn shows_frame(&self) -> bool {
        self.items.is_empty() || self.items.iter().any(|i| i.kept)
    }

    fn len(&self) -> usize {
        let note = self.note().map_or(0, |n| n.len());
        if !self.shows_frame() {
            return note;
        }
        let items: usize = self.items.iter().filter(|i| i.kept).map(|i| i.text.len()).sum();
        self.head.len() + items + self.tail.len() + note
    }

    fn write(&self, out: &mut String) {
        if self.shows_frame() {
            out.push_str(&self.head);
            for item in self.items.iter().filter(|i| i.kept) {
                out.push_str(&item.text);
            }
            out.push_str(&self.tail);
        }
        if let Some(note) = self.note() {
            out.push_str(&note);
        }
    }
}

/// The blocks in order, with lists cut until the whole is at most `budget` bytes (then
/// [`guard`]ed, for kept text alone over the budget).
pub fn assemble(mut blocks: Vec<Block>, budget: usize) -> String {
    let mut total: usize = blocks.iter().map(Block::len).sum();
    for class in [Class::Unchanged, Class::Details, Class::Warnings, Class::Changed] {
        for block in blocks.iter_mut().rev().filter(|b| b.class == class) {
            while total > budget {
                let before = block.len();
                if !block.give_way() {
                    break;
                }
                total = total - before + block.len();
            }
        }
    }
    let mut out = String::with_capacity(total);
    for block in &blocks {
        block.write(&mut out);
    }
    match guard_to(&out, budget) {
        Cow::Borrowed(_) => out,
        Cow::Owned(cut) => cut,
    }
}

/// `body` within [`MAX_BYTES`]: as it is when it fits, else its first whole lines and a line
/// saying the rest was cut (the markers, first, are always kept).
pub fn guard(body: &str) -> Cow<'_, str> {
    guard_to(body, MAX_BYTES)
}

const CUT: &str =
    "\n\n_The rest of this comment was cut to keep it within GitHub's limit: report.html has all of it._\n";

fn guard_to(body: &str, budget: usize) -> Cow<'_, str> {
    if body.len() <= budget {
        return Cow::Borrowed(body);
    }
    let room = budget.saturating_sub(CUT.len());
    let mut end = room.min(body.len());
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    // Whole lines only: no entity, code span or table row is cut in two.
    let end = body[..end].rfind('\n').map_or(end, |at| at + 1);
    Cow::Owned(format!("{}{CUT}", body[..end].trim_end()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(n: usize, width: usize) -> Vec<String> {
        (0..n).map(|i| format!("{i:0width$}\n")).collect()
    }

    #[test]
    fn what_fits_is_kept_whole() {
        let blocks = vec![
            Block::kept("# title\n"),
            Block::list(Class::Unchanged, "head\n".into(), items(3, 3), "tail\n".into(), "rows"),
        ];
        assert_eq!(assemble(blocks, 1000), "# title\nhead\n000\n001\n002\ntail\n");
    }

    #[test]
    fn lists_give_way_in_their_order_and_say_how_many() {
        let blocks = || {
            vec![
                Block::kept("KEPT\n"),
                Block::list(Class::Changed, String::new(), items(10, 9), String::new(), "changed rows"),
                Block::list(Class::Warnings, "W\n".into(), items(100, 9), String::new(), "warnings"),
                Block::list(Class::Unchanged, "U\n".into(), items(100, 9), "\n".into(), "unchanged rows"),
                Block::list(Class::Details, "<details>\n".into(), items(100, 9), "</details>\n".into(), "lines"),
            ]
        };
        // Room for everything but about half the unchanged rows.
        let full: usize = blocks().iter().map(Block::len).sum();
        let out = assemble(blocks(), full - 500);
        assert!(out.len() <= full - 500);
        assert!(out.contains("of 100 unchanged rows left out") && !out.contains("warnings left out"), "{out}");
        assert!(out.contains("<details>\n") && out.contains("</details>\n"), "{out}");
        // Less room: the unchanged rows are gone, then the details, then warnings give way.
        let out = assemble(blocks(), 800);
        assert!(out.len() <= 800, "{}", out.len());
        assert!(out.contains("_100 of 100 unchanged rows left out") && !out.contains("\nU\n"), "{out}");
        assert!(out.contains("_100 of 100 lines left out") && !out.contains("<details>"), "{out}");
        assert!(out.contains("of 100 warnings left out") && out.contains("W\n"), "{out}");
        assert!(out.starts_with("KEPT\n") && (0..10).all(|i| out.contains(&format!("{i:09}\n"))), "{out}");
        // Only when the rest is gone do changed rows give way.
        let out = assemble(blocks(), 450);
        assert!(out.len() <= 450 && out.contains("of 10 changed rows left out") && out.starts_with("KEPT\n"), "{out}");
    }

    #[test]
    fn a_guarded_text_keeps_whole_lines_and_says_it_was_cut() {
        assert!(matches!(guard("short\n"), Cow::Borrowed("short\n")));
        let long = format!("<!-- sandbench:v1 -->\n{}", "é &#124; x\n".repeat(20_000));
        let cut = guard(&long);
        assert!(cut.len() <= MAX_BYTES, "{}", cut.len());
        assert!(cut.starts_with("<!-- sandbench:v1 -->\n") && cut.ends_with("report.html has all of it._\n"));
        let body = cut.trim_end_matches(CUT);
        assert!(body.lines().skip(1).all(|l| l == "é &#124; x"), "a line was cut in two");
    }
}
