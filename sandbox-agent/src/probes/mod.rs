//! Measurements and process control the phases are built from. Probes never depend on phases.

pub mod disk;
pub mod memory;
pub mod processes;
pub mod readiness;
pub mod terminal;
