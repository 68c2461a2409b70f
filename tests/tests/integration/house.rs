//! The house rules a newcomer relies on (issue 12), checked on the sources: no two modules of
//! a crate import each other (directly or around a circle, at any level of nesting: siblings'
//! subtrees taken as one), and no source file is over 800 lines outside its tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const CRATES: [&str; 4] = ["assess", "ingest", "api", "tests"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// A file's module path in its crate (`live/scopes/fast.rs` → `live::scopes::fast`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut m: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    if matches!(m.last().map(String::as_str), Some("lib" | "main" | "mod")) {
        m.pop();
    }
    m
}

/// The code of a file before its inline tests, without comment lines.
fn code(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    let text = text
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default();
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `crate::…`, `super::…` and `self::…` path in `code`, resolved from module `at`.
fn paths(code: &str, at: &[String]) -> Vec<Vec<String>> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let starts = ["crate::", "super::", "self::"]
            .iter()
            .any(|k| b[i..].starts_with(k.as_bytes()))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'));
        if !starts {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_' || b[j] == b':') {
            j += 1;
        }
        let segs: Vec<&str> = code[i..j].split("::").filter(|s| !s.is_empty()).collect();
        let mut base: Vec<String> = if segs[0] == "crate" {
            Vec::new()
        } else {
            at.to_vec()
        };
        let mut k = usize::from(segs[0] == "crate");
        while k < segs.len() && (segs[k] == "super" || segs[k] == "self") {
            if segs[k] == "super" {
                base.pop();
            }
            k += 1;
        }
        base.extend(segs[k..].iter().map(|s| s.to_string()));
        out.push(base);
        i = j;
    }
    out
}

/// Circles among sibling subtrees of `krate`: each as the modules on it.
fn circles(krate: &str) -> Vec<Vec<String>> {
    let src = fencewatch_tests::repo().join(krate).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeMap<Vec<String>, PathBuf> = files
        .iter()
        .map(|f| (module_of(&src, f), f.clone()))
        .collect();
    let mut edges: BTreeSet<(Vec<String>, Vec<String>)> = BTreeSet::new();
    for (m, f) in &modules {
        for mut target in paths(&code(f), m) {
            while !target.is_empty() && !modules.contains_key(&target) {
                target.pop();
            }
            // Lift the edge to the two sibling subtrees it joins (none between a module and
            // its own ancestors or descendants).
            let common = m.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common < m.len() && common < target.len() {
                edges.insert((m[..=common].to_vec(), target[..=common].to_vec()));
            }
        }
    }
    let mut graph: BTreeMap<&Vec<String>, Vec<&Vec<String>>> = BTreeMap::new();
    for (a, b) in &edges {
        graph.entry(a).or_default().push(b);
    }
    // A node is on a circle when it reaches itself; report each strongly connected set once.
    let reach = |from: &Vec<String>| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from];
        while let Some(n) = stack.pop() {
            for &next in graph.get(n).into_iter().flatten() {
                if seen.insert(next) {
                    stack.push(next);
                }
            }
        }
        seen
    };
    let mut found: BTreeSet<Vec<String>> = BTreeSet::new();
    for &n in graph.keys() {
        let from_n = reach(n);
        if from_n.contains(n) {
            let set: Vec<String> = from_n
                .into_iter()
                .filter(|m| reach(m).contains(n))
                .map(|m| m.join("::"))
                .collect();
            found.insert(set);
        }
    }
    found.into_iter().collect()
}

#[test]
fn no_module_of_a_crate_imports_one_that_imports_it_back() {
    let all: Vec<String> = CRATES
        .iter()
        .flat_map(|k| {
            circles(k)
                .into_iter()
                .map(move |c| format!("{k}: {}", c.join(" <-> ")))
        })
        .collect();
    assert!(all.is_empty(), "import circles:\n{}", all.join("\n"));
}

#[test]
fn the_checker_sees_a_circle() {
    // `a` uses `b`, `b` uses `a`'s child: one circle between the siblings.
    let a = paths("use super::b::X;", &["a".into()]);
    assert_eq!(a, vec![vec!["b".to_string(), "X".into()]]);
    let b = paths("fn f() { crate::a::inner::g() }", &["b".into()]);
    assert_eq!(b[0][..2], ["a".to_string(), "inner".into()]);
}

#[test]
fn no_source_file_is_over_800_lines_outside_its_tests() {
    let mut long = Vec::new();
    for krate in CRATES {
        let src = fencewatch_tests::repo().join(krate).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for f in files {
            if f.components().any(|c| c.as_os_str() == "tests") {
                continue;
            }
            let text = std::fs::read_to_string(&f).unwrap();
            let n = text
                .lines()
                .take_while(|l| !l.starts_with("#[cfg(test)]"))
                .count();
            if n > 800 {
                long.push(format!("{} ({n} lines)", f.display()));
            }
        }
    }
    assert!(long.is_empty(), "over 800 lines: {long:?}");
}
