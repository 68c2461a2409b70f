//! What the examples share: the process's resident set and the count to run.

#![allow(dead_code)]

/// Resident bytes of this process, from /proc/self/statm (Linux).
pub(crate) fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("resident pages");
    pages * 4096
}

/// The first argument as a count, else 1,000,000.
pub(crate) fn count_arg() -> usize {
    count_arg_or(1_000_000)
}

/// The first argument as a count, else `default`.
pub(crate) fn count_arg_or(default: usize) -> usize {
    std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}
