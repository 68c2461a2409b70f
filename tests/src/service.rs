//! A harness that runs the real `fencewatch serve` on port 0 with a temporary data directory,
//! and a minimal HTTP/1.1 client for talking to it (one request per connection).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The prefix of an environment variable among a service's `extra` arguments.
const ENV: &str = "\u{0}env:";

/// Removes the `OTEL_*` variables of this process's environment from `cmd`'s: the service's
/// own traces (SPEC §8) stay off unless a test asks for them.
pub fn without_otel(cmd: &mut Command) -> &mut Command {
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("OTEL_") {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// A running `fencewatch serve`.
#[derive(Debug)]
pub struct TestService {
    child: Child,
    /// The bound address.
    pub addr: SocketAddr,
    /// The data directory (kept across restarts).
    pub data_dir: PathBuf,
    /// The contract file.
    pub contract: PathBuf,
    extra: Vec<String>,
    stderr_path: PathBuf,
}

/// An HTTP response.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Header lines, lowercase names.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}), status {}: {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends one request to `addr`.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Response> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line `{line}`")))?;
    let mut headers = Vec::new();
    let mut len: Option<usize> = None;
    let mut chunked = false;
    loop {
        line.clear();
        r.read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_string());
            if k == "content-length" {
                len = v.parse().ok();
            }
            if k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked") {
                chunked = true;
            }
            headers.push((k, v));
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            r.read_line(&mut line)?;
            let n = usize::from_str_radix(line.trim(), 16).map_err(std::io::Error::other)?;
            if n == 0 {
                break;
            }
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk)?;
            body.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(n) = len {
        body.resize(n, 0);
        r.read_exact(&mut body)?;
    } else {
        r.read_to_end(&mut body)?;
    }
    Ok(Response {
        status,
        headers,
        body,
    })
}

impl TestService {
    /// Starts `fencewatch serve` with `contract` (TOML text) in a fresh data directory under
    /// `dir`, plus `extra` arguments, and waits until it is ready.
    pub fn start(dir: &Path, contract: &str, extra: &[&str]) -> TestService {
        let svc = TestService::start_listening(dir, contract, extra);
        svc.wait_ready();
        svc
    }

    /// Like [`TestService::start`], with the environment variables `env` set for the service
    /// (and its restarts). The `OTEL_*` variables of the caller's environment never reach it:
    /// only those a test sets here.
    pub fn start_with_env(
        dir: &Path,
        contract: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> TestService {
        let mut extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        extra.extend(env.iter().map(|(k, v)| format!("{ENV}{k}={v}")));
        let contract_path = dir.join("contract.toml");
        std::fs::write(&contract_path, contract).expect("write contract");
        TestService::spawn(contract_path, dir.join("data"), extra)
    }

    /// Like [`TestService::start`], but returns once the service listens, ready or not.
    pub fn start_listening(dir: &Path, contract: &str, extra: &[&str]) -> TestService {
        let contract_path = dir.join("contract.toml");
        std::fs::write(&contract_path, contract).expect("write contract");
        let data_dir = dir.join("data");
        TestService::listen(
            contract_path,
            data_dir,
            extra.iter().map(|s| s.to_string()).collect(),
        )
    }

    /// Like [`TestService::start`], under a file-descriptor limit of `fds` (soft and hard, set
    /// by `sh`'s `ulimit -n` before it execs the service).
    pub fn start_with_fd_limit(
        dir: &Path,
        contract: &str,
        extra: &[&str],
        fds: u32,
    ) -> TestService {
        let contract_path = dir.join("contract.toml");
        std::fs::write(&contract_path, contract).expect("write contract");
        let mut extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        extra.push(format!("\u{0}ulimit:{fds}"));
        let svc = TestService::listen(contract_path, dir.join("data"), extra);
        svc.wait_ready();
        svc
    }

    fn spawn(contract: PathBuf, data_dir: PathBuf, extra: Vec<String>) -> TestService {
        let svc = TestService::listen(contract, data_dir, extra);
        svc.wait_ready();
        svc
    }

    fn listen(contract: PathBuf, data_dir: PathBuf, extra: Vec<String>) -> TestService {
        let stderr_path = data_dir.with_extension(format!(
            "stderr.{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        // A trailing `\0ulimit:N` (from `start_with_fd_limit`) runs the service under `sh`
        // with that descriptor limit.
        let fds = extra
            .last()
            .and_then(|e| e.strip_prefix("\u{0}ulimit:"))
            .map(str::to_string);
        // `\0env:K=V` entries (from `start_with_env`) are variables for the service.
        let args: Vec<&String> = extra.iter().filter(|e| !e.starts_with('\u{0}')).collect();
        let env: Vec<(&str, &str)> = extra
            .iter()
            .filter_map(|e| e.strip_prefix(ENV)?.split_once('='))
            .collect();
        let mut cmd = match &fds {
            Some(n) => {
                let mut c = Command::new("sh");
                c.args(["-c", &format!("ulimit -n {n} && exec \"$0\" \"$@\"")])
                    .arg(crate::bin());
                c
            }
            None => Command::new(crate::bin()),
        };
        cmd.arg("serve")
            .arg("--contract")
            .arg(&contract)
            .arg("--data-dir")
            .arg(&data_dir)
            .args(["--listen", "127.0.0.1:0"])
            // Frequent checkpoints, unless the test sets its own interval.
            .args(
                ["--checkpoint-interval", "200ms"]
                    .iter()
                    .filter(|_| !args.iter().any(|a| a.as_str() == "--checkpoint-interval")),
            )
            .args(&args)
            .env_remove("FENCEWATCH_AUTH_TOKEN");
        without_otel(&mut cmd).envs(env);
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_path).expect("stderr file"))
            .spawn()
            .expect("spawn fencewatch serve");
        let mut first = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut first)
            .expect("read the listening line");
        let addr: SocketAddr = first
            .trim()
            .rsplit("http://")
            .next()
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "no listening line (`{first}`): {}",
                    std::fs::read_to_string(&stderr_path).unwrap_or_default()
                )
            });
        TestService {
            child,
            addr,
            data_dir,
            contract,
            extra,
            stderr_path,
        }
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(r) = request(self.addr, "GET", "/readyz", &[], b"")
                && r.status == 200
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("not ready within 60 s: {}", self.stderr());
    }

    /// What the service logged so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> Response {
        request(self.addr, "GET", path, &[], b"").expect("GET")
    }

    /// `POST /v1/events` with an NDJSON body.
    pub fn post_ndjson(&self, body: &str) -> Response {
        request(
            self.addr,
            "POST",
            "/v1/events",
            &[("content-type", "application/x-ndjson")],
            body.as_bytes(),
        )
        .expect("POST /v1/events")
    }

    /// `POST /v1/query` of `sql`, answered as `accept`.
    pub fn query(&self, sql: &str, accept: &str) -> Response {
        let body = serde_json::json!({ "sql": sql }).to_string();
        request(
            self.addr,
            "POST",
            "/v1/query",
            &[("content-type", "application/json"), ("accept", accept)],
            body.as_bytes(),
        )
        .expect("POST /v1/query")
    }

    /// The rows of a query that must succeed, every one of them.
    pub fn rows(&self, sql: &str) -> Vec<serde_json::Value> {
        let r = self.query(sql, "application/json");
        assert_eq!(r.status, 200, "{sql}: {}", r.text());
        let doc = r.json();
        assert_eq!(doc["truncated"], false, "{sql}");
        doc["rows"].as_array().expect("rows").clone()
    }

    /// Kills the process with SIGKILL (no flush, no checkpoint).
    pub fn kill9(mut self) -> (PathBuf, PathBuf, Vec<String>) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        (
            self.contract.clone(),
            self.data_dir.clone(),
            std::mem::take(&mut self.extra),
        )
    }

    /// Sends SIGTERM and waits for the exit.
    pub fn terminate(mut self) -> (ExitStatus, String) {
        let pid = self.child.id();
        let _ = crate::signal(pid, "TERM");
        let status = self.child.wait().expect("wait");
        (status, self.stderr())
    }

    /// Starts the service again on the same data directory.
    pub fn restart(parts: (PathBuf, PathBuf, Vec<String>)) -> TestService {
        TestService::spawn(parts.0, parts.1, parts.2)
    }

    /// Waits up to `secs` for the process to exit by itself; its status and log if it did.
    pub fn wait_exit(&mut self, secs: u64) -> Option<(ExitStatus, String)> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        while std::time::Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some((status, self.stderr()));
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        None
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The value of the first sample on `/metrics` whose line starts with `prefix`.
    pub fn metric(&self, prefix: &str) -> Option<f64> {
        let text = self.get("/metrics").text();
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    /// Every counterexample id, read page by page (2 per page, to exercise the cursor).
    pub fn cx_ids(&self) -> Vec<String> {
        let mut ids = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let path = match &cursor {
                Some(c) => format!("/v1/counterexamples?limit=2&cursor={c}"),
                None => "/v1/counterexamples?limit=2".into(),
            };
            let page = self.get(&path).json();
            for c in page["counterexamples"].as_array().expect("a page") {
                ids.push(c["id"].as_str().expect("an id").to_string());
            }
            match page["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_string()),
                None => return ids,
            }
        }
    }

    /// Waits up to `secs` for `f` to hold, polling every 50 ms; panics with the log otherwise.
    pub fn wait_for(&self, what: &str, secs: u64, mut f: impl FnMut(&TestService) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            if f(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{what}: not within {secs} s\n{}", self.stderr());
    }
}

/// Posts `batches` in order, each retried until acknowledged, while the service is killed with
/// SIGKILL at pseudo-random moments (before about one post in `one_in`, `0..max_delay_us` µs
/// after the request started) and restarted. Returns the service and how many kills there were.
pub fn post_with_kills(
    mut svc: TestService,
    batches: &[String],
    seed: u64,
    one_in: u64,
    max_delay_us: u64,
) -> (TestService, u32) {
    let mut rng = seed;
    let (mut next, mut kills) = (0, 0);
    while next < batches.len() {
        crate::xorshift(&mut rng);
        if rng.is_multiple_of(one_in) {
            // Kill while a request may be in flight.
            let (addr, body) = (svc.addr, batches[next].clone());
            let t = std::thread::spawn(move || {
                request(
                    addr,
                    "POST",
                    "/v1/events",
                    &[("content-type", "application/x-ndjson")],
                    body.as_bytes(),
                )
            });
            std::thread::sleep(Duration::from_micros(rng % max_delay_us));
            svc = TestService::restart(svc.kill9());
            kills += 1;
            if let Ok(Ok(r)) = t.join()
                && r.status == 200
            {
                next += 1;
            }
            continue;
        }
        let r = svc.post_ndjson(&batches[next]);
        assert_eq!(r.status, 200, "{}", r.text());
        next += 1;
    }
    (svc, kills)
}

impl Drop for TestService {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running `fencewatch demo` (killed when dropped) and its address.
#[derive(Debug)]
pub struct Demo {
    child: Child,
    /// The bound address.
    pub addr: SocketAddr,
}

impl Demo {
    /// Starts `fencewatch demo` on port 0 in `data_dir` at `rate` events/s, with a resumed old
    /// owner every `stale_every` seconds. Its stdout stays open (read on a thread).
    pub fn start(data_dir: &Path, rate: u32, stale_every: u32) -> Demo {
        let mut cmd = Command::new(crate::bin());
        let mut child = without_otel(&mut cmd)
            .args(["demo", "--listen", "127.0.0.1:0"])
            .args([
                "--rate",
                &rate.to_string(),
                "--stale-every",
                &stale_every.to_string(),
            ])
            .arg("--data-dir")
            .arg(data_dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn fencewatch demo");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut first = String::new();
        out.read_line(&mut first).expect("read the listening line");
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        let addr = first
            .trim()
            .rsplit("http://")
            .next()
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no listening line: `{first}`"));
        Demo { child, addr }
    }

    /// Waits up to `secs` until the demo lists at least `n` counterexamples; returns their ids.
    pub fn counterexamples(&self, n: usize, secs: u64) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut ids = Vec::new();
        while Instant::now() < deadline && ids.len() < n {
            if let Ok(r) = request(self.addr, "GET", "/v1/counterexamples", &[], b"")
                && r.status == 200
            {
                ids = r.json()["counterexamples"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|c| c["id"].as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        ids
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The peak resident memory of process `pid` (`VmHWM`), bytes.
pub fn peak_rss(pid: u32) -> u64 {
    status_bytes(pid, "VmHWM:")
}

/// The resident memory of a process now, in bytes (`VmRSS`).
pub fn rss(pid: u32) -> u64 {
    status_bytes(pid, "VmRSS:")
}

/// A size field (`kB`) of `/proc/PID/status`, in bytes.
fn status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect(field);
    kb * 1024
}

/// Nanoseconds since the Unix epoch now.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}
