//! `fencewatch check --max-memory`: a history whose assessment would not fit the budget is read
//! into spill files by scope and assessed a part at a time
//! ([`fencewatch_assess::history::Spilled`]), with the same report.

use crate::render::ProgressBar;
use fencewatch_assess::history::{Spilled, parts_for};
use fencewatch_assess::{Contract, Report};
use fencewatch_ingest::source::file::{Input, Progress, ReadOptions, read_into, total_size};
use fencewatch_ingest::source::spill::DirStore;
use std::path::Path;
use std::time::Instant;

/// `check`'s memory per byte of NDJSON read, when it holds the whole history (measured on
/// simulated histories: 297–305 MB for a 359 MB file, plus the sweeps' buffers).
const MEMORY_PER_INPUT_BYTE: u64 = 1;

/// Whether `inputs` must be spilled to be assessed within `budget` bytes: when their size says
/// so, or cannot say (standard input).
pub(crate) fn needed(inputs: &[Input], budget: u64) -> bool {
    inputs.iter().any(|i| matches!(i, Input::Stdin))
        || total_size(inputs).saturating_mul(MEMORY_PER_INPUT_BYTE) > budget
}

/// Assesses `inputs` within about `budget` bytes, its spill files under `dir` (default the
/// system's temporary directory); returns the report and when reading ended.
#[allow(clippy::too_many_arguments)]
pub(crate) fn check(
    contract: Contract,
    inputs: &[Input],
    opts: ReadOptions,
    budget: u64,
    dir: Option<&Path>,
    conformance: bool,
    progress: Option<Progress<'_>>,
    show_progress: bool,
) -> Result<(Report, Instant), String> {
    let parent = dir.map_or_else(std::env::temp_dir, Path::to_path_buf);
    let store =
        DirStore::new(&parent).map_err(|e| format!("--spill-dir {}: {e}", parent.display()))?;
    let spill_dir = store.dir().display().to_string();
    // Standard input's size is unknown.
    let memory = (!inputs.iter().any(|i| matches!(i, Input::Stdin)))
        .then(|| total_size(inputs).saturating_mul(MEMORY_PER_INPUT_BYTE));
    let mut spilled = Spilled::new(contract, store, parts_for(memory, budget), budget);
    if conformance {
        spilled.note_conformance();
    }
    read_into(&mut spilled, inputs, opts, progress).map_err(|e| e.to_string())?;
    let read = Instant::now();
    let mut bar: Option<ProgressBar> = None;
    let report = spilled
        .finish(&mut |done, total| {
            if show_progress {
                bar.get_or_insert_with(|| ProgressBar::labelled(total, "assessing (2/2)"))
                    .update(done);
            }
        })
        .map_err(|e| format!("the spill files in {spill_dir}: {e}"))?;
    if let Some(b) = bar.as_mut() {
        b.finish();
    }
    Ok((report, read))
}
