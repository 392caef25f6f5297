//! Rendering a summary within its token budget: clip items, then drop parts in a fixed order
//! (detail first, the goal, the latest request and the focus last), then cut to a prefix.

use crate::services::tokens::TokenCounter;

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

/// Tighter clip levels, tried once everything but the goal, the latest request, the focus and
/// the identifiers within half the budget is gone, before any of those is dropped: a shorter
/// goal line leaves the span's identifiers room in a leaf of a hundred tokens.
const TIGHT_LEVELS: [Option<usize>; 2] = [Some(40), Some(28)];

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
        // At the tightest clip levels (a leaf of a hundred tokens), only how many.
        let terse = dropped.bare && level.is_some_and(|l| l <= TIGHT_LEVELS[0].unwrap_or(0));
        // Sections left out whole (tight budgets only), said once at the end.
        let mut left_out: Vec<(&str, usize)> = Vec::new();
        let goal: Vec<&String> = self.secs[Sec::Goal.idx()]
            .iter()
            .zip(&dropped.items[Sec::Goal.idx()])
            .filter(|(_, d)| !**d)
            .map(|(i, _)| i)
            .take(1)
            .collect();
        for sec in SECS {
            let items = &self.secs[sec.idx()];
            let gone = &dropped.items[sec.idx()];
            let kept: Vec<&String> = items
                .iter()
                .zip(gone)
                .filter(|(_, d)| !**d)
                .map(|(i, _)| i)
                .collect();
            // At the tightest clip levels the latest request is not said twice: when it is
            // the goal (the latest standing request usually is), the goal line carries it.
            if terse && sec == Sec::Latest && !kept.is_empty() && kept == goal {
                continue;
            }
            if dropped.bare && kept.is_empty() && !items.is_empty() {
                left_out.push((sec.heading(), items.len()));
                continue;
            }
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
        // A heading and a note for each section left out whole would cost more than many of
        // their items: one line names them all, with how many items each had.
        if terse && !left_out.is_empty() {
            let n: usize = left_out.iter().map(|(_, n)| n).sum();
            out.push_str(&format!("(+{n} more items omitted to fit the budget)\n"));
        } else if !left_out.is_empty() {
            let named: Vec<String> = left_out
                .iter()
                .map(|(heading, n)| format!("{heading} {n}"))
                .collect();
            out.push_str(&format!(
                "(+omitted to fit the budget: {})\n",
                named.join(", ")
            ));
        }
        out.truncate(out.trim_end().len());
        out
    }

    /// Parts in the order they are given up: identifiers beyond half the budget (lowest
    /// priority first), then file lists, then detail, then the other identifiers, and the
    /// goal, the latest request and the focus last. Also returns where the identifiers within
    /// half the budget start in that order: before they go, the goal and the latest request
    /// are clipped harder (`TIGHT_LEVELS`).
    fn drop_order(&self, max_tokens: u64, counter: &dyn TokenCounter) -> (Vec<Part>, usize) {
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
        let protected = order.len();
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
        (order, protected)
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
    /// drop parts in order (and let the survivors grow back if they then fit), clipping the
    /// goal and the latest request harder before the identifiers within half the budget go,
    /// then cut the bare skeleton to the longest prefix that fits.
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
        let tightest = TIGHT_LEVELS[TIGHT_LEVELS.len() - 1];
        let (order, protected) = self.drop_order(max_tokens, counter);
        // Without empty sections, nothing dropped yet.
        let bare = self.dropped_first(&order, 0);
        for level in CLIP_LEVELS {
            let text = self.render(level, &bare);
            if fits(&text) {
                return text;
            }
        }
        let all = self.render(tightest, &self.dropped_first(&order, order.len()));
        if !fits(&all) {
            return longest_fitting_prefix(&all, &fits);
        }
        // The fewest parts dropped (the first k of `order`) that fit at `level`, searched in
        // (lo, order.len()]; order.len() when nothing less fits (all dropped fits at the
        // tightest level, checked above, and the final choice below falls back to it).
        let fewest = |level: Option<usize>, lo: usize| -> usize {
            let (mut lo, mut hi) = (lo, order.len());
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if fits(&self.render(level, &self.dropped_first(&order, mid))) {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            hi
        };
        let mut k = fewest(level, 0);
        if k > protected {
            // The goal, the request or the identifiers within half the budget would go: a
            // tighter clip of the lines that are left may keep them all.
            k = k.min(fewest(tightest, protected.saturating_sub(1)));
        }
        // With parts dropped, the survivors may have room to be less clipped.
        let dropped = self.dropped_first(&order, k);
        CLIP_LEVELS
            .iter()
            .chain(&TIGHT_LEVELS)
            .map(|level| self.render(*level, &dropped))
            .find(|text| fits(text))
            .unwrap_or_else(|| self.render(tightest, &dropped))
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
