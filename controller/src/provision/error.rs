//! The [`Provisioner`](super::Provisioner)'s errors: one kind per operation, whatever the
//! backend, so that callers can tell what failed without reading its words.

/// What the backend said (Docker's error, the fake's words).
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What went wrong, one kind per operation: a backend's own errors (Docker's) rarely say what
/// was being done.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    #[error(
        "cannot reach the Docker engine ({host}): {cause}; is dockerd running? (images/ensure-docker.sh starts one)"
    )]
    Connect { host: String, cause: Cause },
    #[error(
        "image {image} is not present and cannot be pulled: {cause}. Without a registry, build it with images/node24-bookworm/build-offline.sh"
    )]
    Pull { image: String, cause: Cause },
    #[error("cannot import image {tag}: {cause}")]
    Import { tag: String, cause: Cause },
    #[error("cannot create container {name}: {cause}")]
    Create { name: String, cause: Cause },
    #[error("cannot upload the agent into {name}: {cause}")]
    Upload { name: String, cause: Cause },
    #[error("cannot read {path} from {name}: {cause}")]
    Download { name: String, path: String, cause: Cause },
    #[error("cannot start container {name}: {cause}")]
    Start { name: String, cause: Cause },
    #[error("cannot inspect container {name}: {cause}")]
    Inspect { name: String, cause: Cause },
    #[error("cannot pin container {name} to its CPUs: {cause}")]
    Pin { name: String, cause: Cause },
    #[error("cannot signal container {name}: {cause}")]
    Kill { name: String, cause: Cause },
    #[error("cannot read the logs of {name}: {cause}")]
    Logs { name: String, cause: Cause },
    #[error("cannot remove container {name}: {cause}")]
    Remove { name: String, cause: Cause },
    #[error("cannot run a command in {name}: {cause}")]
    Exec { name: String, cause: Cause },
    #[error("cannot list containers: {cause}")]
    List { cause: Cause },
    #[error("cannot wait for container {name}: {cause}")]
    Wait { name: String, cause: Cause },
    #[error("cannot inspect image {image}: {cause}")]
    InspectImage { image: String, cause: Cause },
    #[error("cannot build an image from {image}: {cause}")]
    Build { image: String, cause: Cause },
    #[error("cannot tag image {id} as {tag}: {cause}")]
    Tag { id: String, tag: String, cause: Cause },
}
