//! The spec's harness files, written into `HARNESS_DIR` (owned by root, readable by every user)
//! before each phase, so fixture generators and benches come from the spec, not the revision.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::Context;
use sandbench_proto::plan::{AgentPlan, HARNESS_DIR};

pub fn write(plan: &AgentPlan) -> anyhow::Result<()> {
    write_into(Path::new(HARNESS_DIR), plan)
}

/// Writes each file whose content differs; scripts (`#!`) are executable.
pub fn write_into(dir: &Path, plan: &AgentPlan) -> anyhow::Result<()> {
    if plan.harness.is_empty() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    for (name, text) in &plan.harness {
        let path = dir.join(name);
        if std::fs::read(&path).is_ok_and(|old| old == text.as_bytes()) {
            continue;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        let mode = if text.starts_with("#!") { 0o755 } else { 0o644 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn harness_files_are_written_readable_and_scripts_executable() {
        let dir = tempfile::tempdir().unwrap();
        let mut plan: AgentPlan = serde_json::from_value(serde_json::json!({
            "source": {"kind": "none"},
            "prepare": {"commands": []},
            "install": {"command": {"run": "true", "timeout_s": 1.0}},
            "measure": {"settle_s": 1.0},
            "runtime": {},
        }))
        .unwrap();
        plan.harness.insert("gen.js".into(), "#!/usr/bin/env node\nconsole.log(1)\n".into());
        plan.harness.insert("data.json".into(), "{}".into());
        let target = dir.path().join("harness");
        write_into(&target, &plan).unwrap();
        let mode = |name: &str| std::fs::metadata(target.join(name)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode("gen.js"), 0o755);
        assert_eq!(mode("data.json"), 0o644);
        assert_eq!(std::fs::read_to_string(target.join("data.json")).unwrap(), "{}");
    }
}
