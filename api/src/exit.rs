//! The process exit codes of every command (README, Commands).

/// `check`: an error (unreadable input, invalid contract); `contract check`: invalid; `wal`:
/// the data directory cannot be read.
pub const EXIT_ERROR: i32 = 3;
/// A usage error (EX_USAGE), and `serve` with an invalid configuration.
pub const EXIT_USAGE: i32 = 64;
/// `serve`: a failure while running.
pub const EXIT_FAILURE: i32 = 1;
