//! Keys of the metrics the agent records by itself, the reference harness's built-in ones. The
//! agent emits them, the controller expects, defines and reports them by these names. A spec's
//! runtime metrics are named by the spec and have no constant.

/// Total size of the release artifacts, bytes (prepare).
pub const BUNDLE: &str = "bundle";
/// The timed install command, seconds (install).
pub const INSTALL: &str = "install";
/// Interactive start-up to the first echo of the typed probe, first start, seconds (measure).
pub const COLD: &str = "cold";
/// The same, second start, seconds (measure).
pub const WARM: &str = "warm";
/// Summed RSS of the user's processes after the settle, bytes (measure).
pub const RSS: &str = "rss";
/// Summed PSS of the same processes, bytes (measure; recorded where the kernel has it).
pub const PSS: &str = "pss";
/// Installed footprint after first use, bytes (measure, trial 0).
pub const DISK: &str = "disk";
