//! sandbench protocol v1, generated from `proto/sandbench/v1/agent.proto`, and the vocabulary
//! agent and controller share: phases ([`Phase`]), phase commands ([`StepId`]), metric keys
//! ([`metric`]), sides ([`Side`]) and a sandbox's place in its run ([`Placement`]).

/// Generated messages and the `Agent` service: `src/generated/sandbench.v1.rs`, made by
/// `scripts/proto-gen` from the .proto and checked in, so that no build compiles the generator
/// (a test checks it is of the .proto as it is).
#[allow(clippy::all, missing_docs)]
pub mod v1 {
    include!("generated/sandbench.v1.rs");
}

/// The agent's plan, as JSON inside `RunPhase`.
pub mod plan;

pub mod cap;
pub mod conditions;
pub mod lens;
pub mod metric;
pub mod phase;
mod placement;
mod side;
mod step;

pub use phase::{Phase, UnknownPhase};
pub use placement::{NoSide, Placement};
pub use side::{Side, UnknownSide};
pub use step::{NotAStep, StepId};

/// Largest message either side accepts or sends. Event batches are cut well below it.
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;

/// Largest log or file chunk carried in one event.
pub const MAX_CHUNK_BYTES: usize = 1024 * 1024;

/// Name of the Unix socket the controller listens on, inside the folder mounted into sandboxes.
pub const SOCKET_NAME: &str = "agent.sock";

/// Output kept per (sandbox, command) when a spec sets none (`[sandbox] output_kb`): half for
/// its head, half for its tail. The controller sends its cap in `Welcome`; the agent bounds
/// files it keeps as output by it when none came.
pub const DEFAULT_OUTPUT_CAP_BYTES: u64 = 2 << 20;

/// Where the socket folder is mounted inside a sandbox.
pub const SOCKET_DIR_IN_SANDBOX: &str = "/run/sandbench";

/// Environment variables the controller sets for the agent (PID 1 only; never passed on).
pub mod env {
    pub const SANDBOX_ID: &str = "SANDBENCH_SANDBOX_ID";
    pub const TOKEN: &str = "SANDBENCH_TOKEN";
    pub const SOCKET: &str = "SANDBENCH_SOCKET";
    pub const STATE_DIR: &str = "SANDBENCH_STATE_DIR";
    /// The sandbox's [`crate::Placement`], when it has one: its side, pair and attempt.
    pub const SIDE: &str = "SANDBENCH_SIDE";
    pub const PAIR: &str = "SANDBENCH_PAIR";
    pub const ATTEMPT: &str = "SANDBENCH_ATTEMPT";
}

/// The bytes a URL path's percent-escapes stand for (`%2e` is `.`); None for a malformed escape.
/// Used wherever a path from a sandbox is checked (the agent's origin server, the registry
/// bridge): each decides what bytes that are not UTF-8 mean.
pub fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod percent_tests {
    #[test]
    fn escapes_are_decoded_and_a_malformed_one_is_refused() {
        assert_eq!(super::percent_decode("/a%2E%2e/%41b").unwrap(), b"/a../Ab");
        assert_eq!(super::percent_decode("%ff").unwrap(), [0xff]);
        for bad in ["%", "%4", "%zz", "a%2"] {
            assert_eq!(super::percent_decode(bad), None, "{bad}");
        }
    }
}

#[cfg(test)]
mod generated_tests {
    use sha2::{Digest, Sha256};

    #[test]
    fn the_generated_code_is_of_the_proto_as_it_is() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let proto = std::fs::read(dir.join("proto/sandbench/v1/agent.proto")).unwrap();
        let hex: String = Sha256::digest(proto).iter().map(|b| format!("{b:02x}")).collect();
        let code = std::fs::read_to_string(dir.join("src/generated/sandbench.v1.rs")).unwrap();
        let header = code.lines().next().unwrap_or_default();
        assert!(
            header.contains(&format!("(sha256 {hex})")),
            "proto/src/generated/sandbench.v1.rs is not of agent.proto as it is (sha256 {hex}): run scripts/proto-gen\n{header}"
        );
    }
}
