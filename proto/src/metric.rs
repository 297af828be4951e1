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

/// Companions of a timed metric: what its step's process tree cost besides wall time, named
/// `<key><suffix>` (`cold.cpu`, `install.maxrss`, …). The agent records them beside every timed
/// step whose process tree it can attribute; the report judges `.cpu` on its own noise and shows
/// the others in its details.
pub mod companion {
    /// User + system CPU seconds of the process tree.
    pub const CPU: &str = ".cpu";
    /// The largest peak resident set of one process of the tree, bytes.
    pub const MAXRSS: &str = ".maxrss";
    /// Minor page faults (no disk read).
    pub const MINFLT: &str = ".minflt";
    /// Major page faults (a disk read).
    pub const MAJFLT: &str = ".majflt";
    /// Voluntary context switches (the process waited).
    pub const VCSW: &str = ".vcsw";
    /// Involuntary context switches (the scheduler took the CPU away).
    pub const IVCSW: &str = ".ivcsw";
    /// Every suffix with the unit of its observations, in report order.
    pub const ALL: [(&str, &str); 6] =
        [(CPU, "s"), (MAXRSS, "bytes"), (MINFLT, ""), (MAJFLT, ""), (VCSW, ""), (IVCSW, "")];

    /// The metric a companion key belongs to, and its suffix: `cold.cpu` → (`cold`, `.cpu`).
    pub fn split(key: &str) -> Option<(&str, &'static str)> {
        ALL.iter().find_map(|(suffix, _)| key.strip_suffix(suffix).filter(|s| !s.is_empty()).map(|s| (s, *suffix)))
    }
}
