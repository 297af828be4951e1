//! Valgrind in the sandbox, end to end against the real engine: the image derived from
//! node:24-bookworm with Debian's valgrind (here through the host's apt: the engine gives builds
//! no network, the host runs bookworm too), reused once built, run by a sandbox's non-root user;
//! and an image neither source can serve, refused with both reasons.
//!
//! Each test derives from a base image of its own (the node image plus a label), so the build
//! really happens, and removes that base and its derived image at the end; the cache image of
//! node:24-bookworm itself is left alone.

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandbench::observations::server::HubConfig;
use sandbench::provision::valgrind::{self, Source};
use sandbench::provision::{DockerProvisioner, Provisioner, ValgrindError, ValgrindProbe, labels};
use sandbench::station::{Station, StationOptions};
use support::{BUSYBOX_IMAGE, NODE_IMAGE};

async fn docker() -> Arc<DockerProvisioner> {
    Arc::new(
        DockerProvisioner::connect(2)
            .await
            .expect("these tests need a Docker engine (images/ensure-docker.sh starts one)"),
    )
}

/// A context tar: a Dockerfile and these files beside it.
fn context(dockerfile: &str, files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut all = vec![("Dockerfile", dockerfile.as_bytes())];
    all.extend_from_slice(files);
    for (name, bytes) in all {
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o644);
        header.set_size(bytes.len() as u64);
        builder.append_data(&mut header, name, bytes).expect("tar");
    }
    builder.into_inner().expect("tar")
}

/// Builds `dockerfile` (with `files`) as `tag`, running nothing: its id.
async fn build_test_image(docker: &DockerProvisioner, tag: &str, dockerfile: &str, files: &[(&str, &[u8])]) -> String {
    let built = docker
        .build(tag, context(dockerfile, files), HashMap::new(), false, &mut |_| {})
        .await
        .expect("build the test image");
    docker.tag(&built.id, tag).await.expect("tag the test image");
    built.id
}

/// Removes the test's images (derived ones included) whatever the test did.
struct Images(Arc<DockerProvisioner>, Vec<String>);

impl Images {
    async fn remove(&self) {
        for image in self.1.iter().rev() {
            self.0.remove_image(image).await.expect("remove a test image");
        }
    }
}

/// No container of this process's valgrind work is left (inspection and build containers).
async fn assert_no_leftovers(docker: &DockerProvisioner) {
    let left = docker.list(Some((labels::RUN, "inspect"))).await.expect("list containers");
    let mine = format!("sandbench-inspect-{}-", std::process::id());
    let left: Vec<_> = left.iter().filter(|c| c.name.starts_with(&mine)).map(|c| c.name.clone()).collect();
    assert!(left.is_empty(), "containers left behind: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_bookworm_gets_debians_valgrind_built_once_and_run_by_a_sandbox_user() {
    let docker = docker().await;
    docker.ensure_image(NODE_IMAGE, &mut |_| {}).await.expect("the node image");
    let base_tag = format!("sandbench-test/valgrind-base:{}", std::process::id());
    let node_id = docker.image_facts(NODE_IMAGE).await.unwrap().unwrap().id;
    let dockerfile = format!("FROM {node_id}\nLABEL io.sandbench.test.valgrind={}\n", std::process::id());
    let base_id = build_test_image(&docker, &base_tag, &dockerfile, &[]).await;
    let mut images = Images(docker.clone(), vec![base_tag.clone()]);

    let outcome = tokio::spawn(derive_and_use(docker.clone(), base_tag.clone(), base_id.clone())).await;
    // Whatever happened: the images derived from this base, found by their label.
    let derived = docker.images_labelled(valgrind::BASE_LABEL, &base_id).await.expect("list images");
    images.1.extend(derived.into_iter().flat_map(|i| i.tags));
    images.remove().await;
    assert_no_leftovers(&docker).await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic.into_panic());
    }
}

/// The build, the reuse, and a sandbox of the derived image.
async fn derive_and_use(docker: Arc<DockerProvisioner>, base: String, base_id: String) {
    let probe = docker.probe_valgrind(&base).await;
    let ValgrindProbe::Buildable { source, detail } = &probe else { panic!("not buildable: {probe}") };
    assert!(
        *source == Source::HostApt || *source == Source::ImagePackages,
        "{probe}: this engine gives builds {} network",
        if docker.has_network("bridge").await { "a" } else { "no" }
    );
    if *source == Source::HostApt {
        assert!(detail.contains("debian bookworm") && detail.contains("valgrind 1:3.19.0-1"), "{detail}");
    }

    let began = Instant::now();
    let mut lines = Vec::new();
    let tag = docker.ensure_valgrind(&base, &mut |l| lines.push(l.to_string())).await.expect("the valgrind image");
    let built_in = began.elapsed();
    eprintln!("built {tag} in {:.1} s:\n  {}", built_in.as_secs_f64(), lines.join("\n  "));
    let short = &base_id.trim_start_matches("sha256:")[..12];
    assert!(tag.starts_with(&format!("sandbench-valgrind:{short}-")), "{tag} names the base {base_id}");
    assert!(lines.iter().any(|l| l.starts_with("valgrind: built ")), "progress said so: {lines:?}");
    let facts = docker.image_facts(&tag).await.unwrap().expect("the derived image");
    assert_eq!(facts.labels.get(valgrind::BASE_LABEL), Some(&base_id));

    // Built once: the second time finds it, fast, saying nothing.
    let began = Instant::now();
    let mut again = Vec::new();
    let second = docker.ensure_valgrind(&base, &mut |l| again.push(l.to_string())).await.expect("reused");
    assert_eq!(second, tag);
    eprintln!("found again in {:.3} s", began.elapsed().as_secs_f64());
    assert!(again.is_empty(), "{again:?}");
    assert!(began.elapsed() < Duration::from_secs(5), "reuse took {:?}", began.elapsed());
    assert_eq!(docker.probe_valgrind(&base).await, ValgrindProbe::Built(tag.clone()));

    // A station asked for valgrind provisions from it; its sandbox's non-root user runs it.
    let version = in_a_sandbox(docker.clone(), &base, &tag).await;
    let package_version = version.trim_start_matches("valgrind-");
    assert!(tag.contains(package_version), "{tag} names the version of {version}");
}

/// Opens a station for `base` with valgrind, launches a sandbox of its image and runs valgrind
/// there as the `node` user: what `valgrind --version` printed.
async fn in_a_sandbox(docker: Arc<DockerProvisioner>, base: &str, tag: &str) -> String {
    let dir = tempfile::Builder::new().prefix("sbt-").tempdir().expect("temp dir");
    let run_id = format!("tvalgrind{}", std::process::id());
    let options = StationOptions {
        dir: dir.path().to_path_buf(),
        run_id: run_id.clone(),
        image: Some(base.to_string()),
        valgrind: true,
        agent: Some(support::agent()),
        hub: HubConfig::default(),
    };
    let station = Station::open(docker.clone(), options, &mut |_| {}).await.expect("open the station");
    assert_eq!(station.image(), Some(tag));
    let result = async {
        let request = station.request("valgrind", station.image().unwrap())?;
        let live = station.launch(request, Duration::from_secs(60)).await?;
        let user = ["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "--"].map(String::from);
        let run = |cmd: &[&str]| {
            let cmd: Vec<String> = user.iter().cloned().chain(cmd.iter().map(|s| s.to_string())).collect();
            docker.exec_capture(&live.sandbox.id, cmd)
        };
        let version = run(&["valgrind", "--version"]).await?;
        let traced = run(&["valgrind", "-q", "--tool=none", "/bin/true"]).await?;
        let id = run(&["id", "-u"]).await?;
        station.teardown(&live.sandbox).await;
        anyhow::Ok((version, traced, id))
    }
    .await;
    let warnings = station.close().await;
    let left = docker.list(Some((labels::RUN, &run_id))).await.expect("list containers");
    let ((code, version), (traced_code, traced), (_, id)) = result.expect("a sandbox of the valgrind image");
    assert!(warnings.is_empty() && left.is_empty(), "{warnings:?} {left:?}");
    assert_eq!(id.trim(), "1000");
    assert_eq!(code, 0, "{version}");
    assert!(version.trim().starts_with("valgrind-3."), "{version}");
    assert_eq!(traced_code, 0, "valgrind --tool=none /bin/true: {traced}");
    version.trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_of_another_release_is_refused_naming_both_sources() {
    let docker = docker().await;
    support::ensure_busybox_image(&docker).await;
    let tag = format!("sandbench-test/valgrind-trixie:{}", std::process::id());
    let os_release: &[u8] = b"PRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\nID=debian\nVERSION_CODENAME=trixie\n";
    let dockerfile = format!("FROM {BUSYBOX_IMAGE}\nCOPY os-release /etc/os-release\n");
    build_test_image(&docker, &tag, &dockerfile, &[("os-release", os_release)]).await;
    let images = Images(docker.clone(), vec![tag.clone()]);

    let outcome = tokio::spawn({
        let (docker, tag) = (docker.clone(), tag.clone());
        async move {
            let began = Instant::now();
            let err = docker.ensure_valgrind(&tag, &mut |_| {}).await.expect_err("no source can serve");
            assert!(began.elapsed() < Duration::from_secs(60), "took {:?}", began.elapsed());
            let text = err.to_string();
            let ValgrindError::Unavailable { tried, .. } = &err else { panic!("{text}") };
            assert_eq!(tried.iter().map(|(s, _)| *s).collect::<Vec<_>>(), [Source::ImagePackages, Source::HostApt]);
            assert!(text.starts_with(&format!("no valgrind for image {tag}: the image's package manager: ")), "{text}");
            assert!(text.contains("the host's apt: the host is debian bookworm, the image is debian trixie"), "{text}");
            if !docker.has_network("bridge").await {
                assert!(text.contains("the engine gives builds no network"), "{text}");
            }
            // `check` says the same, without building.
            let (line, ok) = sandbench::cli::check_valgrind(&*docker, &tag).await;
            assert!(!ok);
            assert_eq!(line, text);
        }
    })
    .await;
    images.remove().await;
    assert_no_leftovers(&docker).await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic.into_panic());
    }
}
