//! Measurements and process control the phases are built from. Probes never depend on phases.

pub mod callgrind;
pub mod command;
pub mod cpu;
pub mod disk;
pub mod expect;
pub mod jsonl;
pub mod keys;
pub mod lens;
pub mod memory;
pub mod processes;
pub mod readiness;
pub mod script;
pub mod size;
pub mod socket;
pub mod template;
pub mod terminal;
pub mod timed;
pub mod usage;
