//! Main's history: every metric over commits, its change points, and a trend page.
//!
//! Layers, each using only those above it: `store`.

pub mod store;
