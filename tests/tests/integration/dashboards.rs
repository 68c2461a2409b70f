//! `dashboards/` (SPEC §6): the Prometheus alert rules pass `promtool check rules` and their
//! `promtool test rules` unit tests, every alert is tested both firing and not firing, every
//! query of the Grafana dashboard is valid PromQL, and every `fencewatch_*` metric the alerts,
//! their tests and the dashboard name (with the labels they match on) is one the real binary
//! exposes at /metrics: `fencewatch demo` for the service fed over HTTP, and `fencewatch serve`
//! consuming a topic of librdkafka's mock cluster for the `fencewatch_kafka_*` families (an
//! HTTP-only service need not have those), and one taking OTLP over HTTP and gRPC for the OTLP
//! ones.
//!
//! The two promtool tests need `promtool` (Debian/Ubuntu: `apt-get install prometheus`;
//! `.ci/run` installs it; `$PROMTOOL` names another binary) and are skipped without it, except
//! under `CI=true` (see `fencewatch_tests::require!`).

use fencewatch_tests::kafka::produce;
use fencewatch_tests::service::{TestService, now_ns, request};
use fencewatch_tests::{ORDERS_CONTRACT, bin, commit_line, repo};
use rdkafka::mocking::MockCluster;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn dashboards() -> PathBuf {
    repo().join("dashboards")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Runs `promtool ARGS`, failing with how to install it when it is missing.
fn promtool<S: AsRef<OsStr>>(args: &[S]) -> Output {
    let program = std::env::var_os("PROMTOOL").unwrap_or_else(|| "promtool".into());
    match Command::new(&program).args(args).output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "`{}` not found: the dashboards/ tests need promtool. Install it with \
             `apt-get install prometheus` (Debian/Ubuntu, provides /usr/bin/promtool; \
             `.ci/run` does this), or point $PROMTOOL at a promtool binary",
            program.to_string_lossy()
        ),
        Err(e) => panic!("cannot run {}: {e}", program.to_string_lossy()),
    }
}

fn assert_ok(what: &str, out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The alert names of alerts.yml, each with the text of its rule.
fn alert_rules() -> Vec<(String, String)> {
    let text = read(&dashboards().join("alerts.yml"));
    let mut rules: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(name) = t.strip_prefix("- alert:") {
            rules.push((name.trim().to_string(), String::new()));
        } else if t.starts_with("- record:") || t.starts_with("- name:") {
            rules.push((String::new(), String::new()));
        } else if t.starts_with('#') {
            continue;
        } else if let Some((_, body)) = rules.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    rules.retain(|(name, _)| !name.is_empty());
    rules
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    fencewatch_tests::require!(Promtool);
    let dir = dashboards();
    let n = alert_rules().len();
    assert!(n >= 8, "alerts.yml: only {n} alerts");
    let out = assert_ok(
        "promtool check rules dashboards/alerts.yml",
        &promtool(&[
            OsStr::new("check"),
            "rules".as_ref(),
            dir.join("alerts.yml").as_os_str(),
        ]),
    );
    assert!(
        out.contains(&format!("SUCCESS: {n} rules found")),
        "promtool check rules: {out}"
    );
    let out = assert_ok(
        "promtool test rules dashboards/alerts.test.yml",
        &promtool(&[
            OsStr::new("test"),
            "rules".as_ref(),
            dir.join("alerts.test.yml").as_os_str(),
        ]),
    );
    assert!(out.contains("SUCCESS"), "promtool test rules: {out}");
}

/// GitHub's anchor of a Markdown heading.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn every_alert_is_annotated_and_tested_firing_and_not_firing() {
    let root = repo();
    let rules = alert_rules();
    let names: BTreeSet<&str> = rules.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.len(), rules.len(), "duplicate alert names");
    for (name, body) in &rules {
        for key in ["expr:", "severity:", "summary:", "description:", "runbook:"] {
            assert!(body.contains(key), "alert {name} has no `{key}`");
        }
        assert!(
            body.contains("severity: critical") || body.contains("severity: warning"),
            "alert {name}: severity is critical or warning"
        );
        // The runbook link resolves: a file of the repository and a section of it.
        let runbook = body
            .lines()
            .find_map(|l| l.trim().strip_prefix("runbook:"))
            .map(|v| v.trim().trim_matches('"'))
            .unwrap();
        let (file, anchor) = runbook
            .split_once('#')
            .unwrap_or_else(|| panic!("alert {name}: runbook `{runbook}` has no #section"));
        let doc = read(&root.join(file));
        let found = doc.lines().any(|l| {
            l.starts_with('#')
                && (l.contains(&format!("{{#{anchor}}}"))
                    || slug(l.trim_start_matches('#')) == anchor)
        });
        assert!(found, "alert {name}: no section `{anchor}` in {file}");
    }

    // Each item of an `alert_rule_test` list: its alert name and whether it expects alerts.
    let tests = read(&dashboards().join("alerts.test.yml"));
    let mut items: Vec<String> = Vec::new();
    for line in tests.lines() {
        let t = line.trim_start();
        if t.starts_with("- eval_time:") || t.starts_with("- {eval_time:") {
            items.push(String::new());
        } else if t.starts_with("- name:") {
            items.push(String::new());
            continue;
        }
        if let Some(item) = items.last_mut() {
            item.push_str(line);
            item.push('\n');
        }
    }
    let (mut firing, mut quiet) = (BTreeSet::new(), BTreeSet::new());
    for item in items.iter().filter(|i| i.contains("eval_time:")) {
        let name = item
            .split("alertname:")
            .nth(1)
            .and_then(|rest| {
                rest.split(|c: char| !c.is_alphanumeric() && c != '_')
                    .find(|s| !s.is_empty())
            })
            .unwrap_or_else(|| panic!("alert_rule_test item without alertname:\n{item}"));
        assert!(
            names.contains(name),
            "alerts.test.yml tests `{name}`, which alerts.yml does not define"
        );
        if item.contains("exp_alerts: []") {
            quiet.insert(name.to_string());
        } else {
            firing.insert(name.to_string());
        }
    }
    for name in &names {
        assert!(firing.contains(*name), "no test case where {name} fires");
        assert!(
            quiet.contains(*name),
            "no test case where {name} stays quiet"
        );
    }
}

/// Every string value under the key `expr`, anywhere in `v` (panel targets, annotations).
fn exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match x {
                    Value::String(s) if k == "expr" => out.push(s.clone()),
                    _ => exprs(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| exprs(x, out)),
        _ => {}
    }
}

/// Every string in `v`.
fn strings<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::String(s) => out.push(s),
        Value::Object(m) => m.values().for_each(|x| strings(x, out)),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        _ => {}
    }
}

/// Replaces the dashboard's template variables and Grafana's built-in ones by values.
fn substitute(expr: &str) -> String {
    // Longest names first: `$__range_s` before `$__range`.
    let vars = [
        ("__rate_interval", "5m"),
        ("__interval_ms", "15000"),
        ("__interval", "5m"),
        ("__range_ms", "21600000"),
        ("__range_s", "21600"),
        ("__range", "6h"),
        ("property", "order-mutation"),
    ];
    let mut s = expr.to_string();
    for (name, value) in vars {
        s = s.replace(&format!("${{{name}}}"), value);
        s = s.replace(&format!("${name}"), value);
    }
    s
}

fn dashboard() -> Value {
    let path = dashboards().join("fencewatch.json");
    serde_json::from_str(&read(&path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The panels, rows' nested panels included.
fn panels(dash: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in dash["panels"].as_array().expect("panels") {
        out.push(p);
        if let Some(nested) = p["panels"].as_array() {
            out.extend(nested);
        }
    }
    out
}

#[test]
fn dashboard_is_well_formed_and_every_query_is_valid_promql() {
    fencewatch_tests::require!(Promtool);
    let dash = dashboard();
    assert!(dash["uid"].is_string() && dash["title"].is_string());
    let schema = dash["schemaVersion"].as_u64().expect("schemaVersion");
    assert!(schema >= 36, "schemaVersion {schema}");
    let vars = dash["templating"]["list"].as_array().expect("templating");
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no template variable `{name}`"))
    };
    assert_eq!(var("datasource")["type"], "datasource");
    assert_eq!(var("datasource")["query"], "prometheus");
    let property = var("property");
    let query = property["query"]["query"]
        .as_str()
        .or(property["query"].as_str())
        .unwrap_or_default();
    assert_eq!(query, "label_values(fencewatch_assurance, property)");
    assert_eq!(property["datasource"]["uid"], "${datasource}");

    // Panels: unique ids, inside the 24-column grid, every query on the datasource variable.
    let mut ids = BTreeSet::new();
    let mut verdict_panels = 0;
    for p in panels(&dash) {
        let title = p["title"].as_str().unwrap_or("?");
        assert!(
            ids.insert(p["id"].as_u64().expect("panel id")),
            "{title}: duplicate id"
        );
        let g = &p["gridPos"];
        let (x, w) = (g["x"].as_u64().unwrap(), g["w"].as_u64().unwrap());
        assert!(
            x + w <= 24 && g["h"].as_u64().unwrap() > 0,
            "{title}: gridPos {g}"
        );
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no query");
        for t in targets {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{title}");
            assert!(t["expr"].is_string(), "{title}: a target without expr");
        }
        // The verdict mappings: refuted red, unknown orange, holds green.
        let mut texts = BTreeMap::new();
        for m in p["fieldConfig"]["defaults"]["mappings"]
            .as_array()
            .into_iter()
            .flatten()
        {
            for o in m["options"]
                .as_object()
                .into_iter()
                .flat_map(|o| o.values())
            {
                texts.insert(
                    o["text"].as_str().unwrap_or(""),
                    o["color"].as_str().unwrap_or(""),
                );
            }
        }
        if texts.contains_key("refuted") {
            verdict_panels += 1;
            for (verdict, color) in [
                ("refuted", "red"),
                ("unknown", "orange"),
                ("holds", "green"),
            ] {
                assert_eq!(texts.get(verdict), Some(&color), "{title}: {verdict}");
            }
        }
    }
    assert!(verdict_panels >= 1, "no panel maps the verdicts to colours");

    let mut queries = Vec::new();
    exprs(&dash, &mut queries);
    assert!(queries.len() >= 10, "only {} queries", queries.len());
    let dir = tempfile::tempdir().unwrap();
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, q) in queries.iter().enumerate() {
        let promql = substitute(q);
        assert!(!promql.contains('$'), "unknown variable in `{q}`");
        // No per-scope label exists (SPEC §6): no query may name one.
        assert!(
            !promql
                .split(|c: char| !c.is_alphanumeric() && c != '_')
                .any(|w| w == "scope"),
            "`{q}` uses a scope label"
        );
        // A JSON string is a valid YAML double-quoted scalar.
        rules.push_str(&format!(
            "      - record: dashboard:query_{i}\n        expr: {}\n",
            serde_json::to_string(&promql).unwrap()
        ));
    }
    let file = dir.path().join("dashboard-queries.yml");
    std::fs::write(&file, &rules).unwrap();
    let out = assert_ok(
        &format!("promtool check rules on the dashboard's queries:\n{rules}"),
        &promtool(&[OsStr::new("check"), "rules".as_ref(), file.as_os_str()]),
    );
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", queries.len())),
        "{out}"
    );
}

/// A `fencewatch_*` name used in a text, with the label names of the selector right after
/// it (`fencewatch_x{a="1",b=~"2"}` → a, b).
#[derive(Debug)]
struct Reference {
    name: String,
    labels: Vec<String>,
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Parses `{k="v",k2=~'v2',k3=%q}` at the start of `s`: the label names, or nothing.
fn selector_labels(s: &str) -> Vec<String> {
    let mut labels = Vec::new();
    let Some(mut rest) = s.strip_prefix('{') else {
        return labels;
    };
    loop {
        rest = rest.trim_start_matches([' ', ',']);
        if rest.is_empty() || rest.starts_with('}') {
            return labels;
        }
        let end = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        if end == 0 {
            return labels;
        }
        labels.push(rest[..end].to_string());
        rest = rest[end..]
            .trim_start()
            .trim_start_matches(['=', '!', '~'])
            .trim_start();
        // The value: quoted (with escapes), or bare (a template's %q) up to `,` or `}`.
        match rest.chars().next() {
            Some(q @ ('"' | '\'' | '`')) => {
                let mut escaped = false;
                let mut close = None;
                for (i, c) in rest.char_indices().skip(1) {
                    if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == q {
                        close = Some(i);
                        break;
                    }
                }
                let Some(i) = close else { return labels };
                rest = &rest[i + 1..];
            }
            _ => {
                let end = rest.find([',', '}']).unwrap_or(rest.len());
                rest = &rest[end..];
            }
        }
    }
}

fn references(text: &str, out: &mut Vec<Reference>) {
    let mut from = 0;
    while let Some(i) = text[from..].find("fencewatch_") {
        let start = from + i;
        let end = text[start..]
            .find(|c: char| !is_ident(c))
            .map_or(text.len(), |e| start + e);
        from = end;
        if text[..start].chars().next_back().is_some_and(is_ident) {
            continue; // part of a longer word
        }
        out.push(Reference {
            name: text[start..end].to_string(),
            labels: selector_labels(&text[end..]),
        });
    }
}

/// The names an exposition lets one use, with the label names of each: every sample name
/// (what Prometheus stores: `x_total`, `x_bucket`…), and the family name of a histogram (how
/// prose names it), with the labels of its buckets.
fn exposed(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut histograms = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some(name) = rest.strip_suffix(" histogram") {
                histograms.push(name.to_string());
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = out.entry(line[..end].to_string()).or_default();
        labels.extend(selector_labels(&line[end..]));
    }
    for name in histograms {
        if let Some(labels) = out.get(&format!("{name}_bucket")).cloned() {
            out.insert(name, labels);
        }
    }
    out
}

/// A `fencewatch demo` on port 0, killed on drop.
struct Demo {
    child: Child,
    addr: SocketAddr,
    stderr: PathBuf,
}

impl Demo {
    fn start(dir: &Path) -> Demo {
        let stderr = dir.join("demo.stderr");
        let mut child = Command::new(bin())
            .arg("demo")
            .args([
                "--listen",
                "127.0.0.1:0",
                "--stale-every",
                "1",
                "--rate",
                "2000",
            ])
            .arg("--data-dir")
            .arg(dir.join("demo"))
            .env_remove("FENCEWATCH_AUTH_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("spawn fencewatch demo");
        let mut first = String::new();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        stdout
            .read_line(&mut first)
            .expect("read the listening line");
        // Keep reading, so that the service never writes to a closed pipe.
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        let addr = first
            .trim()
            .strip_prefix("fencewatch listening on http://")
            .and_then(|a| a.parse().ok());
        let Some(addr) = addr else {
            let _ = child.kill();
            panic!(
                "no listening line (`{first}`): {}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        };
        Demo {
            child,
            addr,
            stderr,
        }
    }

    fn get(&self, path: &str) -> fencewatch_tests::service::Response {
        request(self.addr, "GET", path, &[], b"").expect("GET")
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The exposition of a `fencewatch serve` consuming Kafka (librdkafka's mock cluster, in this
/// process) once every Kafka family has a sample: a valid and a malformed message consumed
/// (the malformed one dead-lettered), the lag of each partition known.
fn kafka_exposition(dir: &Path) -> String {
    const TOPIC: &str = "events";
    let mock = MockCluster::new(1).expect("a mock Kafka cluster");
    mock.create_topic(TOPIC, 2, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    let now = now_ns();
    let valid = commit_line(now, "dashboards-kafka", 1, "orders-api.transition");
    produce(
        &brokers,
        TOPIC,
        &[
            ("dashboards-kafka".into(), valid),
            ("poison".into(), "not an event".into()),
        ],
    );
    let svc = TestService::start(
        dir,
        ORDERS_CONTRACT,
        &["--kafka-brokers", &brokers, "--kafka-topic", TOPIC],
    );
    svc.wait_for("both messages consumed, lag known", 60, |s| {
        let text = s.get("/metrics").text();
        let lags = text
            .lines()
            .filter(|l| l.starts_with("fencewatch_kafka_consumer_lag{"))
            .count();
        s.metric("fencewatch_kafka_dead_lettered_messages_total") == Some(1.0)
            && s.metric("fencewatch_kafka_messages_total") == Some(2.0)
            && lags == 2
    });
    svc.get("/metrics").text()
}

/// The exposition of a `fencewatch serve` taking OTLP once every OTLP family has a sample: a
/// span and a log record without `fencing.kind` (ignored), an undecodable request (400), and
/// the simulated workload over OTLP/gRPC (`simulate --otlp-grpc`).
fn otlp_exposition(dir: &Path) -> String {
    let grpc = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.to_string())
        .unwrap();
    let svc = TestService::start(dir, ORDERS_CONTRACT, &["--otlp-grpc-listen", &grpc]);
    let json = [("content-type", "application/json")];
    let span = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"b7ad6b7169203331","name":"GET /","endTimeUnixNano":"1"}]}]}]}"#;
    let record = r#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"timeUnixNano":"1"}]}]}]}"#;
    for (path, body) in [("/v1/traces", span), ("/v1/logs", record)] {
        let r = request(svc.addr, "POST", path, &json, body.as_bytes()).unwrap();
        assert_eq!(r.status, 200, "{path}: {}", r.text());
    }
    let protobuf = [("content-type", "application/x-protobuf")];
    let r = request(svc.addr, "POST", "/v1/traces", &protobuf, b"\xff\xff").unwrap();
    assert_eq!(r.status, 400, "{}", r.text());
    let out = Command::new(bin())
        .args([
            "simulate",
            "--events",
            "20",
            "--scopes",
            "5",
            "--otlp-grpc",
            &grpc,
        ])
        .env_remove("FENCEWATCH_AUTH_TOKEN")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    svc.get("/metrics").text()
}

#[test]
fn every_metric_in_alerts_and_dashboard_is_exposed_by_the_service() {
    // What the alerts, their tests and the dashboard name.
    let mut refs = Vec::new();
    for file in ["alerts.yml", "alerts.test.yml"] {
        references(&read(&dashboards().join(file)), &mut refs);
    }
    let dash = dashboard();
    let mut texts = Vec::new();
    strings(&dash, &mut texts);
    for t in texts {
        references(t, &mut refs);
    }
    let wanted: BTreeSet<&str> = refs.iter().map(|r| r.name.as_str()).collect();
    assert!(wanted.len() >= 10, "only {wanted:?}");

    let dir = tempfile::tempdir().unwrap();
    let demo = Demo::start(dir.path());
    let deadline = Instant::now() + Duration::from_secs(60);
    while !request(demo.addr, "GET", "/readyz", &[], b"").is_ok_and(|r| r.status == 200) {
        assert!(Instant::now() < deadline, "not ready: {}", demo.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    // Families that have no sample until something happens: an HTTP request (this one), a
    // stale commit the resource rejected, a malformed event, a withdrawn counterexample.
    let now = now_ns();
    let body = format!(
        "{{\"kind\":\"fence\",\"ts\":{},\"scope\":\"dashboards-test\",\"epoch\":2,\"route\":\"orders-api.transition\"}}\n\
         {{\"kind\":\"commit\",\"ts\":{now},\"scope\":\"dashboards-test\",\"epoch\":1,\"route\":\"orders-api.transition\",\"outcome\":\"rejected\"}}\n\
         not an event\n",
        now - 1_000_000_000
    );
    let post = |body: &str| {
        request(
            demo.addr,
            "POST",
            "/v1/events",
            &[("content-type", "application/x-ndjson")],
            body.as_bytes(),
        )
        .expect("POST /v1/events")
    };
    let r = post(&body);
    assert_eq!(r.status, 422, "{}", r.text());
    // A provisional counterexample withdrawn: its stale commit is re-sent under the same
    // (emitter, seq) with another epoch, so both deliveries are set aside.
    let body = format!(
        "{{\"kind\":\"fence\",\"ts\":{},\"scope\":\"dashboards-withdrawn\",\"epoch\":2,\"route\":\"orders-api.transition\",\"emitter\":\"dashboards-test\",\"seq\":1}}\n\
         {{\"kind\":\"commit\",\"ts\":{now},\"scope\":\"dashboards-withdrawn\",\"epoch\":1,\"route\":\"orders-api.transition\",\"emitter\":\"dashboards-test\",\"seq\":2}}\n\
         {{\"kind\":\"commit\",\"ts\":{now},\"scope\":\"dashboards-withdrawn\",\"epoch\":3,\"route\":\"orders-api.transition\",\"emitter\":\"dashboards-test\",\"seq\":2}}\n",
        now - 1_000_000_000
    );
    let r = post(&body);
    assert_eq!(r.status, 200, "{}", r.text());
    // A SQL query, for the queries' families.
    let r = request(
        demo.addr,
        "POST",
        "/v1/query",
        &[("content-type", "application/json")],
        br#"{"sql": "SELECT count(*) AS n FROM events"}"#,
    )
    .expect("POST /v1/query");
    assert_eq!(r.status, 200, "{}", r.text());

    // The families only a service with Kafka ingest has (meanwhile the demo runs).
    let kafka_dir = dir.path().join("kafka");
    std::fs::create_dir_all(&kafka_dir).unwrap();
    let kafka = kafka_exposition(&kafka_dir);
    let kafka_families = exposed(&kafka);
    assert!(
        kafka_families
            .keys()
            .any(|n| n.starts_with("fencewatch_kafka_")),
        "no fencewatch_kafka_* family with Kafka ingest:\n{kafka}"
    );

    // The families of OTLP ingest, over HTTP and gRPC.
    let otlp_dir = dir.path().join("otlp");
    std::fs::create_dir_all(&otlp_dir).unwrap();
    let otlp = otlp_exposition(&otlp_dir);
    let otlp_families = exposed(&otlp);
    assert!(
        otlp_families.contains_key("fencewatch_otlp_grpc_request_duration_seconds_count"),
        "no gRPC call recorded:\n{otlp}"
    );
    let kafka_families: BTreeMap<String, BTreeSet<String>> = kafka_families
        .into_iter()
        .chain(otlp_families)
        .fold(BTreeMap::new(), |mut all, (name, labels)| {
            all.entry(name).or_default().extend(labels);
            all
        });

    // The demo's resumed old owners make counterexamples within a few seconds.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (exposition, families) = loop {
        let text = demo.get("/metrics").text();
        let mut families = exposed(&text);
        for (name, labels) in &kafka_families {
            families
                .entry(name.clone())
                .or_default()
                .extend(labels.iter().cloned());
        }
        let missing = wanted.iter().any(|n| !families.contains_key(*n));
        if !missing || Instant::now() > deadline {
            break (
                format!("{text}\n# with Kafka ingest:\n{kafka}\n# with OTLP ingest:\n{otlp}"),
                families,
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let missing: Vec<&&str> = wanted
        .iter()
        .filter(|n| !families.contains_key(**n))
        .collect();
    assert!(
        missing.is_empty(),
        "dashboards/ names metrics the service does not expose: {missing:?}\n\
         exposed: {:?}\n{exposition}",
        families.keys().collect::<Vec<_>>()
    );
    // Label names matched on exist too (job and instance are added by Prometheus).
    for r in &refs {
        let have = &families[&r.name];
        for l in &r.labels {
            assert!(
                have.contains(l) || l == "job" || l == "instance",
                "{}: no label `{l}` in the exposition (labels: {have:?})",
                r.name
            );
        }
    }
    // No family has a per-scope label (SPEC §6).
    for (name, labels) in &families {
        assert!(!labels.contains("scope"), "{name} has a scope label");
    }
}
