//! A sandbox's disk bound (`disk_gb`) as Docker enforces it: `--storage-opt size`, which overlay2
//! honours on XFS mounted with project quotas (a write past it fails with ENOSPC) and btrfs
//! through quota groups (EDQUOT). What an engine's refusal looks like, what size to ask for, and
//! the words for an engine that cannot. No bollard here: the Docker backend calls these.

/// Whether an engine's answer to a create that asked for a disk bound is a refusal of the bound
/// itself (overlay2 off XFS: "--storage-opt is supported only for overlay over xfs with 'pquota'
/// mount option"; other drivers say "storage option … not supported", or name quotas).
pub fn refused(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    ["storage-opt", "storage opt", "storage option", "quota"].iter().any(|k| message.contains(k))
}

/// The `size` to ask the engine for, so that the sandbox may write `bytes`: overlay2 bounds the
/// writable layer alone; btrfs bounds what the container's subvolume references, the image's
/// files included, so the image's size is added there.
pub fn size_for(driver: &str, bytes: u64, image_bytes: u64) -> u64 {
    if driver == "btrfs" { bytes.saturating_add(image_bytes) } else { bytes }
}

/// Why sandboxes of this engine get no disk bound, in words, with the way to one.
pub fn unenforced(driver: &str, message: &str) -> String {
    let driver = if driver.is_empty() { "its storage driver".to_string() } else { format!("storage driver {driver}") };
    format!(
        "the Docker engine cannot bound a container's disk ({driver}: {}); images/ensure-docker.sh starts one that can \
         (a data root on XFS with project quotas, or btrfs)",
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
    fn btrfs_counts_the_image_in_the_bound() {
        assert_eq!(size_for("overlay2", 250_000_000, 477_000_000), 250_000_000);
        assert_eq!(size_for("btrfs", 250_000_000, 477_000_000), 727_000_000);
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
             on XFS with project quotas, or btrfs)"
        );
    }
}
