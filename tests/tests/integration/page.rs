//! The page at `GET /`, rendered by a real browser (headless Chromium): each property's
//! verdict, timeline and counterexamples, from the running service. Skipped without
//! Chromium, except under `CI=true` (see `fencewatch_tests::require!`).

use fencewatch_tests::service::{Demo, request};
use std::process::{Command, Stdio};

pub(crate) fn chromium() -> String {
    for c in fencewatch_tests::CHROMIUM {
        if Command::new(c)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            return c.to_string();
        }
    }
    panic!("headless Chromium is needed: apt-get install -y --no-install-recommends chromium");
}

/// The page at `addr` as headless Chromium renders it (8 s of virtual time), in `profile`.
/// Virtual time does not wait for a slow server: on a loaded machine the page's script may
/// not have rendered a property yet, so the page is loaded again (at most four times) until it
/// has. What the page shows is the caller's to assert.
pub(crate) fn dump_dom(
    browser: &str,
    profile: &std::path::Path,
    addr: std::net::SocketAddr,
) -> std::process::Output {
    let mut attempt = 0;
    loop {
        let out = Command::new(browser)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--virtual-time-budget=8000",
                "--dump-dom",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(format!("http://{addr}/"))
            .output()
            .unwrap();
        attempt += 1;
        let rendered = String::from_utf8_lossy(&out.stdout).contains("data-property=");
        if rendered || attempt == 4 || !out.status.success() {
            return out;
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

#[test]
fn the_page_shows_verdicts_timelines_and_counterexamples_in_a_browser() {
    fencewatch_tests::require!(Chromium);
    let browser = chromium();
    let dir = tempfile::tempdir().unwrap();
    let demo = Demo::start(dir.path(), 2000, 1);
    let addr = demo.addr;
    // Wait until the service has counterexamples to show.
    let ids = demo.counterexamples(1, 20);
    assert!(!ids.is_empty(), "the demo found no counterexample");
    let page = request(addr, "GET", "/", &[], b"").unwrap();
    assert_eq!(page.status, 200);
    assert!(
        page.header("content-type")
            .unwrap()
            .starts_with("text/html")
    );
    let profile = tempfile::tempdir().unwrap();
    let out = dump_dom(&browser, profile.path(), addr);
    // Each counterexample links to its scope's history, which the service answers.
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    let link = dom
        .split(r#"class="scope-history""#)
        .nth(1)
        .and_then(|rest| rest.split(r#"href=""#).nth(1))
        .and_then(|rest| rest.split('"').next())
        .map(|href| href.replace("&amp;", "&"))
        .unwrap_or_else(|| panic!("no scope-history link: {dom}"));
    assert!(link.starts_with("/v1/scopes/"), "{link}");
    let scope = request(addr, "GET", &link, &[], b"").unwrap();
    assert_eq!(scope.status, 200, "{link}: {}", scope.text());
    let scope = scope.json();
    assert!(
        !scope["history"]["events"].as_array().unwrap().is_empty(),
        "{link}: {scope}"
    );
    // And a screenshot, as a person would look at it.
    let shot = profile.path().join("page.png");
    let snap = Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1280,1000",
            "--virtual-time-budget=8000",
        ])
        .arg(format!(
            "--user-data-dir={}",
            profile.path().join("shot").display()
        ))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("http://{addr}/"))
        .output()
        .unwrap();
    drop(demo);
    assert!(
        snap.status.success(),
        "{}",
        String::from_utf8_lossy(&snap.stderr)
    );
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
    if let Some(keep) = std::env::var_os("FENCEWATCH_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The script ran against the API: the property section, its refuted verdict, a timeline
    // and a counterexample the API listed.
    assert!(dom.contains(r#"data-property="order-mutation""#), "{dom}");
    assert!(dom.contains(r#"data-verdict="refuted""#), "{dom}");
    assert!(dom.contains(r#"class="timeline""#), "{dom}");
    // Route coverage, with the demo's never-observed route shown silent.
    assert!(
        dom.contains(r#"data-route="refund-worker.refund""#),
        "{dom}"
    );
    assert!(dom.contains(r#"class="silent">silent"#), "{dom}");
    // The premise table: the demo's renewed premise, supported, with the time left.
    assert!(dom.contains(r#"data-premise="durable_fence""#), "{dom}");
    assert!(dom.contains(r#"class="supported">supported"#), "{dom}");
    assert!(dom.contains("by fencewatch simulate"), "{dom}");
    assert!(
        ids.iter()
            .any(|id| dom.contains(&format!(r#"data-id="{id}""#))),
        "{ids:?}\n{dom}"
    );
    // No error shown (the error box stays hidden and empty).
    assert!(
        dom.contains(r#"<div id="error" style="display: none;"></div>"#),
        "{dom}"
    );
}
