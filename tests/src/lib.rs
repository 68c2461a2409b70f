//! Helpers for the black-box tests: locating the real `fencewatch` binary and running it, and
//! [`require!`]: a test that needs an external tool (tansu, Chromium, promtool, a Python
//! module) is skipped when the tool is missing, unless `CI=true`, where it fails.

pub mod kafka;
pub mod service;
mod tools;

pub use tools::{CHROMIUM, Tool, ci, require};

/// The contract most service tests run under: one property, two fenced routes.
pub const ORDERS_CONTRACT: &str = r#"
[[property]]
name = "order-mutation"
subject = "Order"
strategy = "lease_epoch"
window = "1m"
clock_skew = "50ms"
allowed_lateness = "10s"
route_freshness = "5m"
  [[property.route]]
  name = "orders-api.transition"
  [[property.route]]
  name = "settlement-worker.settle"
"#;

/// The next value of a xorshift64 generator: pseudo-random moments for kill tests, the same
/// on every run.
pub fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// One committed event as a JSON line.
pub fn commit_line(ts: i64, scope: &str, epoch: u64, route: &str) -> String {
    format!(r#"{{"kind":"commit","ts":{ts},"scope":"{scope}","epoch":{epoch},"route":"{route}"}}"#)
}

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// `dir`, created with its parents (a fresh directory under a test's temporary one).
pub fn made_dir(dir: PathBuf) -> PathBuf {
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The `fencewatch` binary built beside the test executable (`target/<profile>/fencewatch`),
/// or `$FENCEWATCH_BIN`.
pub fn bin() -> PathBuf {
    if let Some(p) = std::env::var_os("FENCEWATCH_BIN") {
        return p.into();
    }
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let bin = dir.join("fencewatch");
    assert!(
        bin.exists(),
        "{} not built: run `cargo build && cargo nextest run` as the README says",
        bin.display()
    );
    bin
}

/// Runs `fencewatch ARGS` with `stdin` as standard input.
pub fn run(args: &[&str], stdin: Option<&[u8]>) -> Output {
    run_in(Path::new("."), args, stdin)
}

/// Runs `fencewatch ARGS` in the directory `dir`.
pub fn run_in(dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> Output {
    use std::io::Write;
    let mut child = Command::new(bin())
        .current_dir(dir)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn fencewatch");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input)
            .expect("write stdin");
    }
    child.wait_with_output().expect("wait for fencewatch")
}

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf()
}

/// `fencewatch check --format json` on files; returns (exit code, parsed report).
pub fn check_json(contract: &Path, files: &[&Path]) -> (i32, serde_json::Value) {
    let mut args = vec![
        "check".to_string(),
        "--contract".into(),
        contract.display().to_string(),
        "--format".into(),
        "json".into(),
    ];
    args.extend(files.iter().map(|f| f.display().to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(&refs, None);
    let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().expect("exit code"), doc)
}

/// Sends signal `sig` (`TERM`, `STOP`, `CONT`, …) to process `pid` with the `kill` built into
/// `sh`, so that the tests need no procps (`/usr/bin/kill`); whether it was delivered.
pub fn signal(pid: u32, sig: &str) -> bool {
    Command::new("sh")
        .args(["-c", "kill -s \"$1\" \"$2\"", "sh", sig, &pid.to_string()])
        .stdin(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
