//! The demo's feeder: the simulator in live mode writing into the WAL source.

use super::WalSource;
use crate::batch::{self, Format};
use crate::clock::Clock;
use crate::simulate::Generator;
use crate::simulate::live::lines_until;
use std::time::Duration;

impl WalSource {
    /// Feeds this source from `generator` (the simulator in live mode: `fencewatch demo`) every
    /// `tick` as `clock` moves on, once it is ready, until it stops taking batches.
    pub fn feed(&self, clock: &dyn Clock, mut generator: Generator, tick: Duration) {
        let wal = self;
        wal.wait_ready();
        let mut line = 1u64;
        let mut body = Vec::new();
        loop {
            lines_until(&mut generator, clock.now(), &mut body);
            if !body.is_empty() {
                if wal.submit_lines("demo", line, &body).is_err() {
                    return;
                }
                line += batch::items(Format::Ndjson, &body);
                body.clear();
            }
            std::thread::sleep(tick);
        }
    }
}
