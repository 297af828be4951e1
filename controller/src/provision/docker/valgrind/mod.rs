//! Valgrind in the sandbox, from the image's own distribution: a derived image, the spec's image
//! plus its distribution's `valgrind` package, built once through the engine's API and reused.
//! Tagged `sandbench-valgrind:<base image id, 12 hex>-<package version>` and labelled with the
//! base's full id, which is how it is found again.
//!
//! Two sources, in this order:
//! 1. the image's own package manager inside the build, where the engine gives builds a network
//!    (it has a `bridge` network; an engine started with `--bridge=none` has none);
//! 2. the host's apt, where the host runs the same distribution release (`ID` and
//!    `VERSION_CODENAME` of `/etc/os-release`) on the same architecture as the image: it
//!    downloads (`apt-get download`) `valgrind` and whatever of its dependencies the image's dpkg
//!    status lacks, and the build installs them with `dpkg -i` without a network.
//!
//! Otherwise a [`ValgrindError`] says what each source was and why it cannot serve.

mod build;
pub mod debian;
mod host;
pub mod release;

use std::collections::HashMap;
use std::fmt;
use std::time::Instant;

use crate::provision::DockerProvisioner;
use release::Release;

/// The repository of derived images.
pub const REPOSITORY: &str = "sandbench-valgrind";
/// The label naming the base image's id on a derived image.
pub const BASE_LABEL: &str = "io.sandbench.valgrind.base";
/// The label naming where the derived image's valgrind came from (`image`, `host`).
pub const SOURCE_LABEL: &str = "io.sandbench.valgrind.source";

/// How long one build may take (a package manager's downloads included).
const BUILD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// Where valgrind comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The image's own package manager, in a build with a network.
    ImagePackages,
    /// The host's apt, its packages installed in a build without one.
    HostApt,
}

impl Source {
    fn label(self) -> &'static str {
        match self {
            Source::ImagePackages => "image",
            Source::HostApt => "host",
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::ImagePackages => "the image's package manager",
            Source::HostApt => "the host's apt",
        })
    }
}

/// Why an image cannot have valgrind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValgrindError {
    /// Each source, and why it cannot serve.
    #[error("no valgrind for image {image}: {}", tried.iter().map(|(s, why)| format!("{s}: {why}")).collect::<Vec<_>>().join("; "))]
    Unavailable { image: String, tried: Vec<(Source, String)> },
    /// The engine failed before any source could be tried.
    #[error("no valgrind for image {image}: {cause}")]
    Engine { image: String, cause: String },
}

/// What [`ensure`] would do for an image, found without building.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValgrindProbe {
    /// Built already: this tag.
    Built(String),
    /// Would be built from this source; what it found.
    Buildable {
        source: Source,
        detail: String,
    },
    Unavailable(ValgrindError),
}

impl fmt::Display for ValgrindProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValgrindProbe::Built(tag) => write!(f, "valgrind: built already, {tag}"),
            ValgrindProbe::Buildable { source, detail } => {
                write!(f, "valgrind: would be built from {source} ({detail})")
            }
            ValgrindProbe::Unavailable(err) => write!(f, "{err}"),
        }
    }
}

/// The tag of the image derived from the image `base_id` with valgrind `version`: the id's
/// first 12 hex digits and the version, characters a tag cannot hold (`:`, `+`, `~`) as `_`.
pub fn tag(base_id: &str, version: &str) -> String {
    let id: String = base_id.trim_start_matches("sha256:").chars().take(12).collect();
    let version: String =
        version.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' }).collect();
    let mut tag = format!("{id}-{version}");
    tag.truncate(128);
    format!("{REPOSITORY}:{tag}")
}

/// A derived image of `base_id` the engine has already: its tag.
async fn existing(docker: &DockerProvisioner, base_id: &str) -> Result<Option<String>, String> {
    let images = docker.images_labelled(BASE_LABEL, base_id).await.map_err(|e| e.to_string())?;
    let prefix = format!("{REPOSITORY}:");
    Ok(images.into_iter().flat_map(|i| i.tags).find(|t| t.starts_with(&prefix)))
}

/// What is known of the base image once it has been read.
struct Base {
    image: String,
    facts: crate::provision::docker::ImageFacts,
    contents: build::Contents,
}

/// What [`Base::read`] found.
enum Found {
    /// The tag of the derived image, built already.
    Derived(String),
    Base(Base),
}

impl Base {
    /// The derived image of `image` when there is one already, else what is known of `image`.
    async fn read(docker: &DockerProvisioner, image: &str) -> Result<Found, ValgrindError> {
        let engine = |cause: String| ValgrindError::Engine { image: image.to_string(), cause };
        let facts = docker
            .image_facts(image)
            .await
            .map_err(|e| engine(e.to_string()))?
            .ok_or_else(|| engine("the engine does not have it yet (a run pulls it first)".to_string()))?;
        if let Some(tag) = existing(docker, &facts.id).await.map_err(engine)? {
            return Ok(Found::Derived(tag));
        }
        let contents = build::contents(docker, &facts.id).await.map_err(engine)?;
        Ok(Found::Base(Base { image: image.to_string(), facts, contents }))
    }

    fn release(&self) -> Option<Release> {
        self.contents.os_release.as_deref().and_then(release::parse)
    }
}

/// The image's own package manager can serve when builds get a network.
async fn image_packages(docker: &DockerProvisioner) -> Result<String, String> {
    match docker.has_network("bridge").await {
        true => Ok("builds get the engine's bridge network".to_string()),
        false => Err("the engine gives builds no network (it has no bridge network)".to_string()),
    }
}

/// The host's apt can serve when it runs the image's release and architecture and has a
/// candidate for everything the image lacks: those packages and versions.
async fn host_plan(base: &Base) -> Result<(Release, Vec<(String, String)>), String> {
    let Some(image_release) = base.release() else {
        return Err("the image has no /etc/os-release naming its distribution".to_string());
    };
    let host_release = release::host()?;
    if !host_release.same(&image_release) {
        return Err(format!("the host is {host_release}, the image is {image_release}"));
    }
    let Some(status) = &base.contents.dpkg_status else {
        return Err(format!("the image ({image_release}) has no dpkg status (/var/lib/dpkg/status)"));
    };
    let arch = host::architecture().await?;
    let image_arch = &base.facts.architecture;
    if !image_arch.is_empty() && *image_arch != arch {
        return Err(format!("the host is {arch}, the image is {image_arch}"));
    }
    let candidates = host::candidates("valgrind").await?;
    let wanted = debian::missing("valgrind", &candidates, &debian::packages(status))?;
    Ok((host_release, wanted))
}

/// What [`ensure`] would do, without building.
pub async fn probe(docker: &DockerProvisioner, image: &str) -> ValgrindProbe {
    let base = match Base::read(docker, image).await {
        Ok(Found::Base(base)) => base,
        Ok(Found::Derived(tag)) => return ValgrindProbe::Built(tag),
        Err(err) => return ValgrindProbe::Unavailable(err),
    };
    let host = host_plan(&base).await.map(|(release, wanted)| {
        let names: Vec<String> = wanted.iter().map(|(n, v)| format!("{n} {v}")).collect();
        format!("the host is {release} like the image; it would download {}", names.join(", "))
    });
    match (image_packages(docker).await, host) {
        (Ok(detail), host) => {
            let fallback = host.unwrap_or_else(|why| format!("cannot serve: {why}"));
            let detail = format!("{detail}; should that fail, {}: {fallback}", Source::HostApt);
            ValgrindProbe::Buildable { source: Source::ImagePackages, detail }
        }
        (Err(_), Ok(detail)) => ValgrindProbe::Buildable { source: Source::HostApt, detail },
        (Err(first), Err(why)) => ValgrindProbe::Unavailable(ValgrindError::Unavailable {
            image: image.to_string(),
            tried: vec![(Source::ImagePackages, first), (Source::HostApt, why)],
        }),
    }
}

/// Makes sure the image derived from `image` with valgrind exists, building it when it does
/// not (a minute or so; `progress` hears how it goes): its tag.
pub async fn ensure(
    docker: &DockerProvisioner,
    image: &str,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<String, ValgrindError> {
    let base = match Base::read(docker, image).await? {
        Found::Base(base) => base,
        Found::Derived(tag) => {
            tracing::debug!(image, tag, "valgrind image present");
            return Ok(tag);
        }
    };
    let began = Instant::now();
    let mut tried = Vec::new();
    for source in [Source::ImagePackages, Source::HostApt] {
        match build_from(docker, &base, source, progress).await {
            Ok(tag) => {
                let line = format!("valgrind: built {tag} from {source} in {:.0} s", began.elapsed().as_secs_f64());
                tracing::info!("{line}");
                progress(&line);
                return Ok(tag);
            }
            Err(why) => {
                progress(&format!("valgrind: {source} cannot serve: {why}"));
                tried.push((source, why));
            }
        }
    }
    Err(ValgrindError::Unavailable { image: image.to_string(), tried })
}

/// Builds the derived image from one source and tags it: the tag, or why that source cannot.
async fn build_from(
    docker: &DockerProvisioner,
    base: &Base,
    source: Source,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<String, String> {
    let (id, user) = (&base.facts.id, &base.facts.user);
    // Held until the build is done: the downloaded packages go with it.
    let mut folder = None;
    let context = match source {
        Source::ImagePackages => {
            image_packages(docker).await?;
            progress(&format!("valgrind: installing it into {} with the image's package manager", base.image));
            build::package_manager_context(id, user)?
        }
        Source::HostApt => {
            let (release, wanted) = host_plan(base).await?;
            let dir = tempfile::Builder::new()
                .prefix("sandbench-valgrind-")
                .tempdir()
                .map_err(|e| format!("cannot make a folder for the packages: {e}"))?;
            let names: Vec<String> = wanted.iter().map(|(n, v)| format!("{n} {v}")).collect();
            progress(&format!("valgrind: downloading with the host's apt ({release}): {}", names.join(", ")));
            let debs = host::download(&wanted, dir.path()).await?;
            folder = Some(dir);
            progress(&format!("valgrind: installing {} packages into {}", debs.len(), base.image));
            build::debs_context(id, user, &debs)?
        }
    };
    let labels =
        HashMap::from([(BASE_LABEL.to_string(), id.clone()), (SOURCE_LABEL.to_string(), source.label().to_string())]);
    let network = source == Source::ImagePackages;
    let mut shown = |line: &str| {
        tracing::debug!("valgrind build: {line}");
        if line.starts_with("Step ") {
            progress(&format!("valgrind: {line}"));
        }
    };
    let built = tokio::time::timeout(BUILD_TIMEOUT, docker.build(id, context, labels, network, &mut shown))
        .await
        .map_err(|_| format!("the build took more than {} min", BUILD_TIMEOUT.as_secs() / 60))?
        .map_err(|e| e.to_string())?;
    drop(folder);
    let version = build::version_in(&built.output).ok_or("the build named no valgrind version")?;
    let tag = tag(id, &version);
    docker.tag(&built.id, &tag).await.map_err(|e| e.to_string())?;
    Ok(tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tag_names_the_base_and_the_version() {
        let id = "sha256:2e603083a66b05453e1f986461ecd5f4cdb0dbff62e5d21446ec814323110829";
        assert_eq!(tag(id, "1:3.19.0-1"), "sandbench-valgrind:2e603083a66b-1_3.19.0-1");
        assert_eq!(tag(id, "3.22.0-r0"), "sandbench-valgrind:2e603083a66b-3.22.0-r0");
        assert_eq!(tag(id, "1:3.24.0-2+b1~x"), "sandbench-valgrind:2e603083a66b-1_3.24.0-2_b1_x");
        let err = ValgrindError::Unavailable {
            image: "x:1".into(),
            tried: vec![
                (Source::ImagePackages, "no network".into()),
                (Source::HostApt, "the host is a, the image is b".into()),
            ],
        };
        assert_eq!(
            err.to_string(),
            "no valgrind for image x:1: the image's package manager: no network; the host's apt: the host is a, the image is b"
        );
    }
}
