//! The instruction lens in a fake sandbox, as the real agent runs it: a step's counts only in the
//! trials whose plan asks for them, and a profile file for each lens run (`lens/<stem>-<trial>.json`,
//! which the report's lens summary counts and charges).

use sandbench_proto::Phase;
use sandbench_proto::lens::{self, Profile};
use sandbench_proto::metric::COLD;
use sandbench_proto::plan::AgentPlan;
use sandbench_proto::v1::{FileChunk, event};

/// Sandbox seconds a fake lens run takes, as its profile says.
pub const FAKE_LENS_SECONDS: f64 = 30.0;

/// The lens steps the plan sent with a phase command asks of `phase`, by stem; none when the
/// plan cannot be read.
pub fn asked(plan: &[u8], phase: Option<Phase>) -> Vec<String> {
    let Ok(plan) = serde_json::from_slice::<AgentPlan>(plan) else { return Vec::new() };
    let section = match phase {
        Some(Phase::Measure) if plan.measure.instructions => return vec![COLD.to_string()],
        Some(Phase::Runtime) => &plan.runtime,
        Some(Phase::Transport) => &plan.transport,
        Some(Phase::Ui) => &plan.ui,
        _ => return Vec::new(),
    };
    let commands = section.commands.iter().filter(|c| c.instructions).map(|c| c.metric.clone());
    let scripts = section.scripts.iter().filter(|s| s.instructions).map(|s| format!("script.{}", s.name));
    let benches = section.benches.iter().filter(|b| b.instructions).map(|b| b.stem());
    commands.chain(scripts).chain(benches).collect()
}

/// The profile file of one lens run of `stem` in `trial`, as the agent sends it.
pub fn profile_file(command_id: &str, stem: &str, trial: u32, instructions: f64) -> event::Body {
    let profile = Profile {
        instructions: instructions as u64,
        cycles: instructions as u64,
        processes: 1,
        functions: Vec::new(),
        state: "a fake sandbox's".to_string(),
        seconds: FAKE_LENS_SECONDS,
    };
    event::Body::File(FileChunk {
        command_id: command_id.to_string(),
        path: lens::profile_path(stem, trial),
        offset: 0,
        data: serde_json::to_vec(&profile).unwrap_or_default(),
        last: true,
    })
}
