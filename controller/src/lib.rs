//! sandbench: benchmarks two revisions of a project inside fresh, identical Docker sandboxes.
//!
//! The controller side: provisioning ([`provision`]), the observation path ([`observations`]:
//! the agents' gRPC endpoint, its intake and the run directory's event log), one sandbox's life
//! ([`sandbox`]), and what a run, a debug session, the benchmark and the tests all set up alike
//! ([`station`]).

pub mod agent_binary;
pub mod bench;
pub mod bisect;
pub mod cli;
pub mod cost;
pub mod debug;
pub mod logging;
pub mod merge;
pub mod observations;
pub mod options;
pub mod provision;
pub mod publish;
pub mod report;
pub mod run;
pub mod sandbox;
pub mod sandboxes;
pub mod sanitize;
pub mod shard;
pub mod source;
pub mod spec;
pub mod station;
pub mod stats;
