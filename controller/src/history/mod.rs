//! Main's history: every metric over commits, its change points, and a trend page.
//!
//! `sandbench history SPEC` ([`command`]) reads the records the ledger keeps ([`store`]),
//! arranges them as series along the branch's first-parent line ([`series`]), finds their change
//! points ([`analysis`], with `crate::stats::change_points`), bisects the lens's change points
//! between recorded commits (`crate::bisect`, with `--bisect`), and writes `history.json`,
//! `history.md` ([`markdown`]) and `history.html` ([`html`]).
//!
//! Layers, each using only those above it: `store`; `series` (pure); `analysis` (pure);
//! `markdown` and `html` (pure); `command`.

pub mod analysis;
pub mod command;
pub mod html;
pub mod markdown;
pub mod series;
pub mod store;
