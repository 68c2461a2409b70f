//! Black-box tests of the `fencewatch` binary, compiled into one test executable.

mod archive;
mod archive_check;
mod archive_scope;
mod broker;
mod cases;
mod cli;
mod dashboards;
mod deploy;
mod found;
mod golden;
mod hostile;
mod house;
mod ingest_file;
mod kafka;
mod kafka_hostile;
mod otlp;
mod page;
mod premises;
mod serve;
mod simulated;
mod wal;
