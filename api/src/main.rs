//! The `fencewatch` binary: parse the command line, run, exit with the command's code.
//!
//! Its allocator is mimalloc (feature `mimalloc`, on by default): OTLP ingest allocates and
//! frees a score of small blocks per span (prost's owned types), which it serves faster than
//! the system's.

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let code = fencewatch_api::cli::run(std::env::args_os());
    std::process::exit(code);
}
