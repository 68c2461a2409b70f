//! Golden outputs: `check` in both formats on a few histories of `tests/cases`, compared byte
//! for byte with `tests/golden/`. An intended change of output is recorded by running the tests
//! with `FENCEWATCH_BLESS=1` and reviewing the diff.

use fencewatch_tests::{repo, run_in};

const CASES: [&str; 5] = [
    "out-of-order-witness",
    "malformed-variety",
    "incarnation-ambiguous-epoch-stale",
    "holderless-grant-ignored",
    "rejected-candidate-still-assessed",
];

#[test]
fn check_outputs_match_the_golden_files() {
    let bless = std::env::var_os("FENCEWATCH_BLESS").is_some();
    let mut mismatches = Vec::new();
    for case in CASES {
        let dir = repo().join("tests/cases").join(case);
        for (format, ext) in [("json", "json"), ("text", "txt")] {
            let out = run_in(
                &dir,
                &[
                    "check",
                    "--contract",
                    "contract.toml",
                    "--format",
                    format,
                    "events.ndjson",
                ],
                None,
            );
            assert!(
                matches!(out.status.code(), Some(0..=2)),
                "{case}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let golden = repo().join("tests/golden").join(format!("{case}.{ext}"));
            if bless {
                std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
                std::fs::write(&golden, &out.stdout).unwrap();
                continue;
            }
            let want = std::fs::read(&golden).unwrap_or_else(|e| {
                panic!("{}: {e} (run with FENCEWATCH_BLESS=1)", golden.display())
            });
            if want != out.stdout {
                mismatches.push(format!(
                    "{}:\n{}",
                    golden.display(),
                    String::from_utf8_lossy(&out.stdout)
                ));
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "output differs from the golden files:\n{}",
        mismatches.join("\n")
    );
}
