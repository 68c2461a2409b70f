//! The `fencewatch` binary: parse the command line, run, exit with the command's code.

fn main() {
    let code = fencewatch_api::cli::run(std::env::args_os());
    std::process::exit(code);
}
