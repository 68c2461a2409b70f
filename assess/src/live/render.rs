//! Showing what a partition keeps: events and counterexamples as the API and summaries render
//! them.

use super::spans::render;
use super::state::{Cx, Live};
use crate::event::Outcome;
use crate::finding::{Counterexample, EventView};
use crate::rules::{Rec, Resolve};
use crate::time::EventTime;

impl Live {
    /// A kept event as shown.
    pub(super) fn event_view(&self, e: &Rec) -> EventView {
        e.view(self)
    }

    /// A kept counterexample as shown.
    pub(super) fn render(&self, p: usize, cx: &Cx) -> Counterexample {
        let stale = self.event_view(&cx.stale);
        let superseding = match (&cx.witness, cx.mark) {
            (Some(w), _) => self.event_view(w),
            (None, Some(m)) => EventView {
                kind: "commit",
                ts: EventTime(m.first).to_string(),
                epoch: Some(m.epoch),
                incarnation: m.incarnation,
                order: None,
                route: None,
                holder: None,
                outcome: Outcome::Committed.as_str(),
                emitter: None,
                seq: None,
                source: "folded high-water mark".into(),
            },
            (None, None) => unreachable!("a counterexample has a witness or a mark"),
        };
        Counterexample {
            is_final: cx.is_final,
            withdrawn: cx.withdrawn,
            ..Counterexample::shown(
                cx.id.clone(),
                cx.kind,
                self.contract.properties[p].name.clone(),
                cx.scope.clone(),
                [stale, superseding],
                cx.context.iter().map(|e| self.event_view(e)).collect(),
                cx.stale.ts,
            )
        }
    }
}

impl Resolve for Live {
    fn resolve_name(&self, id: u32) -> Option<&str> {
        self.name(id)
    }

    fn resolve_source(&self, i: u32) -> &str {
        &self.state.sources[i as usize]
    }

    fn resolve_own(&self, n: u32) -> String {
        self.state
            .spans
            .get_with_source(n)
            .map(|(id, source)| render(&self.state.sources[source as usize], id))
            .unwrap_or_default()
    }
}
