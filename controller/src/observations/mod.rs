//! The observation path: the agents' gRPC endpoint ([`server`]: auth, dedup, acks), what it
//! takes in from each event ([`intake`]: bounded output and files), and the run directory's
//! append-only event log it persists to before acknowledging ([`store`]).

pub mod intake;
pub mod server;
pub mod store;
