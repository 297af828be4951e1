//! sandbench: benchmarks two revisions of a project inside fresh, identical Docker sandboxes.
//!
//! The controller side: provisioning ([`provision`]), the observation path ([`observations`]:
//! the agents' gRPC endpoint, its intake and the run directory's event log), what a run, a debug
//! session, the benchmark and the tests all set up alike ([`station`], with one sandbox's life in
//! [`station::sandbox`]), and the by-hand commands on this machine's sandboxes ([`by_hand`]).

pub mod agent_binary;
pub mod bench;
pub mod bisect;
pub mod bridge;
pub mod by_hand;
pub mod cli;
pub mod cost;
pub mod debug;
pub mod history;
pub mod logging;
pub mod merge;
pub mod observations;
pub mod options;
pub mod provision;
pub mod publish;
pub mod report;
pub mod run;
pub mod sanitize;
pub mod shard;
pub mod source;
pub mod spec;
pub mod station;
pub mod stats;
