//! The external tools some tests need beyond cargo and the `fencewatch` binary, and
//! [`require`]/[`require!`](crate::require!): a test that needs a missing tool says which and how
//! to get it and is skipped, so that a first `cargo nextest run` on a fresh machine passes,
//! except under `CI=true`, where a missing tool fails the test, so that CI runs everything.
//! `.ci/run` installs every tool.

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Stdio};

/// An external tool a test needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// `tansu`, a Kafka-compatible broker (or the binary `$TANSU` names).
    Tansu,
    /// Headless Chromium: `chromium`, `chromium-browser` or `google-chrome`.
    Chromium,
    /// Prometheus' `promtool` (or the binary `$PROMTOOL` names).
    Promtool,
    /// `python3` itself, standard library only.
    Python3,
    /// PyYAML in `python3` (`import yaml`).
    PyYaml,
    /// kubernetes-validate in `python3` (`import kubernetes_validate`).
    KubernetesValidate,
    /// The confluent-kafka client in `python3` (`import confluent_kafka`).
    ConfluentKafka,
    /// The Python OpenTelemetry SDK with its OTLP/HTTP and OTLP/gRPC exporters in `python3`.
    OtelSdk,
}

/// The names under which [`Tool::Chromium`] is looked for, in order.
pub const CHROMIUM: [&str; 3] = ["chromium", "chromium-browser", "google-chrome"];

/// The Python packages of [`Tool::OtelSdk`], pinned as `.ci/run` installs them.
const OTEL_PACKAGES: [&str; 3] = [
    "'opentelemetry-sdk==1.45.2'",
    "'opentelemetry-exporter-otlp-proto-http==1.45.2'",
    "'opentelemetry-exporter-otlp-proto-grpc==1.45.2'",
];

const PIP_NOTE: &str = "Debian's own python3 needs --break-system-packages";

impl Tool {
    /// What the tool is called in messages.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Tansu => "tansu",
            Tool::Chromium => "chromium",
            Tool::Promtool => "promtool",
            Tool::Python3 => "python3",
            Tool::PyYaml => "the Python module yaml (PyYAML)",
            Tool::KubernetesValidate => "the Python module kubernetes_validate",
            Tool::ConfluentKafka => "the Python module confluent_kafka",
            Tool::OtelSdk => "the Python OpenTelemetry SDK and OTLP exporters",
        }
    }

    /// How to install it.
    pub fn install(self) -> String {
        match self {
            Tool::Tansu => "`cargo install tansu --locked --features dynostore`, \
                 or point $TANSU at a tansu binary"
                .into(),
            Tool::Chromium => "`apt-get install chromium`".into(),
            Tool::Promtool => "`apt-get install prometheus` on Debian/Ubuntu, which provides \
                 /usr/bin/promtool, or point $PROMTOOL at a promtool binary"
                .into(),
            Tool::Python3 => "`apt-get install python3`".into(),
            Tool::PyYaml => format!(
                "`python3 -m pip install 'kubernetes-validate==1.37.0'`, which brings it, \
                 or `python3 -m pip install PyYAML`; {PIP_NOTE}"
            ),
            Tool::KubernetesValidate => {
                format!("`python3 -m pip install 'kubernetes-validate==1.37.0'`; {PIP_NOTE}")
            }
            Tool::ConfluentKafka => {
                format!("`python3 -m pip install 'confluent-kafka==2.16.1'`; {PIP_NOTE}")
            }
            Tool::OtelSdk => format!(
                "`python3 -m pip install {}`; {PIP_NOTE}",
                OTEL_PACKAGES.join(" ")
            ),
        }
    }

    /// Whether the tool is there: an executable on `$PATH` (or at the path `$TANSU` or
    /// `$PROMTOOL` names), or a module that `python3` imports.
    pub fn available(self) -> bool {
        match self {
            Tool::Tansu => executable(&overridden("TANSU", "tansu")),
            Tool::Chromium => CHROMIUM.iter().any(|c| executable(c.as_ref())),
            Tool::Promtool => executable(&overridden("PROMTOOL", "promtool")),
            Tool::Python3 => python_runs("pass"),
            Tool::PyYaml => python_runs("import yaml"),
            Tool::KubernetesValidate => python_runs("import kubernetes_validate"),
            Tool::ConfluentKafka => python_runs("import confluent_kafka"),
            Tool::OtelSdk => python_runs(
                "import opentelemetry.sdk, opentelemetry.exporter.otlp.proto.http, \
                 opentelemetry.exporter.otlp.proto.grpc",
            ),
        }
    }
}

/// `$VAR` when set and not empty, else `default`.
fn overridden(var: &str, default: &str) -> OsString {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.into())
}

/// Whether `program` names an executable file: a path when it has a `/`, else a name looked
/// up on `$PATH` as `Command` does.
fn executable(program: &std::ffi::OsStr) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let is_exe = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let path = Path::new(program);
    if path.components().count() > 1 {
        return is_exe(path);
    }
    let dirs = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&dirs).any(|d| is_exe(&d.join(program)))
}

/// Whether `python3 -c CODE` runs and succeeds.
fn python_runs(code: &str) -> bool {
    Command::new("python3")
        .args(["-c", code])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether this is a CI run (`CI=true`), where every test must run: nothing it needs may be
/// skipped for being absent.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Whether every tool of `tools` is available to the test named `test`. When one is missing:
/// under `CI=true` panics, naming it and how to install it; otherwise prints
/// `skipped: TEST needs TOOL (HOW TO INSTALL)` to stderr for each missing tool and returns
/// false, and the test should return at once. [`require!`](crate::require!) does both with
/// the calling test's name.
#[must_use]
#[track_caller]
pub fn require(test: &str, tools: &[Tool]) -> bool {
    let missing: Vec<String> = tools
        .iter()
        .filter(|t| !t.available())
        .map(|t| format!("{test} needs {} ({})", t.name(), t.install()))
        .collect();
    if missing.is_empty() {
        return true;
    }
    if ci() {
        panic!(
            "CI=true, so a missing tool fails the test (without CI=true it is skipped): {}; \
             .ci/run installs every tool",
            missing.join("; ")
        );
    }
    for m in &missing {
        eprintln!("skipped: {m}");
    }
    false
}

/// At the very start of a test: `require!(Tansu, ConfluentKafka);` returns from the test
/// (which passes) after saying on stderr which [`Tool`]s are missing and how to get them, or
/// fails it when `CI=true` (see [`require`]).
#[macro_export]
macro_rules! require {
    ($($tool:ident),+ $(,)?) => {
        if !$crate::require(
            {
                fn here() {}
                let name = ::std::any::type_name_of_val(&here);
                let name = name.strip_suffix("::here").unwrap_or(name);
                // Without the test crate's name: `module::test`, as nextest lists it.
                name.split_once("::").map_or(name, |(_, test)| test)
            },
            &[$($crate::Tool::$tool),+],
        ) {
            return;
        }
    };
}
