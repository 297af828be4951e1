//! The sandbox agent's library: the journal, the session with the controller, the phases and
//! the probes they are built from. The `sandbox-agent` binary wires them together.

// A panic here loses a measurement: no unwrap outside tests.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod commands;
pub mod facts;
pub mod journal;
pub mod origin;
pub mod phases;
pub mod probes;
pub mod reaper;
pub mod session;
pub mod status;
pub mod users;

/// The agent's own log, on stderr, which the controller collects at teardown.
pub fn log(message: &str) {
    let ms = journal::now_unix_ms();
    eprintln!("sandbox-agent {}.{:03} {message}", ms / 1000, ms % 1000);
}

/// Returns memory freed by the allocator to the kernel (glibc keeps it otherwise, and the
/// agent's idle footprint is part of what it costs the sandbox).
pub fn release_free_memory() {
    // SAFETY: malloc_trim only releases free heap memory; it takes a plain integer.
    unsafe {
        libc::malloc_trim(0);
    }
}
