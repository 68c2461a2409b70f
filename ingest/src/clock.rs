//! Wall time, passed in (as InfluxDB's `TimeProvider`): whatever stamps a batch's received
//! time, ages a checkpoint or answers "now" for a query asks the [`Clock`] it was given, so
//! tests can hold time still or move it ([`ManualClock`]) and nothing reads the system clock
//! behind their back. The core (`fencewatch-assess`) never reads a clock: it is handed times.

use fencewatch_assess::EventTime;
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// A source of wall time.
pub trait Clock: Debug + Send + Sync + 'static {
    /// Now, as ns since the Unix epoch.
    fn now(&self) -> EventTime;
}

/// A clock shared by everything that asks the time.
pub type SharedClock = Arc<dyn Clock>;

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl SystemClock {
    /// The system clock, shared.
    pub fn shared() -> SharedClock {
        Arc::new(SystemClock)
    }
}

impl Clock for SystemClock {
    fn now(&self) -> EventTime {
        let ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        EventTime(ns)
    }
}

/// A clock that stands still until it is set or advanced (tests, simulations).
#[derive(Debug, Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    /// A clock standing at `at`.
    pub fn new(at: EventTime) -> ManualClock {
        ManualClock(AtomicI64::new(at.0))
    }

    /// Sets the time.
    pub fn set(&self, at: EventTime) {
        self.0.store(at.0, Ordering::Release);
    }

    /// Moves the time on by `ns`.
    pub fn advance(&self, ns: i64) {
        self.0.fetch_add(ns, Ordering::AcqRel);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> EventTime {
        EventTime(self.0.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let c = ManualClock::new(EventTime(1_000));
        assert_eq!(c.now(), EventTime(1_000));
        c.advance(500);
        assert_eq!(c.now(), EventTime(1_500));
        c.set(EventTime(7));
        assert_eq!(c.now(), EventTime(7));
        let system = SystemClock.now();
        assert!(system.0 > 1_700_000_000_000_000_000, "{system:?}");
    }
}
