//! The `fencewatch` binary: parse the command line, run, exit with the command's code.
//!
//! Its allocator is the system's, asking for huge pages on large blocks in `check` where no host
//! takes free memory back ([`fencewatch_api::large_pages`]); mimalloc with feature `mimalloc`
//! (OTLP ingest allocates and frees a score of small blocks per span, which mimalloc serves
//! faster; but it holds freed memory longer: a higher peak under a flood of malformed lines).

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(not(feature = "mimalloc"))]
#[global_allocator]
static ALLOCATOR: fencewatch_api::large_pages::LargePages = fencewatch_api::large_pages::LargePages;

fn main() {
    let code = fencewatch_api::cli::run(std::env::args_os());
    std::process::exit(code);
}
