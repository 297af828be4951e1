//! A sandbox's disk bound (`disk_gb`) as Docker enforces it: `--storage-opt size` (the bytes the
//! container may write), which overlay2 honours on XFS mounted with project quotas (a write past
//! it fails with ENOSPC) and btrfs through its quotas (EDQUOT; simple quotas, as
//! images/ensure-docker.sh sets up, count what the container writes, not the image it shares).
//! What an engine's refusal looks like, and the words for an engine that cannot. No bollard
//! here: the Docker backend calls these.

/// Whether an engine's answer to a create that asked for a disk bound is a refusal of the bound
/// itself (overlay2 off XFS: "--storage-opt is supported only for overlay over xfs with 'pquota'
/// mount option"; other drivers say "storage option … not supported", or name quotas).
pub fn refused(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    ["storage-opt", "storage opt", "storage option", "quota"].iter().any(|k| message.contains(k))
}

/// Why sandboxes of this engine get no disk bound, in words, with the way to one.
pub fn unenforced(driver: &str, message: &str) -> String {
    let driver = if driver.is_empty() { "its storage driver".to_string() } else { format!("storage driver {driver}") };
    format!(
        "the Docker engine cannot bound a container's disk ({driver}: {}); images/ensure-docker.sh starts one that can \
         (a data root on XFS with project quotas, or btrfs with simple quotas)",
        message.trim()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_bound_is_told_from_other_create_errors() {
        assert!(refused("--storage-opt is supported only for overlay over xfs with 'pquota' mount option"));
        assert!(refused("Storage Option overlay2.size only supported for backingFS XFS. Found extfs"));
        assert!(refused("btrfs: failed to enable quota: operation not permitted"));
        assert!(!refused("No such image: node:24-bookworm"));
        assert!(!refused("Conflict. The container name \"/x\" is already in use"));
    }

    #[test]
    fn the_reason_names_the_driver_the_engine_and_the_way_out() {
        let text = unenforced(
            "overlay2",
            " --storage-opt is supported only for overlay over xfs with 'pquota' mount option\n",
        );
        assert_eq!(
            text,
            "the Docker engine cannot bound a container's disk (storage driver overlay2: --storage-opt is supported only \
             for overlay over xfs with 'pquota' mount option); images/ensure-docker.sh starts one that can (a data root \
             on XFS with project quotas, or btrfs with simple quotas)"
        );
    }
}
