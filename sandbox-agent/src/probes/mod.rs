//! Measurements and process control the phases are built from. Probes never depend on phases.

pub mod command;
pub mod disk;
pub mod jsonl;
pub mod memory;
pub mod processes;
pub mod readiness;
pub mod script;
pub mod terminal;
