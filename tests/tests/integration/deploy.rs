//! `deploy/`: the container image, the compose stack and the Kubernetes manifests, checked
//! where Docker, a cluster and Grafana are not available: the manifests against the
//! Kubernetes schemas (`kubernetes-validate --strict`), the ConfigMap's configuration and
//! contract by starting the real `fencewatch serve` with the pod's arguments, environment and
//! mounts laid out in a temporary folder, and the files against each other (ports, probe
//! paths, mounts, commands, the Rust version of the image). Compose's Kafka wiring and the
//! Kafka example of the configuration: [`kafka`].
//!
//! The crate has no YAML parser: PyYAML, through `python3`, turns every YAML file of deploy/
//! into JSON once per test. Both Python packages come with
//! `python3 -m pip install 'kubernetes-validate==1.37.0'`, which `.ci/run` does; the tests that
//! need them are skipped without them, except under `CI=true` (see
//! `fencewatch_tests::require!`).

use fencewatch_tests::service::request;
use fencewatch_tests::{bin, repo};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod kafka;

const INSTALL: &str = "install it with `python3 -m pip install 'kubernetes-validate==1.37.0'` \
     (it brings PyYAML; Debian's own python3 needs --break-system-packages), as .ci/run does";
/// The oldest Kubernetes the manifests target, and the newest the pinned validator knows.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.30.0", "1.37.0"];
/// Files of deploy/kubernetes/ that `kustomization.yaml` leaves out on purpose: an example
/// Secret (the real one is created by hand) and a Prometheus Operator CRD.
const UNLISTED: [&str; 3] = [
    "secret.example.yaml",
    "servicemonitor.yaml",
    "prometheusrule.yaml",
];

fn deploy() -> PathBuf {
    repo().join("deploy")
}

/// Runs `python3 ARGS`, failing clearly when python3 or one of its modules is missing.
fn python(args: &[&str], dir: &std::path::Path) -> Output {
    let out = Command::new("python3")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("python3 is needed for the deploy tests ({e}): {INSTALL}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("No module named"),
        "a Python module is missing: {INSTALL}\n{err}"
    );
    out
}

/// Every YAML file under deploy/ (path relative to it) with its documents, as JSON.
fn yaml_files() -> &'static BTreeMap<String, Vec<Value>> {
    static FILES: OnceLock<BTreeMap<String, Vec<Value>>> = OnceLock::new();
    FILES.get_or_init(|| {
        const SCRIPT: &str = "import json, os, yaml\n\
            out = {}\n\
            for d, _, files in os.walk('.'):\n    \
                for f in files:\n        \
                    if f.endswith(('.yaml', '.yml')):\n            \
                        p = os.path.relpath(os.path.join(d, f))\n            \
                        with open(p) as h:\n                \
                            out[p] = [x for x in yaml.safe_load_all(h) if x is not None]\n\
            print(json.dumps(out))";
        let out = python(&["-c", SCRIPT], &deploy());
        assert!(
            out.status.success(),
            "a YAML file of deploy/ does not parse:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("python3 printed JSON")
    })
}

/// The documents of deploy/`path`.
fn docs(path: &str) -> &'static [Value] {
    yaml_files()
        .get(path)
        .unwrap_or_else(|| panic!("deploy/{path} is missing"))
}

/// The one document of deploy/`path`.
fn doc(path: &str) -> &'static Value {
    match docs(path) {
        [d] => d,
        d => panic!("deploy/{path}: one document expected, found {}", d.len()),
    }
}

fn text(v: &Value) -> &str {
    v.as_str()
        .unwrap_or_else(|| panic!("a string expected, found {v}"))
}

fn list(v: &Value) -> &[Value] {
    v.as_array()
        .unwrap_or_else(|| panic!("a list expected, found {v}"))
}

fn texts(v: &Value) -> Vec<&str> {
    list(v).iter().map(text).collect()
}

/// The value after `flag` in an argument list.
fn flag<'a>(args: &[&'a str], flag: &str) -> &'a str {
    let i = args.iter().position(|a| *a == flag);
    i.and_then(|i| args.get(i + 1))
        .unwrap_or_else(|| panic!("no {flag} in {args:?}"))
}

/// The port of an `IP:PORT` address.
fn port_of(addr: &str) -> u64 {
    addr.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("`{addr}` has no port"))
}

/// The parent folder of a container path.
fn parent(p: &str) -> &str {
    p.rsplit_once('/').map_or("", |(dir, _)| dir)
}

/// Whether every label of `selector` is among `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let sel = selector.as_object();
    sel.is_some_and(|s| !s.is_empty() && s.iter().all(|(k, v)| labels.get(k) == Some(v)))
}

/// The StatefulSet, its pod spec and its one container.
fn statefulset() -> (&'static Value, &'static Value, &'static Value) {
    let sts = doc("kubernetes/statefulset.yaml");
    let pod = &sts["spec"]["template"]["spec"];
    match list(&pod["containers"]) {
        [c] => (sts, pod, c),
        c => panic!("one container expected, found {}", c.len()),
    }
}

/// A container's environment variable.
fn env(container: &'static Value, name: &str) -> &'static str {
    let var = list(&container["env"]).iter().find(|e| e["name"] == name);
    text(&var.unwrap_or_else(|| panic!("the container sets no {name}"))["value"])
}

#[test]
fn kubernetes_manifests_pass_the_schema_validator() {
    fencewatch_tests::require!(PyYaml, KubernetesValidate);
    let dir = deploy().join("kubernetes");
    let resources = texts(&doc("kubernetes/kustomization.yaml")["resources"]);
    for f in yaml_files().keys() {
        let Some(f) = f.strip_prefix("kubernetes/") else {
            continue;
        };
        assert!(
            f == "kustomization.yaml" || resources.contains(&f) || UNLISTED.contains(&f),
            "deploy/kubernetes/{f} is neither in kustomization.yaml nor a known extra"
        );
    }
    for r in &resources {
        assert!(
            dir.join(r).is_file(),
            "kustomization.yaml lists missing {r}"
        );
    }
    // Strict: unknown fields are errors. A kind or apiVersion without a schema is only a WARN
    // line for the tool, so any output at all fails (the ServiceMonitor, which has none
    // there, is checked by hand in the next test).
    let mut args = vec!["-m", "kubernetes_validate", "--strict", "--quiet"];
    for v in KUBERNETES_VERSIONS {
        args.extend(["-k", v]);
    }
    args.extend(&resources);
    args.push("secret.example.yaml");
    let out = python(&args, &dir);
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && report.trim().is_empty(),
        "kubernetes-validate --strict {KUBERNETES_VERSIONS:?} rejected the manifests:\n{report}"
    );
}

#[test]
fn kubernetes_manifests_fit_together() {
    fencewatch_tests::require!(PyYaml);
    let (sts, pod, c) = statefulset();
    assert_eq!(sts["kind"], "StatefulSet");
    assert_eq!(sts["spec"]["replicas"], 1, "one writer per data directory");
    let pod_labels = &sts["spec"]["template"]["metadata"]["labels"];
    assert!(selects(&sts["spec"]["selector"]["matchLabels"], pod_labels));

    let http = list(&c["ports"]).iter().find(|p| p["name"] == "http");
    assert_eq!(http.expect("a port named http")["containerPort"], 8080);
    assert_eq!(port_of(env(c, "FENCEWATCH_LISTEN")), 8080);
    for (probe, path) in [
        ("startupProbe", "/livez"),
        ("livenessProbe", "/livez"),
        ("readinessProbe", "/readyz"),
    ] {
        let get = &c[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        assert!(get["port"] == "http" || get["port"] == 8080, "{probe}");
    }
    let startup = &c["startupProbe"];
    let budget = startup["periodSeconds"].as_u64().unwrap_or(10)
        * startup["failureThreshold"].as_u64().unwrap_or(3);
    assert!(budget >= 120, "a generous startup probe: {budget} s");
    assert!(pod["terminationGracePeriodSeconds"].as_u64() >= Some(60));
    let annotations = &sts["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/port"], "8080");
    assert_eq!(annotations["prometheus.io/path"], "/metrics");

    // The data directory is the claim template's volume; the pod runs locked down.
    let claim = &list(&sts["spec"]["volumeClaimTemplates"])[0];
    let mounts = list(&c["volumeMounts"]);
    let data = mounts
        .iter()
        .find(|m| m["name"] == claim["metadata"]["name"]);
    assert_eq!(
        data.expect("the claim is mounted")["mountPath"],
        env(c, "FENCEWATCH_DATA_DIR")
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    for k in ["requests", "limits"] {
        assert!(c["resources"][k]["memory"].is_string(), "resources.{k}");
    }
    let volume = |name: &str| {
        let v = list(&pod["volumes"]).iter().find(|v| v["name"] == name);
        v.unwrap_or_else(|| panic!("no volume {name}"))
    };
    let configmap = doc("kubernetes/configmap.yaml");
    assert_eq!(
        volume("config")["configMap"]["name"],
        configmap["metadata"]["name"]
    );
    let secret = doc("kubernetes/secret.example.yaml");
    assert_eq!(
        volume("auth-token")["secret"]["secretName"],
        secret["metadata"]["name"]
    );

    // Services reach the pod by the named port; the headless one governs the StatefulSet.
    let services = docs("kubernetes/service.yaml");
    for s in services {
        assert!(selects(&s["spec"]["selector"], pod_labels), "{s}");
        let p = &s["spec"]["ports"][0];
        assert_eq!(p["name"], "http");
        assert_eq!(p["targetPort"], "http");
        assert_eq!(p["port"], 8080);
    }
    let governing = services
        .iter()
        .find(|s| s["metadata"]["name"] == sts["spec"]["serviceName"]);
    assert_eq!(
        governing.expect("spec.serviceName")["spec"]["clusterIP"],
        "None"
    );

    // A budget that still lets a node drain evict the single pod.
    let pdb = &doc("kubernetes/pdb.yaml")["spec"];
    assert!(selects(&pdb["selector"]["matchLabels"], pod_labels));
    assert!(
        pdb["maxUnavailable"].as_u64() >= Some(1) || pdb["minAvailable"] == 0,
        "with one replica the budget must allow an eviction: {pdb}"
    );

    // The ServiceMonitor (no schema to validate) selects exactly one Service by its port.
    let sm = &doc("kubernetes/servicemonitor.yaml")["spec"];
    let chosen: Vec<&Value> = services
        .iter()
        .filter(|s| selects(&sm["selector"]["matchLabels"], &s["metadata"]["labels"]))
        .collect();
    assert_eq!(chosen.len(), 1, "the ServiceMonitor selects one Service");
    assert_eq!(
        sm["endpoints"][0]["port"],
        chosen[0]["spec"]["ports"][0]["name"]
    );
    assert_eq!(sm["endpoints"][0]["path"], "/metrics");

    // The PrometheusRule carries exactly the alert rules of dashboards/alerts.yml.
    let rule = doc("kubernetes/prometheusrule.yaml");
    assert_eq!(rule["kind"], "PrometheusRule");
    let alerts = fencewatch_tests::repo().join("dashboards/alerts.yml");
    let out = python(
        &[
            "-c",
            "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
            &alerts.display().to_string(),
        ],
        &deploy(),
    );
    let alerts: Value = serde_json::from_slice(&out.stdout).expect("alerts.yml as JSON");
    assert_eq!(
        rule["spec"]["groups"], alerts["groups"],
        "deploy/kubernetes/prometheusrule.yaml is out of date with dashboards/alerts.yml (see deploy/README.md)"
    );
}

/// A `fencewatch serve` killed when the test ends, however it ends.
struct Running(Child);

impl Running {
    /// Sends SIGTERM and waits for the exit, failing after `grace` seconds.
    fn terminate(&mut self, grace: u64) -> std::process::ExitStatus {
        let pid = self.0.id();
        let _ = fencewatch_tests::signal(pid, "TERM");
        let deadline = Instant::now() + Duration::from_secs(grace);
        loop {
            if let Some(s) = self.0.try_wait().unwrap() {
                return s;
            }
            assert!(Instant::now() < deadline, "no exit {grace} s after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn configmap_starts_the_real_service_as_the_pod_runs_it() {
    fencewatch_tests::require!(PyYaml);
    let configmap = doc("kubernetes/configmap.yaml");
    for file in ["fencewatch.toml", "contract.toml"] {
        let example = std::fs::read_to_string(deploy().join(file)).unwrap();
        assert_eq!(
            text(&configmap["data"][file]),
            example,
            "configmap.yaml's {file} differs from deploy/{file}: keep the two equal"
        );
    }
    let (sts, pod, c) = statefulset();
    let secret = doc("kubernetes/secret.example.yaml");

    // The pod's file system under a temporary folder: each mount at <root>/<mountPath>.
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("pod");
    let mounts: Vec<&str> = list(&c["volumeMounts"])
        .iter()
        .map(|m| text(&m["mountPath"]))
        .collect();
    let at = |p: &str| -> String {
        if mounts.iter().any(|m| p.starts_with(m)) {
            root.join(p.trim_start_matches('/')).display().to_string()
        } else {
            p.to_string()
        }
    };
    for m in list(&c["volumeMounts"]) {
        let dir = PathBuf::from(at(text(&m["mountPath"])));
        std::fs::create_dir_all(&dir).unwrap();
        let files = match list(&pod["volumes"])
            .iter()
            .find(|v| v["name"] == m["name"])
        {
            Some(v) if v["configMap"].is_object() => configmap["data"].as_object(),
            Some(v) if v["secret"].is_object() => secret["stringData"].as_object(),
            Some(v) => panic!("unexpected volume {v}"),
            None => None, // the claim template: an empty data directory
        };
        for (name, content) in files.into_iter().flatten() {
            // Absolute paths in the configuration point into the mounts as well.
            let mut content = text(content).to_string();
            for m in &mounts {
                content = content.replace(&format!("\"{m}/"), &format!("\"{}/", at(m)));
            }
            std::fs::write(dir.join(name), content).unwrap();
        }
    }

    let args: Vec<String> = texts(&c["args"]).into_iter().map(at).collect();
    let contract = at(&format!(
        "{}/contract.toml",
        parent(flag(&texts(&c["args"]), "--config"))
    ));
    let out = Command::new(bin())
        .args(["contract", "check", &contract])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && report.contains("contract: accepted"),
        "the ConfigMap's contract.toml is not accepted:\n{report}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The container's args and environment, paths moved under <root>; only the address
    // changes, to a free local port (a flag wins over FENCEWATCH_LISTEN).
    let stderr_path = tmp.path().join("stderr");
    let mut cmd = Command::new(bin());
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("FENCEWATCH_")) {
        cmd.env_remove(k);
    }
    for e in list(&c["env"]) {
        // A value from the pod's own name is what the kubelet gives the StatefulSet's first pod.
        let value = match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            Some("metadata.name") => format!("{}-0", text(&sts["metadata"]["name"])),
            Some(other) => panic!("env {}: a field the test does not know: {other}", e["name"]),
            None => at(text(&e["value"])),
        };
        cmd.env(text(&e["name"]), value);
    }
    let child = cmd
        .args(&args)
        .args(["--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .expect("spawn fencewatch serve");
    let mut svc = Running(child);
    let logged = || std::fs::read_to_string(&stderr_path).unwrap_or_default();
    // Kept open to the end: a closed pipe would fail the service's later prints.
    let mut stdout = BufReader::new(svc.0.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let addr: SocketAddr = first
        .trim()
        .strip_prefix("fencewatch listening on http://")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "the pod's configuration is refused (`{first}`):\n{}",
                logged()
            )
        });

    let get = |path: &str, headers: &[(&str, &str)]| {
        request(addr, "GET", path, headers, b"")
            .expect("GET")
            .status
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while get(text(&c["readinessProbe"]["httpGet"]["path"]), &[]) != 200 {
        assert!(Instant::now() < deadline, "never ready:\n{}", logged());
        std::thread::sleep(Duration::from_millis(20));
    }
    for probe in ["startupProbe", "livenessProbe"] {
        assert_eq!(get(text(&c[probe]["httpGet"]["path"]), &[]), 200, "{probe}");
    }
    let annotations = &sts["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(get(text(&annotations["prometheus.io/path"]), &[]), 200);
    // The Secret's token file guards /v1/*.
    let bearer = format!("Bearer {}", text(&secret["stringData"]["auth-token"]));
    assert_eq!(get("/v1/assurance", &[]), 401);
    assert_eq!(get("/v1/assurance", &[("authorization", &bearer)]), 200);
    let first_log = logged().lines().next().unwrap_or_default().to_string();
    assert!(
        serde_json::from_str::<Value>(&first_log).is_ok(),
        "log_format = \"json\": {first_log}"
    );

    // SIGTERM, as the kubelet stops the pod: exit 0 within the grace period, state on the
    // volume.
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    let status = svc.terminate(grace);
    assert!(
        status.success(),
        "exit after SIGTERM: {status}\n{}",
        logged()
    );
    let data_dir = at(env(c, "FENCEWATCH_DATA_DIR"));
    let written = std::fs::read_dir(&data_dir).unwrap().next().is_some();
    assert!(written, "nothing written to {data_dir}");
    drop(stdout);
}

/// The mounts of compose files: (file, service, target) → (type, source).
type Mounts = BTreeMap<(&'static str, String, String), (String, String)>;

fn compose_mounts() -> Mounts {
    let mut mounts = Mounts::new();
    for file in ["compose.yaml", "compose.demo.yaml"] {
        for (name, svc) in doc(file)["services"].as_object().unwrap() {
            for v in svc["volumes"].as_array().into_iter().flatten() {
                let (kind, source, target) = match v.as_str() {
                    Some(short) => {
                        let p: Vec<&str> = short.split(':').collect();
                        let bind = p[0].starts_with(['.', '/', '~']);
                        (if bind { "bind" } else { "volume" }, p[0], p[1])
                    }
                    None => (text(&v["type"]), text(&v["source"]), text(&v["target"])),
                };
                let key = (file, name.clone(), target.to_string());
                mounts.insert(key, (kind.to_string(), source.to_string()));
            }
        }
    }
    mounts
}

/// The source mounted at `target` in `service` of compose.yaml.
fn mounted(mounts: &Mounts, service: &str, target: &str) -> String {
    let key = ("compose.yaml", service.to_string(), target.to_string());
    let m = mounts.get(&key);
    m.unwrap_or_else(|| panic!("compose.yaml: {service} mounts nothing at {target}"))
        .1
        .clone()
}

/// The target at which `service` of compose.yaml mounts a source ending in `source`.
fn target_of(mounts: &Mounts, service: &str, source: &str) -> String {
    let m = mounts.iter().find(|((f, s, _), (_, src))| {
        *f == "compose.yaml" && s == service && src.ends_with(source)
    });
    m.unwrap_or_else(|| panic!("compose.yaml: {service} does not mount {source}"))
        .0
        .2
        .clone()
}

#[test]
fn compose_services_mount_files_that_exist_and_match_the_pod() {
    fencewatch_tests::require!(PyYaml);
    let d = deploy();
    let services = &doc("compose.yaml")["services"];
    for s in [
        "fencewatch",
        "kafka",
        "kafka-topics",
        "prometheus",
        "grafana",
    ] {
        assert!(services.get(s).is_some(), "compose.yaml has no service {s}");
    }
    let mounts = compose_mounts();
    for ((file, service, _), (kind, source)) in &mounts {
        if kind == "bind" {
            assert!(
                d.join(source).exists(),
                "{file}: {service} mounts {source}, but deploy/{source} does not exist"
            );
        } else {
            let declared = doc(file)["volumes"].get(source).is_some();
            assert!(declared, "{file}: volume {source} is not declared");
        }
    }
    let build = &services["fencewatch"]["build"];
    let dockerfile = d
        .join(text(&build["context"]))
        .join(text(&build["dockerfile"]));
    assert!(dockerfile.is_file(), "{}", dockerfile.display());

    // fencewatch: the pod's command, configuration and contract side by side, the data
    // volume, the port, the probe, the grace period.
    let (_, pod, c) = statefulset();
    let fw = &services["fencewatch"];
    let command = texts(&fw["command"]);
    assert_eq!(
        command,
        texts(&c["args"]),
        "compose and the pod run the same command"
    );
    let config = flag(&command, "--config");
    assert_eq!(mounted(&mounts, "fencewatch", config), "./fencewatch.toml");
    let contract = format!("{}/contract.toml", parent(config));
    assert_eq!(mounted(&mounts, "fencewatch", &contract), "./contract.toml");
    let listen = text(&fw["environment"]["FENCEWATCH_LISTEN"]);
    assert_eq!(port_of(listen), port_of(env(c, "FENCEWATCH_LISTEN")));
    let published = texts(&fw["ports"]);
    assert!(
        published.iter().any(|p| port_of(p) == port_of(listen)),
        "{published:?}"
    );
    let data_dir = text(&fw["environment"]["FENCEWATCH_DATA_DIR"]);
    assert_eq!(data_dir, env(c, "FENCEWATCH_DATA_DIR"));
    assert_eq!(mounted(&mounts, "fencewatch", data_dir), "fencewatch-data");
    let check = texts(&fw["healthcheck"]["test"]).join(" ");
    let probe = text(&c["readinessProbe"]["httpGet"]["path"]);
    let tcp = format!("/dev/tcp/127.0.0.1/{}", port_of(listen));
    assert!(check.contains(&tcp) && check.contains(probe), "{check}");
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert_eq!(fw["stop_grace_period"], format!("{grace}s"));

    // The demo override replaces the command and the data volume, not the port.
    let demo = texts(&doc("compose.demo.yaml")["services"]["fencewatch"]["command"]);
    assert_eq!(demo[0], "demo");
    assert_eq!(port_of(flag(&demo, "--listen")), port_of(listen));
    let data = flag(&demo, "--data-dir").to_string();
    let key = ("compose.demo.yaml", "fencewatch".to_string(), data);
    let own = mounts.get(&key).map(|(_, src)| src.as_str());
    assert!(
        own.is_some_and(|s| s != "fencewatch-data"),
        "the demo keeps its state apart"
    );
}

#[test]
fn compose_prometheus_and_grafana_see_fencewatch_and_dashboards() {
    fencewatch_tests::require!(PyYaml);
    let services = &doc("compose.yaml")["services"];
    let mounts = compose_mounts();
    let listen = text(&services["fencewatch"]["environment"]["FENCEWATCH_LISTEN"]);
    let target = format!("fencewatch:{}", port_of(listen));

    // Prometheus reads the mounted prometheus.yml, scrapes fencewatch under the job name
    // that dashboards/alerts.yml selects, and loads the mounted alert rules.
    let prom_args = texts(&services["prometheus"]["command"]);
    let config = prom_args
        .iter()
        .find_map(|a| a.strip_prefix("--config.file="));
    assert_eq!(
        mounted(&mounts, "prometheus", config.unwrap()),
        "./prometheus.yml"
    );
    let prom = doc("prometheus.yml");
    let job = list(&prom["scrape_configs"])
        .iter()
        .find(|j| j["static_configs"][0]["targets"][0] == target.as_str())
        .unwrap_or_else(|| panic!("prometheus.yml does not scrape {target}"));
    let job = text(&job["job_name"]);
    let alerts = std::fs::read_to_string(repo().join("dashboards/alerts.yml")).unwrap();
    assert!(
        !alerts.contains("job=\"") || alerts.contains(&format!("job=\"{job}\"")),
        "dashboards/alerts.yml selects another job than `{job}`"
    );
    let rules = target_of(&mounts, "prometheus", "dashboards/alerts.yml");
    let loaded = texts(&prom["rule_files"]).into_iter().any(|r| {
        let glob = r.strip_suffix("/*.yml");
        r == rules || glob.is_some_and(|dir| dir == parent(&rules) && rules.ends_with(".yml"))
    });
    assert!(loaded, "prometheus.yml does not load {rules}");

    // Grafana: the datasource is the prometheus service, the provider reads the dashboard.
    let ds = doc("grafana/provisioning/datasources/prometheus.yaml");
    assert_eq!(ds["datasources"][0]["url"], "http://prometheus:9090");
    let prom_ports = texts(&services["prometheus"]["ports"]);
    assert!(prom_ports.iter().any(|p| port_of(p) == 9090));
    let provider = doc("grafana/provisioning/dashboards/fencewatch.yaml");
    let dashboard = target_of(&mounts, "grafana", "dashboards/fencewatch.json");
    assert_eq!(
        provider["providers"][0]["options"]["path"],
        parent(&dashboard)
    );
    for dir in ["datasources", "dashboards"] {
        let target = format!("/etc/grafana/provisioning/{dir}");
        assert_eq!(
            mounted(&mounts, "grafana", &target),
            format!("./grafana/provisioning/{dir}")
        );
    }
}

/// A version like `1.95` or `1.95.0` as numbers, padded to three.
fn version(v: &str) -> Vec<u32> {
    let mut n: Vec<u32> = v.split('.').map(|p| p.parse().expect(v)).collect();
    n.resize(3, 0);
    n
}

#[test]
fn dockerfile_builds_with_the_workspace_rust_and_runs_the_pods_command() {
    fencewatch_tests::require!(PyYaml);
    let manifest = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let msrv = manifest.lines().find_map(|l| {
        let v = l
            .trim()
            .strip_prefix("rust-version")?
            .trim()
            .strip_prefix('=')?;
        v.trim().strip_prefix('"')?.strip_suffix('"')
    });
    let msrv = msrv.expect("the workspace's rust-version");
    let file = std::fs::read_to_string(deploy().join("Dockerfile")).unwrap();
    let file = file.replace("\\\n", " ");
    let lines: Vec<&str> = file
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let froms: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("FROM "))
        .collect();
    assert_eq!(froms.len(), 2, "a builder and a runtime stage");
    let builder = froms[0].split_whitespace().next().unwrap();
    let tag = builder
        .strip_prefix("rust:")
        .expect("the builder is rust:…");
    let (rust, variant) = tag.split_once('-').unwrap_or((tag, ""));
    assert!(
        version(rust) >= version(msrv),
        "the image builds with Rust {rust}, the workspace needs {msrv}: raise {builder}"
    );
    // The runtime is the Debian release the binary was linked on (its glibc).
    let release = variant.split('-').find(|w| *w != "slim" && !w.is_empty());
    let release = release.expect("a Debian release in the builder's tag");
    assert!(
        froms[1].contains(release),
        "builder {builder}, runtime {}",
        froms[1]
    );
    assert!(file.contains("cargo build --release -p fencewatch-api --locked"));
    for copy in lines.iter().filter_map(|l| l.strip_prefix("COPY ")) {
        let words: Vec<&str> = copy.split_whitespace().collect();
        for src in words[..words.len() - 1]
            .iter()
            .filter(|w| !w.starts_with("--"))
        {
            assert!(
                copy.starts_with("--from") || repo().join(src).exists(),
                "COPY {src}: not in the build context"
            );
        }
    }
    let instr = |name: &str| {
        let l = lines.iter().find_map(|l| l.strip_prefix(name));
        l.unwrap_or_else(|| panic!("no {name}")).trim()
    };
    assert_eq!(instr("ENTRYPOINT "), r#"["fencewatch"]"#);
    assert_eq!(instr("EXPOSE "), "8080");
    let cmd: Value = serde_json::from_str(instr("CMD ")).expect("CMD in exec form");
    let (_, pod, c) = statefulset();
    assert_eq!(cmd, c["args"], "the image's default command is the pod's");
    let uid = instr("USER ").split(':').next().unwrap();
    assert_eq!(pod["securityContext"]["runAsUser"].to_string(), uid);

    // The ignore file beside the Dockerfile keeps target/ out, and nothing the build needs.
    let ignore = std::fs::read_to_string(deploy().join("Dockerfile.dockerignore")).unwrap();
    let patterns: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert!(patterns.contains(&"target"), "target/ goes to the builder");
    let needed = [
        "Cargo.toml",
        "Cargo.lock",
        "assess",
        "ingest",
        "api",
        "tests",
        "bench",
        "deploy/fencewatch.toml",
        "deploy/contract.toml",
    ];
    for n in needed {
        let excluded = patterns
            .iter()
            .any(|p| *p == "*" || n == *p || n.starts_with(&format!("{p}/")));
        assert!(!excluded, "Dockerfile.dockerignore excludes {n}");
    }
}
