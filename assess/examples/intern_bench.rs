//! Micro-benchmark of the interners: `cargo run --release -p fencewatch-assess --example
//! intern_bench` — 2.1M lookups of 200k distinct scope ids in random order, against hashing
//! them.

use fencewatch_assess::intern::Interner;
use std::time::Instant;

fn main() {
    let keys: Vec<String> = (0..200_000).map(|i| format!("order-{i}")).collect();
    let mut x = 88172645463325252u64;
    let order: Vec<usize> = (0..2_100_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 200_000) as usize
        })
        .collect();
    let mut plain = Interner::new();
    let t = Instant::now();
    let mut sum = 0u64;
    for &i in &order {
        sum += u64::from(plain.intern(&keys[i]));
    }
    println!(
        "Interner: {:.0} ns per lookup ({sum})",
        t.elapsed().as_nanos() as f64 / order.len() as f64
    );
    let mut std_map: std::collections::HashMap<&str, u32> = Default::default();
    let t = Instant::now();
    for &i in &order {
        let n = std_map.len() as u32;
        sum += u64::from(*std_map.entry(keys[i].as_str()).or_insert(n));
    }
    println!(
        "std HashMap<&str, u32>: {:.0} ns per lookup ({sum})",
        t.elapsed().as_nanos() as f64 / order.len() as f64
    );
    let t = Instant::now();
    for &i in &order {
        sum += u64::from(plain.intern(&keys[i]));
    }
    println!(
        "Interner, second pass (all present): {:.0} ns per lookup ({sum})",
        t.elapsed().as_nanos() as f64 / order.len() as f64
    );
    // What `check` does instead for scopes while reading: hash each one (128 bits), no table.
    let t = Instant::now();
    let mut acc = 0u128;
    for &i in &order {
        acc ^= xxhash_rust::xxh3::xxh3_128(keys[i].as_bytes());
    }
    println!(
        "xxh3_128 of the scope: {:.0} ns per event ({acc})",
        t.elapsed().as_nanos() as f64 / order.len() as f64
    );
    let small: Vec<&str> = [
        "worker-1",
        "worker-2",
        "orders-api-1",
        "orders-api.transition",
        "settlement-worker.settle",
    ]
    .to_vec();
    let mut si = Interner::new();
    let t = Instant::now();
    for (n, &i) in order.iter().enumerate() {
        sum += u64::from(si.intern(small[(i + n) % small.len()]));
    }
    println!(
        "small Interner: {:.0} ns per lookup ({sum})",
        t.elapsed().as_nanos() as f64 / order.len() as f64
    );
}
