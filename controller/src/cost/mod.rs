//! Cost: what a run's sandboxes cost, and what runs cost across time.
//!
//! - [`rates`], pure: the rate card, and dollars from lifetimes and measured use;
//! - [`ledger`]: every run, finished or not, in an embedded SQLite database;
//! - [`view`], pure: `sandbench cost` output from the ledger's rows.

pub mod ledger;
pub mod rates;
pub mod view;

pub use rates::{
    Allocation, PhaseCost, PhaseUsage, RateCard, SandboxCost, SandboxRecord, attribute, hourly, phase_cost,
    sandbox_cost, stretch,
};
