//! A stage cache shared through S3-compatible object storage (`--cache-dir s3://…`),
//! against a real S3 server: moto's, from the project's venv (`scripts/setup.sh`
//! installs it), started on a free local port by each test. Two "machines" are two
//! local cache directories sharing one bucket.

use crate::common;

use crate::common::{small_project, text, venv_python, SMALL};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A moto S3 server, stopped when dropped.
struct S3Server {
    child: Child,
    port: u16,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One plain HTTP request (moto takes unsigned requests unless told otherwise): the
/// status code and the whole answer.
fn http(port: u16, method: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok());
    (status.unwrap_or(0), answer)
}

/// The bytes of object `key` of `bucket`, as boto3 (the AWS SDK for Python, which moto
/// brings) downloads them.
fn object(port: u16, bucket: &str, key: &str) -> Vec<u8> {
    let out = Command::new(venv_python())
        .args(["-c", "import boto3, sys; sys.stdout.buffer.write(boto3.client('s3', endpoint_url=sys.argv[1], region_name='us-east-1', aws_access_key_id='a', aws_secret_access_key='b').get_object(Bucket=sys.argv[2], Key=sys.argv[3])['Body'].read())"])
        .args([&format!("http://127.0.0.1:{port}"), bucket, key])
        .output()
        .unwrap();
    assert!(out.status.success(), "{key}: {}", text(&out.stderr));
    out.stdout
}

/// The keys under `prefix` in `bucket`.
fn keys(port: u16, bucket: &str, prefix: &str) -> Vec<String> {
    let (_, answer) = http(
        port,
        "GET",
        &format!("/{bucket}?list-type=2&prefix={prefix}"),
    );
    answer
        .split("<Key>")
        .skip(1)
        .filter_map(|k| k.split("</Key>").next())
        .map(str::to_string)
        .collect()
}

impl S3Server {
    /// Starts the server with `env` and creates the buckets `buckets`.
    fn start(env: &[(&str, &str)], buckets: &[&str]) -> S3Server {
        let port = free_port();
        let moto = venv_python().with_file_name("moto_server");
        let child = Command::new(&moto)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}; run scripts/setup.sh", moto.display()));
        let server = S3Server { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "moto did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        for bucket in buckets {
            assert_eq!(http(port, "PUT", &format!("/{bucket}")).0, 200);
        }
        server
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const SECRET: &str = "the-secret-never-shown";

/// `pipeline ARGS` in `dir` with the local cache `local` and S3 at `endpoint`.
fn pipeline_with(dir: &Path, local: &Path, endpoint: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pipeline"));
    cmd.args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("PIPELINE_CACHE_DIR", local)
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_ACCESS_KEY_ID", "pipeline-tests")
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env_remove("AWS_ENDPOINT_URL_S3")
        .env_remove("AWS_REGION")
        .env_remove("AWS_DEFAULT_REGION")
        .env_remove("AWS_SESSION_TOKEN");
    cmd
}

fn run(dir: &Path, local: &Path, endpoint: &str, args: &[&str]) -> Output {
    pipeline_with(dir, local, endpoint, args).output().unwrap()
}

/// `pipeline run small.kdl --json --cache-dir URL` on a machine whose cache is `local`:
/// the report, which must be a success.
fn run_small(dir: &Path, local: &Path, endpoint: &str, url: &str) -> Value {
    let out = run(
        dir,
        local,
        endpoint,
        &["run", "small.kdl", "--json", "--cache-dir", url],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn statuses(report: &Value) -> Vec<String> {
    report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["status"].as_str().unwrap().to_string())
        .collect()
}

/// The file of the only entry of `local` whose outputs hold `name`.
fn entry_output(local: &Path, name: &str) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(local.join("entries"))
        .unwrap()
        .map(|e| e.unwrap().path().join("outputs").join(name))
        .filter(|p| p.is_file())
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found[0].clone()
}

#[test]
fn a_second_machine_answers_every_stage_from_the_bucket() {
    let s3 = S3Server::start(&[], &["team"]);
    let project = small_project(SMALL);
    let (a, b) = (
        project.path().join("machine-a"),
        project.path().join("machine-b"),
    );
    let url = "s3://team/small";
    let first = run_small(project.path(), &a, &s3.endpoint(), url);
    assert_eq!(statuses(&first), ["ran", "ran", "ran"]);
    let second = run_small(project.path(), &b, &s3.endpoint(), url);
    assert_eq!(
        statuses(&second),
        ["cached", "cached", "cached"],
        "nothing trained"
    );
    assert_eq!(
        first["stages"][1]["metrics"],
        second["stages"][1]["metrics"]
    );
    // The checkpoint downloaded from the bucket is the one the first machine exported.
    let exported = std::fs::read(project.path().join("out/model.safetensors")).unwrap();
    let downloaded = std::fs::read(entry_output(&b, "checkpoint.safetensors")).unwrap();
    assert!(exported == downloaded, "bit-identical");
    assert_eq!(
        std::fs::read(entry_output(&a, "model.safetensors")).unwrap(),
        std::fs::read(entry_output(&b, "model.safetensors")).unwrap()
    );
    // The bucket, seen from either machine.
    let ls = run(
        project.path(),
        &b,
        &s3.endpoint(),
        &["cache", "ls", "--json", "--cache-dir", url],
    );
    let ls: Value = serde_json::from_slice(&ls.stdout).unwrap();
    assert_eq!(ls["entries"].as_array().unwrap().len(), 3);
    let verify = run(
        project.path(),
        &a,
        &s3.endpoint(),
        &["cache", "verify", "--cache-dir", url],
    );
    assert!(verify.status.success(), "{}", text(&verify.stderr));
    assert_eq!(text(&verify.stdout), "3 entries checked, 0 corrupt\n");
    // A cached rerun asks the bucket nothing but whether it is there.
    let third = run_small(project.path(), &b, &s3.endpoint(), url);
    assert_eq!(statuses(&third), ["cached", "cached", "cached"]);
}

#[test]
fn a_machine_with_a_local_cache_shares_it_when_given_the_bucket() {
    let s3 = S3Server::start(&[], &["team"]);
    let project = small_project(SMALL);
    let (a, b) = (
        project.path().join("machine-a"),
        project.path().join("machine-b"),
    );
    let local = run(
        project.path(),
        &a,
        &s3.endpoint(),
        &["run", "small.kdl", "--json"],
    );
    assert!(local.status.success(), "{}", text(&local.stderr));
    let shared = run_small(project.path(), &a, &s3.endpoint(), "s3://team/later");
    assert_eq!(statuses(&shared), ["cached", "cached", "cached"]);
    let other = run_small(project.path(), &b, &s3.endpoint(), "s3://team/later");
    assert_eq!(statuses(&other), ["cached", "cached", "cached"]);
}

#[test]
fn a_checkpoint_stage_writes_into_the_bucket_and_replaces_only_its_own() {
    let s3 = S3Server::start(&[], &["team"]);
    let manifest = SMALL.replace(
        "out/model.safetensors",
        "s3://team/models/small.safetensors",
    );
    let project = small_project(&manifest);
    let local = project.path().join("local");
    let report = run(
        project.path(),
        &local,
        &s3.endpoint(),
        &["run", "small.kdl", "--json"],
    );
    assert!(report.status.success(), "{}", text(&report.stderr));
    let report: Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(
        report["stages"][2]["outputs"][0],
        "s3://team/models/small.safetensors"
    );
    assert_eq!(
        report["stages"][2]["outputs"][1],
        "s3://team/models/small.json"
    );
    let sent = object(s3.port, "team", "models/small.safetensors");
    assert!(sent == std::fs::read(entry_output(&local, "checkpoint.safetensors")).unwrap());
    let metadata: Value =
        serde_json::from_slice(&object(s3.port, "team", "models/small.json")).unwrap();
    assert_eq!(metadata["stage"], "export");
    // Run again with other settings: its own checkpoint there is replaced.
    let out = run(
        project.path(),
        &local,
        &s3.endpoint(),
        &["run", "small.kdl", "--set", "train.epochs=2"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(sent != object(s3.port, "team", "models/small.safetensors"));
    // The first settings again, answered from the cache: their checkpoint is put back.
    let out = run(
        project.path(),
        &local,
        &s3.endpoint(),
        &["run", "small.kdl", "--json"],
    );
    let again: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(statuses(&again), ["cached", "cached", "cached"]);
    assert!(sent == object(s3.port, "team", "models/small.safetensors"));
    let metadata_now: Value =
        serde_json::from_slice(&object(s3.port, "team", "models/small.json")).unwrap();
    assert_eq!(metadata_now, metadata);
    assert!(
        !project.path().join("s3:").exists(),
        "no local file named after the URL"
    );
    // Someone else's object at that key is not.
    let foreign = manifest.replace("models/small", "theirs/model");
    std::fs::write(project.path().join("small.kdl"), foreign).unwrap();
    assert_eq!(
        http(s3.port, "PUT", "/team/theirs/model.safetensors").0,
        200
    );
    let out = run(
        project.path(),
        &local,
        &s3.endpoint(),
        &["run", "small.kdl"],
    );
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("pipeline::checkpoint::upload_failed"),
        "{stderr}"
    );
    assert!(
        stderr.contains("will not replace s3://team/theirs/model.safetensors"),
        "{stderr}"
    );
    assert_eq!(object(s3.port, "team", "theirs/model.safetensors"), b"");
}

#[test]
fn starting_weights_come_from_the_bucket_and_a_new_version_retrains() {
    let s3 = S3Server::start(&[], &["team"]);
    let export = SMALL.replace("out/model.safetensors", "s3://team/models/base.safetensors");
    let project = small_project(&export);
    let dir = project.path();
    let local = dir.join("local");
    let tune = SMALL
        .replace(
            "train epochs=3 batch-size=64",
            "train epochs=2 batch-size=64 init=\"s3://team/models/base.safetensors\"",
        )
        .replace("out/model.safetensors", "tuned.safetensors");
    std::fs::write(dir.join("tune.kdl"), &tune).unwrap();
    let missing = run(dir, &local, &s3.endpoint(), &["run", "tune.kdl"]);
    let stderr = text(&missing.stderr);
    assert!(
        stderr.contains("pipeline::train::init_unavailable"),
        "{stderr}"
    );
    assert!(
        stderr.contains("base.safetensors in s3://team/models"),
        "{stderr}"
    );
    let exported = run(dir, &local, &s3.endpoint(), &["run", "small.kdl"]);
    assert!(exported.status.success(), "{}", text(&exported.stderr));
    let tuned = |expected: [&str; 3]| {
        let out = run(dir, &local, &s3.endpoint(), &["run", "tune.kdl", "--json"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(statuses(&report), expected);
        report
    };
    let first = tuned(["ran", "ran", "ran"]);
    assert_eq!(
        first["stages"][0]["init"]["loaded"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
    tuned(["cached", "cached", "cached"]);
    // Other weights at that URL: the fine-tuning's key changes with their content.
    let out = run(
        dir,
        &local,
        &s3.endpoint(),
        &["run", "small.kdl", "--set", "train.epochs=1"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let status = run(dir, &local, &s3.endpoint(), &["status", "tune.kdl"]);
    assert!(
        text(&status.stdout).contains("init file base.safetensors changed"),
        "{}",
        text(&status.stdout)
    );
    tuned(["ran", "ran", "ran"]);
}

/// `check` (which never goes online) refuses URLs where only a file can be, schemes no
/// place is registered for, and URLs that name no object, each on its line.
#[test]
fn check_refuses_urls_it_cannot_use() {
    let manifest = SMALL
        .replace("data/digits.csv.gz", "s3://team/digits.csv.gz")
        .replace("out/model.safetensors", "gs://team/model.safetensors")
        .replace("train epochs=3", "train init=\"s3://team\" epochs=3");
    let project = small_project(&manifest);
    let out = common::pipeline(project.path(), &["check", "small.kdl"]);
    assert_eq!(out.status.code(), Some(1));
    common::assert_fixture("check-urls.stderr", &text(&out.stderr));
}

/// The first lines of a refusal, with the port of `endpoint` written as PORT.
fn refusal(out: &Output, port: u16) -> String {
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        !stderr.contains(SECRET),
        "the secret is never shown: {stderr}"
    );
    stderr.replace(&port.to_string(), "PORT")
}

#[test]
fn unusable_places_are_clear_errors_in_bounded_time() {
    let s3 = S3Server::start(&[], &["team"]);
    let project = small_project(SMALL);
    let local = project.path().join("local");
    let dir = project.path();
    // A bucket that does not exist.
    let out = run(
        dir,
        &local,
        &s3.endpoint(),
        &["run", "small.kdl", "--cache-dir", "s3://nobody/x"],
    );
    common::assert_fixture("s3-no-bucket.stderr", &refusal(&out, s3.port));
    // Nothing listening.
    let closed = free_port();
    let endpoint = format!("http://127.0.0.1:{closed}");
    let started = Instant::now();
    let out = run(
        dir,
        &local,
        &endpoint,
        &["status", "small.kdl", "--cache-dir", "s3://team/x"],
    );
    common::assert_fixture("s3-unreachable.stderr", &refusal(&out, closed));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    // An endpoint that accepts the connection and never answers: the request timeout.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let started = Instant::now();
    let out = pipeline_with(
        dir,
        &local,
        &format!("http://127.0.0.1:{port}"),
        &["cache", "ls", "--cache-dir", "s3://team/x"],
    )
    .env("PIPELINE_S3_TIMEOUT", "1")
    .output()
    .unwrap();
    // The message's words, whatever the width it was wrapped to.
    let stderr = refusal(&out, port);
    let said = stderr
        .split_whitespace()
        .filter(|w| *w != "│")
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        said.contains(
            "s3://team/x (endpoint http://127.0.0.1:PORT): cannot reach the endpoint: timed out"
        ),
        "{said}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    drop(silent);
    // Nothing is left behind by a refused run.
    assert!(!local.join("entries").exists());
}

#[test]
fn refused_credentials_name_the_key_id_never_the_secret() {
    // Authentication on after the first request (the bucket's creation): moto then knows
    // no access key at all.
    let s3 = S3Server::start(&[("INITIAL_NO_AUTH_ACTION_COUNT", "1")], &["locked"]);
    let project = small_project(SMALL);
    let local = project.path().join("local");
    let out = run(
        project.path(),
        &local,
        &s3.endpoint(),
        &["run", "small.kdl", "--cache-dir", "s3://locked/x"],
    );
    common::assert_fixture("s3-refused-credentials.stderr", &refusal(&out, s3.port));
}

/// A proxy to `to` that lets `bytes_per_second` through towards the server, so that an
/// upload lasts long enough to be killed in the middle.
fn slow_proxy(to: u16, bytes_per_second: u64) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = TcpStream::connect(("127.0.0.1", to)) else {
                continue;
            };
            let (mut up_from, mut down_to) = (client.try_clone().unwrap(), client);
            let (mut up_to, mut down_from) = (server.try_clone().unwrap(), server);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = up_from.read(&mut buf) {
                    if n == 0 || up_to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_secs_f64(n as f64 / bytes_per_second as f64));
                }
                let _ = up_to.shutdown(std::net::Shutdown::Write);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut down_from, &mut down_to);
                let _ = down_to.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    port
}

/// A pseudo-random number in [0, 1) (xorshift), from `state`.
fn uniform(state: &mut u64) -> f64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state >> 11) as f64 / (1u64 << 53) as f64
}

#[test]
fn killing_uploads_at_random_points_never_leaves_a_corrupt_entry() {
    let s3 = S3Server::start(&[], &["team"]);
    let project = small_project(SMALL);
    let dir = project.path();
    let trained = dir.join("trained");
    // Machine A trains once, locally; then publishes to a new prefix per try, through a
    // slow link, and is killed (SIGKILL) at a random point of the upload.
    let reference = run(
        dir,
        &trained,
        &s3.endpoint(),
        &["run", "small.kdl", "--json"],
    );
    assert!(reference.status.success(), "{}", text(&reference.stderr));
    let reference: Value = serde_json::from_slice(&reference.stdout).unwrap();
    let slow = format!("http://127.0.0.1:{}", slow_proxy(s3.port, 50_000));
    let publish = |prefix: &str, local: &Path| {
        pipeline_with(
            dir,
            local,
            &slow,
            &[
                "run",
                "small.kdl",
                "--cache-dir",
                &format!("s3://team/{prefix}"),
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
    };
    // How long a whole upload takes (a copy of A's cache, so its marks stay unset).
    let copy = |to: &Path| {
        let status = Command::new("cp")
            .arg("-a")
            .arg(&trained)
            .arg(to)
            .status()
            .unwrap();
        assert!(status.success());
    };
    let whole = dir.join("whole");
    copy(&whole);
    let started = Instant::now();
    assert!(publish("whole", &whole).wait().unwrap().success());
    let window = started.elapsed();
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("a whole upload: {window:?}; seed {seed}");
    let mut seen = Vec::new();
    for attempt in 0..10 {
        let local = dir.join(format!("a-{attempt}"));
        copy(&local);
        let prefix = format!("try-{attempt}");
        let at = window.mul_f64(uniform(&mut seed));
        let mut child = publish(&prefix, &local);
        std::thread::sleep(at);
        let _ = child.kill();
        child.wait().unwrap();
        let url = format!("s3://team/{prefix}");
        let objects = keys(s3.port, "team", &format!("{prefix}/"));
        let count = |kind: &str| objects.iter().filter(|k| k.contains(kind)).count();
        let left = (count("/entries/"), count("/blobs/"));
        // Nothing in the bucket is corrupt…
        let verify = run(
            dir,
            &local,
            &s3.endpoint(),
            &["cache", "verify", "--cache-dir", &url],
        );
        assert!(
            verify.status.success(),
            "try {attempt} (killed after {at:?}): {}{}",
            text(&verify.stdout),
            text(&verify.stderr)
        );
        assert!(
            text(&verify.stdout).ends_with(" 0 corrupt\n"),
            "{}",
            text(&verify.stdout)
        );
        // …and a machine that uses it ends where the first one did.
        let fresh = dir.join(format!("b-{attempt}"));
        let report = run_small(dir, &fresh, &s3.endpoint(), &url);
        assert_eq!(
            report["stages"][1]["metrics"], reference["stages"][1]["metrics"],
            "try {attempt}"
        );
        let cached = statuses(&report).iter().filter(|s| *s == "cached").count();
        seen.push(format!(
            "{at:.2?}: {} entries, {} outputs; {cached} of 3 stages from the bucket",
            left.0, left.1
        ));
    }
    eprintln!("killed after {}", seen.join("\n  "));
}

/// Writes `bytes` as object `key` of `bucket`, as boto3 uploads them.
fn put_object(port: u16, bucket: &str, key: &str, bytes: &[u8]) {
    let mut child = Command::new(venv_python())
        .args(["-c", "import boto3, sys; boto3.client('s3', endpoint_url=sys.argv[1], region_name='us-east-1', aws_access_key_id='a', aws_secret_access_key='b').put_object(Bucket=sys.argv[2], Key=sys.argv[3], Body=sys.stdin.buffer.read())"])
        .args([&format!("http://127.0.0.1:{port}"), bucket, key])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    assert!(child.wait().unwrap().success());
}

/// Issue 32: an entry edited in the bucket (here the eval stage's metrics, as a hand or a
/// tool would) was served by every other machine, and `cache verify` found nothing. Its
/// checksum now gives it away: `verify` names it, and another machine computes the stage
/// again, with a warning, and never shows the edited numbers.
#[test]
fn an_entry_edited_in_the_bucket_is_found_and_computed_again() {
    let s3 = S3Server::start(&[], &["team"]);
    let project = small_project(SMALL);
    let (a, b) = (
        project.path().join("machine-a"),
        project.path().join("machine-b"),
    );
    let url = "s3://team/small";
    let first = run_small(project.path(), &a, &s3.endpoint(), url);
    let status = run(
        project.path(),
        &a,
        &s3.endpoint(),
        &["status", "small.kdl", "--json", "--cache-dir", url],
    );
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    let eval = status["stages"][1]["fingerprint"]
        .as_str()
        .unwrap()
        .to_string();
    let key = format!("small/entries/{eval}.json");
    let mut entry: Value = serde_json::from_slice(&object(s3.port, "team", &key)).unwrap();
    entry["metrics"]["accuracy"] = serde_json::json!(1.0);
    put_object(s3.port, "team", &key, &serde_json::to_vec(&entry).unwrap());

    let verify = run(
        project.path(),
        &a,
        &s3.endpoint(),
        &["cache", "verify", "--cache-dir", url],
    );
    assert_eq!(
        text(&verify.stderr),
        format!("corrupt: {eval} (?): its JSON does not match its checksum; the next run that needs it rebuilds it\n")
    );
    assert_eq!(text(&verify.stdout), "3 entries checked, 1 corrupt\n");

    let out = run(
        project.path(),
        &b,
        &s3.endpoint(),
        &["run", "small.kdl", "--json", "--cache-dir", url],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let second: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(statuses(&second), ["cached", "ran", "cached"]);
    assert_eq!(
        second["stages"][1]["metrics"],
        first["stages"][1]["metrics"]
    );
    assert!(
        text(&out.stderr).contains(&format!(
            "warning: stage `test`: the cache entry is unusable: the copy in {url} (endpoint {}) is unusable: its JSON does not match its checksum; computing it again",
            s3.endpoint()
        )),
        "{}",
        text(&out.stderr)
    );
}

/// Every variable the shared cache reads is checked before any request, named with its
/// value and what it takes: a timeout that is no number of seconds (`1e30` panicked in
/// `Duration`; `0`, `-1`, `abc` and `inf` were taken as 60 s silently), an endpoint that
/// is no URL. Nothing listens at the endpoint: none of these asks it anything.
#[test]
fn malformed_variables_are_refused_naming_them() {
    let project = small_project(SMALL);
    let dir = project.path();
    let local = dir.join("local");
    let endpoint = format!("http://127.0.0.1:{}", free_port());
    let status = ["status", "small.kdl", "--cache-dir", "s3://team/x"];
    let mut refusals = String::new();
    for bad in [
        "1e30",
        "1e19",
        "18446744073709551616",
        "0",
        "-1",
        "abc",
        "inf",
    ] {
        let out = pipeline_with(dir, &local, &endpoint, &status)
            .env("PIPELINE_S3_TIMEOUT", bad)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{bad}: {}", text(&out.stderr));
        refusals += &text(&out.stderr);
    }
    let out = pipeline_with(dir, &local, "localhost:9000", &status)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    refusals += &text(&out.stderr);
    // A shared cache in the variable is refused naming the variable, not only the URL.
    let out = pipeline_with(dir, &local, &endpoint, &["status", "small.kdl"])
        .env("PIPELINE_CACHE_DIR", "gs://team/x")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    refusals += &text(&out.stderr);
    common::assert_fixture("s3-bad-variables.stderr", &refusals);
}
