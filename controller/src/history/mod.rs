//! Main's history: every metric over commits, its change points, and a trend page.
//!
//! Compare runs keep their base and head in the ledger's history at their end ([`compare`],
//! which also sets where a pull request's head stands against main's recent values), and
//! `sandbench record` keeps one revision, or every Nth commit of a range (`crate::record`, a run
//! of its own above this module);
//! `sandbench history SPEC` ([`command`]) reads them back ([`store`]), arranges them as series
//! along the branch's first-parent line ([`series`]), finds their change points
//! ([`analysis`], with `crate::stats::change_points`), bisects the lens's change points between
//! recorded commits (`crate::bisect`, with `--bisect`), and writes `history.json`, `history.md`
//! ([`markdown`]) and `history.html` ([`html`]).
//!
//! Layers, each using only those above it: `store`; `series` (pure); `analysis` (pure);
//! `markdown` and `html` (pure); `compare`; `command`.

pub mod analysis;
pub mod command;
pub mod compare;
pub mod html;
pub mod markdown;
pub mod series;
pub mod store;
