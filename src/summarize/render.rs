//! Rendering a summary within its token budget: clip items, then drop parts in a fixed order
//! (detail first, the goal, the latest request and the focus last), then cut to a prefix.

use crate::tokens::TokenCounter;

use super::extract::Extraction;
use super::sections::{NSEC, SECS, Sec};
use super::text::{clip, item};
use super::{IdentifierPolicy, SummaryRequest};

const FOCUS_CLIP: usize = 200;

/// The summary's content, ready to be rendered at some level of degradation.
#[derive(Debug)]
pub(super) struct Doc {
    focus: Option<String>,
    secs: [Vec<String>; NSEC],
}

/// Which parts are left out of a rendering.
#[derive(Clone, Debug)]
struct Dropped {
    focus: bool,
    /// Sections that never had an item are left out, headings and all (tight budgets only).
    bare: bool,
    items: [Vec<bool>; NSEC],
}

/// One droppable part, in the order parts are given up.
#[derive(Clone, Copy, Debug)]
enum Part {
    Focus,
    Item(Sec, usize),
}

/// Clip levels tried, in order, before any item is dropped.
const CLIP_LEVELS: [Option<usize>; 3] = [None, Some(120), Some(60)];

impl Doc {
    pub(super) fn new(ex: &Extraction, request: &SummaryRequest<'_>) -> Doc {
        let mut secs: [Vec<String>; NSEC] = std::array::from_fn(|i| ex.secs[i].items.clone());
        if request.identifier_policy == IdentifierPolicy::Strict {
            secs[Sec::Identifiers.idx()] = ex.ranked_identifiers();
        }
        let files = &mut secs[Sec::Files.idx()];
        files.extend(ex.modified.items.iter().map(|p| format!("modified: {p}")));
        files.extend(ex.read_only().iter().map(|p| format!("read: {p}")));
        Doc {
            focus: request
                .instructions
                .map(|f| item(f, FOCUS_CLIP))
                .filter(|f| !f.is_empty()),
            secs,
        }
    }

    fn none_dropped(&self) -> Dropped {
        Dropped {
            focus: false,
            bare: false,
            items: std::array::from_fn(|i| vec![false; self.secs[i].len()]),
        }
    }

    fn render(&self, level: Option<usize>, dropped: &Dropped) -> String {
        let limit = |base: Option<usize>| match (base, level) {
            (Some(b), Some(l)) => Some(b.min(l)),
            (b, _) => b,
        };
        let mut out = String::new();
        if let Some(focus) = &self.focus
            && !dropped.focus
        {
            out.push_str("Focus: ");
            out.push_str(&clip(focus, limit(Some(FOCUS_CLIP)).unwrap_or(FOCUS_CLIP)));
            out.push_str("\n\n");
        }
        for sec in SECS {
            let items = &self.secs[sec.idx()];
            let gone = &dropped.items[sec.idx()];
            let kept: Vec<&String> = items
                .iter()
                .zip(gone)
                .filter(|(_, d)| !**d)
                .map(|(i, _)| i)
                .collect();
            if kept.is_empty()
                && (matches!(sec, Sec::Earlier | Sec::Done) || (dropped.bare && items.is_empty()))
            {
                continue;
            }
            out.push_str("## ");
            out.push_str(sec.heading());
            out.push('\n');
            for text in kept {
                out.push_str("- ");
                match limit(sec.base_clip()) {
                    Some(max) => out.push_str(&clip(text, max)),
                    None => out.push_str(text),
                }
                out.push('\n');
            }
            // A shortened section says what it left out.
            let omitted = gone.iter().filter(|d| **d).count();
            if omitted > 0 {
                let what = match sec {
                    Sec::Identifiers => "identifiers",
                    Sec::Files => "files",
                    _ => "items",
                };
                out.push_str(&format!(
                    "(+{omitted} more {what} omitted to fit the budget)\n"
                ));
            }
            out.push('\n');
        }
        out.truncate(out.trim_end().len());
        out
    }

    /// Parts in the order they are given up: identifiers beyond half the budget (lowest
    /// priority first), then file lists, then detail, then the other identifiers, and the
    /// goal, the latest request and the focus last.
    fn drop_order(&self, max_tokens: u64, counter: &dyn TokenCounter) -> Vec<Part> {
        let mut order = Vec::new();
        let len = |s: Sec| self.secs[s.idx()].len();
        // Identifiers may fill half the summary before the thread (decisions, what was done
        // and failed, next steps) gives way to them.
        let ids = &self.secs[Sec::Identifiers.idx()];
        let mut used = 0u64;
        let mut within = ids.len();
        for (i, id) in ids.iter().enumerate() {
            used += counter.count_text(id) + 1;
            if used > max_tokens / 2 {
                within = i;
                break;
            }
        }
        (within..ids.len())
            .rev()
            .for_each(|i| order.push(Part::Item(Sec::Identifiers, i)));
        let oldest_first = |s: Sec, order: &mut Vec<Part>| {
            (0..len(s)).for_each(|i| order.push(Part::Item(s, i)));
        };
        let newest_first = |s: Sec, from: usize, order: &mut Vec<Part>| {
            (from..len(s))
                .rev()
                .for_each(|i| order.push(Part::Item(s, i)));
        };
        // Files read go first (they are listed after the modified ones), before the thread.
        newest_first(Sec::Files, 0, &mut order);
        oldest_first(Sec::Done, &mut order);
        oldest_first(Sec::Decisions, &mut order);
        oldest_first(Sec::Todos, &mut order);
        oldest_first(Sec::Failures, &mut order);
        newest_first(Sec::Earlier, 0, &mut order);
        oldest_first(Sec::Pending, &mut order);
        newest_first(Sec::Constraints, 0, &mut order);
        newest_first(Sec::Goal, 1, &mut order);
        (0..within)
            .rev()
            .for_each(|i| order.push(Part::Item(Sec::Identifiers, i)));
        oldest_first(Sec::Latest, &mut order);
        if len(Sec::Goal) > 0 {
            order.push(Part::Item(Sec::Goal, 0));
        }
        if self.focus.is_some() {
            order.push(Part::Focus);
        }
        order
    }

    fn dropped_first(&self, order: &[Part], k: usize) -> Dropped {
        let mut dropped = self.none_dropped();
        dropped.bare = true;
        for part in &order[..k] {
            match *part {
                Part::Focus => dropped.focus = true,
                Part::Item(sec, i) => dropped.items[sec.idx()][i] = true,
            }
        }
        dropped
    }

    /// The best rendering within `max_tokens`: trim items, then leave out empty sections and
    /// drop parts in order (and let the survivors grow back if they then fit), then cut the
    /// bare skeleton to the longest prefix that fits.
    pub(super) fn fit(&self, max_tokens: u64, counter: &dyn TokenCounter) -> String {
        let fits = |text: &str| counter.count_text(text) <= max_tokens;
        let none = self.none_dropped();
        for level in CLIP_LEVELS {
            let text = self.render(level, &none);
            if fits(&text) {
                return text;
            }
        }
        let level = CLIP_LEVELS[CLIP_LEVELS.len() - 1];
        let order = self.drop_order(max_tokens, counter);
        // Without empty sections, nothing dropped yet.
        let bare = self.dropped_first(&order, 0);
        for level in CLIP_LEVELS {
            let text = self.render(level, &bare);
            if fits(&text) {
                return text;
            }
        }
        let all = self.render(level, &self.dropped_first(&order, order.len()));
        if !fits(&all) {
            return longest_fitting_prefix(&all, &fits);
        }
        // fits(hi) always holds; lo never fits (k = 0 was tried above).
        let (mut lo, mut hi) = (0, order.len());
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if fits(&self.render(level, &self.dropped_first(&order, mid))) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        // With parts dropped, the survivors may have room to be less clipped.
        let dropped = self.dropped_first(&order, hi);
        CLIP_LEVELS
            .iter()
            .map(|level| self.render(*level, &dropped))
            .find(|text| fits(text))
            .unwrap_or_else(|| self.render(level, &dropped))
    }
}

/// The longest prefix of `text` (on a character boundary) that `fits`, possibly empty.
fn longest_fitting_prefix(text: &str, fits: &impl Fn(&str) -> bool) -> String {
    let bounds: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain(std::iter::once(text.len()))
        .collect();
    // fits(bounds[lo]) holds (the empty prefix); find the largest such index.
    let (mut lo, mut hi) = (0, bounds.len());
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(&text[..bounds[mid]]) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let prefix = &text[..bounds[lo]];
    let trimmed = prefix.trim_end();
    if fits(trimmed) { trimmed } else { prefix }.to_string()
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
