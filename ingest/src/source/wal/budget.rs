//! The ingest budget: bytes of request bodies in flight (being read, queued for the writer,
//! being applied), at most `max_pending_bytes`. A request that would pass it is answered 503
//! with `Retry-After` before more of it is read, so a burst of large bodies sheds load instead
//! of growing memory (issue 11: bounded memory per request and overall).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The shared budget.
#[derive(Debug, Clone)]
pub struct Budget(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    max: u64,
    used: AtomicU64,
}

/// Bytes taken from a [`Budget`], given back when dropped (when the batch holding them was
/// answered, or the request failed).
#[derive(Debug)]
pub struct Reservation {
    budget: Budget,
    bytes: u64,
}

impl Budget {
    /// A budget of `max` bytes.
    pub fn new(max: u64) -> Budget {
        Budget(Arc::new(Inner {
            max,
            used: AtomicU64::new(0),
        }))
    }

    /// An empty reservation, to grow as a body arrives.
    pub fn reserve(&self) -> Reservation {
        Reservation {
            budget: self.clone(),
            bytes: 0,
        }
    }

    /// Bytes in flight now.
    pub fn used(&self) -> u64 {
        self.0.used.load(Ordering::Acquire)
    }

    /// The limit.
    pub fn max(&self) -> u64 {
        self.0.max
    }
}

impl Reservation {
    /// Takes `n` more bytes; `false` (taking nothing) when the budget would be passed.
    pub fn grow(&mut self, n: u64) -> bool {
        let inner = &self.budget.0;
        let mut used = inner.used.load(Ordering::Acquire);
        loop {
            let Some(next) = used.checked_add(n).filter(|&t| t <= inner.max) else {
                return false;
            };
            match inner
                .used
                .compare_exchange_weak(used, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    self.bytes += n;
                    return true;
                }
                Err(now) => used = now,
            }
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.0.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_stay_within_the_budget_and_give_back_on_drop() {
        let b = Budget::new(100);
        let mut r1 = b.reserve();
        assert!(r1.grow(60));
        let mut r2 = b.reserve();
        assert!(!r2.grow(41));
        assert!(r2.grow(40));
        assert_eq!(b.used(), 100);
        assert!(!r1.grow(1));
        drop(r1);
        assert_eq!(b.used(), 40);
        assert!(r2.grow(60));
        drop(r2);
        assert_eq!(b.used(), 0);
    }
}
