//! How long one `Interner::intern` can take while the interner grows (the applier waits for it,
//! every answer with it): `cargo run --release -p fencewatch-assess --example intern_growth
//! [N]` interns N distinct scope-like ids (default 10M) and prints each call over 5 ms and the
//! longest. Session 29: the hash table, grown whole (every string hashed again), took 438 ms at
//! 3.7M ids and 729 ms at 7.3M — what a `serve` taking on millions of scopes stops for.

use fencewatch_assess::intern::Interner;
use std::fmt::Write;
use std::time::Instant;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map_or(10_000_000, |s| s.parse().expect("N: a number"));
    let mut strings = Interner::new();
    let (mut longest, mut at) = (0f64, 0usize);
    let started = Instant::now();
    let mut s = String::new();
    for i in 0..n {
        s.clear();
        let _ = write!(
            s,
            "order-{:016x}",
            (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        );
        let t = Instant::now();
        strings.intern(&s);
        let took = t.elapsed().as_secs_f64();
        if took > longest {
            (longest, at) = (took, i);
        }
        if took > 0.005 {
            println!("id {i}: {:.1} ms", took * 1e3);
        }
    }
    println!(
        "{n} ids interned in {:.2} s; the longest call {:.1} ms, at id {at}; {:.1} heap bytes an id",
        started.elapsed().as_secs_f64(),
        longest * 1e3,
        strings.heap_bytes() as f64 / n as f64
    );
}
