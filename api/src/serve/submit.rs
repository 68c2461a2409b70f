//! Submitting a batch to the WAL source from an async handler (`POST /v1/events`, OTLP).

use fencewatch_ingest::source::wal::{Ingested, Reservation, SubmitError, WalSource};

/// Queues the WAL payload `payload` of `items` items, holding `held` of the ingest budget
/// until it is answered, and waits until it is durable and applied. Queued at once when the
/// queue has room; a full queue blocks, and that wait is moved off the async workers (a wait
/// the runtime cancels is a shutdown) — moving every send there cost two thread wake-ups a
/// request. `Err`: why nothing was stored (retry).
pub async fn submit(
    wal: &WalSource,
    items: u64,
    payload: Vec<u8>,
    held: Reservation,
) -> Result<Ingested, SubmitError> {
    let queued = wal.prepare(items, payload, Some(held))?;
    let pending = match queued.try_send() {
        Ok(pending) => pending?,
        Err(queued) => tokio::task::spawn_blocking(move || queued.send())
            .await
            .map_err(|_| SubmitError::ShuttingDown)??,
    };
    pending.await
}
