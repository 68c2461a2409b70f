//! Restoring a partition's assessor from its checkpoints: the newest one that verifies and
//! decodes, passing over damaged or undecodable newer ones (each reported); when none is
//! usable, what the partition's source allows ([`WhenNoneUsable`]).

use super::state::read_state;
use super::{Error, Result};
use crate::checkpoint::{self, CheckpointStore, PassedOver, Quarantined};
use fencewatch_assess::Contract;
use fencewatch_assess::live::{Live, LiveOptions};

/// What to do when checkpoints exist but none verifies and decodes (all damaged, or all
/// written by a build with another state layout, as after an upgrade).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenNoneUsable {
    /// Rebuild from the partition's beginning if the source still holds it (the local WAL
    /// while it starts at offset 0: exact, the same code replays every batch); otherwise the
    /// events they covered are gone and restoring is refused, saying what the operator can do.
    Rebuild {
        /// The oldest offset the source still holds.
        first_offset: u64,
    },
    /// Move them into `<dir>/quarantine/<at>/` and rebuild from the earliest offset the source
    /// retains (Kafka: the broker holds what they covered as long as its retention does).
    Quarantine {
        /// The folder's name (wall time, ns).
        at: i64,
    },
}

/// A restored assessor and what restoring it took.
#[derive(Debug)]
pub struct Restored {
    /// The assessor, under the options its checkpoint was written with (a fresh one under
    /// the options given): the caller sets the configuration's once it has replayed.
    pub live: Live,
    /// The checkpoint's offset, if one was restored: read the partition again from here.
    pub from: Option<u64>,
    /// Newer checkpoints passed over as damaged or undecodable, newest first.
    pub passed_over: Vec<PassedOver>,
    /// Checkpoints moved aside, none of which was usable.
    pub quarantined: Option<Quarantined>,
}

/// Restores the newest usable checkpoint of `store` (see the [module docs](self)).
pub fn restore(
    store: &mut CheckpointStore,
    contract: Contract,
    options: LiveOptions,
    none_usable: WhenNoneUsable,
) -> Result<Restored> {
    let fresh = |contract, passed_over, quarantined| Restored {
        live: Live::new(contract, options),
        from: None,
        passed_over,
        quarantined,
    };
    match store.latest_decoded(read_state) {
        Ok(Some((loaded, state))) => Ok(Restored {
            live: Live::restore(contract, state)?,
            from: Some(loaded.offset),
            passed_over: loaded.passed_over,
            quarantined: None,
        }),
        Ok(None) => Ok(fresh(contract, Vec::new(), None)),
        Err(checkpoint::Error::NoValidCheckpoint {
            dir,
            skipped,
            reasons,
        }) => match none_usable {
            WhenNoneUsable::Rebuild { first_offset: 0 } => {
                let passed = reasons
                    .into_iter()
                    .map(|reason| PassedOver {
                        path: dir.clone(),
                        offset: 0,
                        bytes: 0,
                        reason: format!("{reason}; rebuilt from the whole write-ahead log instead"),
                    })
                    .collect();
                Ok(fresh(contract, passed, None))
            }
            WhenNoneUsable::Rebuild { first_offset } => Err(Error::NoUsableCheckpoint {
                dir,
                skipped,
                reasons: reasons.join("; "),
                first: first_offset,
            }),
            WhenNoneUsable::Quarantine { at } => {
                let quarantined = quarantine(store, at)?;
                Ok(fresh(contract, Vec::new(), Some(quarantined)))
            }
        },
        Err(e) => Err(e.into()),
    }
}

/// Restores the newest usable checkpoint of `store` at or below offset `bound`: when the
/// evidence archive holds a partition's rows only below `bound` and the newest checkpoint
/// covers more, the records between are applied again from an older state, so their rows are
/// archived (SPEC §9). `None` when no checkpoint there is usable. Like [`restore`], under the
/// options the checkpoint was written with.
pub fn restore_at_or_below(
    store: &mut CheckpointStore,
    contract: Contract,
    bound: u64,
) -> Result<Option<Restored>> {
    match store.latest_decoded_at_or_below(bound, read_state) {
        Ok(Some((loaded, state))) => {
            let live = Live::restore(contract, state)?;
            Ok(Some(Restored {
                live,
                from: Some(loaded.offset),
                passed_over: loaded.passed_over,
                quarantined: None,
            }))
        }
        Ok(None) | Err(checkpoint::Error::NoValidCheckpoint { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Moves every checkpoint of `store` (none of which is usable) into
/// `<dir>/quarantine/<at>/`, syncs both folders and opens the store again, empty.
fn quarantine(store: &mut CheckpointStore, at: i64) -> Result<Quarantined> {
    let dir = store.dir().to_path_buf();
    let found = checkpoint::inspect(&dir, |s, len| read_state(s, len).map(drop))?;
    let to = dir.join("quarantine").join(at.to_string());
    let io = |path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    std::fs::create_dir_all(&to).map_err(io(&to))?;
    for c in &found {
        let name = c.path.file_name().expect("a checkpoint file has a name");
        std::fs::rename(&c.path, to.join(name)).map_err(io(&c.path))?;
    }
    for d in [&dir, &to] {
        std::fs::File::open(d)
            .and_then(|f| f.sync_all())
            .map_err(io(d))?;
    }
    *store = CheckpointStore::open(&dir)?;
    Ok(Quarantined {
        to,
        checkpoints: found,
    })
}
