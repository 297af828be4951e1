//! The sandbox agent's library: the journal, the session with the controller, the phases and
//! the probes they are built from. The `sandbox-agent` binary wires them together.

// A panic here loses a measurement: no unwrap outside tests.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod as_user;
pub mod bridge;
pub mod commands;
pub mod conditions;
pub mod context;
pub mod facts;
pub mod ipc;
pub mod isolation;
pub mod journal;
pub mod logging;
pub mod origin;
pub mod phases;
pub mod probes;
pub mod reaper;
pub mod safefs;
pub mod session;
pub mod status;
pub mod turns;
pub mod users;

/// Returns memory freed by the allocator to the kernel (glibc keeps it otherwise, and the
/// agent's idle footprint is part of what it costs the sandbox).
pub fn release_free_memory() {
    // Raw libc: malloc_trim is glibc's own (neither rustix nor nix has it).
    // SAFETY: malloc_trim only releases free heap memory; it takes a plain integer.
    unsafe {
        libc::malloc_trim(0);
    }
}
