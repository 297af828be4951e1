//! sandbench: benchmarks two revisions of a project inside fresh, identical Docker sandboxes.
//!
//! The controller side: provisioning ([`provision`]), the observation path ([`observations`]:
//! the agents' gRPC endpoint, its intake and the run directory's event log), what a run, a debug
//! session, the benchmark and the tests all set up alike ([`station`], with one sandbox's life in
//! [`station::sandbox`]), and the by-hand commands on this machine's sandboxes ([`by_hand`]).
//!
//! # Layers
//!
//! The modules form a one-way stack: each may use only the modules listed above it (a test,
//! `layers::the_crate_is_one_way`, reads this list and checks every `crate::` path of every
//! module's code against it; test modules are left out). Within a module, `run/` keeps a list
//! of its own (`run/mod.rs`).
//!
//! - `sanitize`: what a sandbox wrote, made safe for a terminal (pure).
//! - `display`: what a person sees: progress and warnings on stderr (stamped lines, a live line
//!   per sandbox on a terminal), a command's results on stdout; every command's, so the library
//!   prints nowhere else.
//! - `stats`: the statistics, the change points and the sequential design (pure).
//! - `agent_binary`: where the sandbox-agent executable is.
//! - `logging`: the controller's own diagnostics.
//! - `cost`: rates, the ledger, its views.
//! - `spec`: the spec, validated into a plan.
//! - `provision`: the sandboxes' engine (Docker, and the fake of the tests).
//! - `source`: the revisions and their trees.
//! - `shard`: a run's share of the pairs.
//! - `report`: the report as data and its renderings, the verdicts.
//! - `bridge`: the registry bridge.
//! - `observations`: the agents' gRPC endpoint, its intake and the event log.
//! - `by_hand`: the commands on this machine's sandboxes.
//! - `station`: what a run, a debug session and the benchmark set up alike.
//! - `bench`: the backbone benchmark.
//! - `debug`: one sandbox for a person.
//! - `bisect`: which commit changed a metric.
//! - `history`: main's history, its change points and pages.
//! - `run`: a comparison of two revisions.
//! - `record`: one revision or a range of commits into the history.
//! - `options`: what the commands share (exit statuses, the dead-man window).
//! - `publish`: the comment and status on a pull request, and `ci`.
//! - `merge`: the shards of a run combined.
//! - `cli`: the command line.

pub mod agent_binary;
pub mod bench;
pub mod bisect;
pub mod bridge;
pub mod by_hand;
pub mod cli;
pub mod cost;
pub mod debug;
pub mod display;
pub mod history;
pub mod logging;
pub mod merge;
pub mod observations;
pub mod options;
pub mod provision;
pub mod publish;
pub mod record;
pub mod report;
pub mod run;
pub mod sanitize;
pub mod shard;
pub mod source;
pub mod spec;
pub mod station;
pub mod stats;

#[cfg(test)]
mod layers;
