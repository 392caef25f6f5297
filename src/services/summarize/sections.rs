//! The sections of a built-in summary: their public headings and order, the internal section
//! list (with "Earlier context"), and how long an item of each may be.

/// The section headings of a built-in summary, in order, so that checks and engines can find
/// them (an extra `## Earlier context` section may follow `## Goal`, and `## Done` may follow
/// `## Decisions`).
pub const SECTION_HEADINGS: [&str; 9] = [
    "Goal",
    "Decisions",
    "Open TODOs",
    "Constraints",
    "Pending user asks",
    "Exact identifiers",
    "Files read / modified",
    "Tool failures",
    "Latest unresolved request",
];

/// Internal sections: the nine public ones plus "Earlier context" for unsectioned old text and
/// "Done" for what the span did (commands run, files edited, answers given).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sec {
    Goal,
    Earlier,
    Decisions,
    Done,
    Todos,
    Constraints,
    Pending,
    Identifiers,
    Files,
    Failures,
    Latest,
}

/// How many internal sections there are.
pub(super) const NSEC: usize = 11;

/// The internal sections in rendering order.
pub(super) const SECS: [Sec; NSEC] = [
    Sec::Goal,
    Sec::Earlier,
    Sec::Decisions,
    Sec::Done,
    Sec::Todos,
    Sec::Constraints,
    Sec::Pending,
    Sec::Identifiers,
    Sec::Files,
    Sec::Failures,
    Sec::Latest,
];

const EARLIER_HEADING: &str = "Earlier context";
const DONE_HEADING: &str = "Done";

impl Sec {
    pub(super) fn idx(self) -> usize {
        self as usize
    }

    pub(super) fn heading(self) -> &'static str {
        match self {
            Sec::Goal => SECTION_HEADINGS[0],
            Sec::Earlier => EARLIER_HEADING,
            Sec::Decisions => SECTION_HEADINGS[1],
            Sec::Done => DONE_HEADING,
            Sec::Todos => SECTION_HEADINGS[2],
            Sec::Constraints => SECTION_HEADINGS[3],
            Sec::Pending => SECTION_HEADINGS[4],
            Sec::Identifiers => SECTION_HEADINGS[5],
            Sec::Files => SECTION_HEADINGS[6],
            Sec::Failures => SECTION_HEADINGS[7],
            Sec::Latest => SECTION_HEADINGS[8],
        }
    }

    /// The longest an item of this section may be; `None` for verbatim-only sections.
    pub(super) fn base_clip(self) -> Option<usize> {
        match self {
            Sec::Identifiers | Sec::Files => None,
            Sec::Goal | Sec::Earlier => Some(240),
            Sec::Decisions | Sec::Constraints => Some(180),
            Sec::Todos | Sec::Failures | Sec::Done => Some(160),
            Sec::Pending => Some(200),
            Sec::Latest => Some(400),
        }
    }

    /// The section a heading of a previous summary (ours or an LLM's) maps to.
    pub(super) fn from_heading(heading: &str) -> Option<Sec> {
        let h = heading
            .trim()
            .trim_matches(|c: char| c == '*' || c == ':')
            .to_lowercase();
        Some(match h.as_str() {
            "goal" | "goals" | "objective" | "task" => Sec::Goal,
            "earlier context" => Sec::Earlier,
            "decisions" | "key decisions" => Sec::Decisions,
            "done" | "progress" | "what was done" => Sec::Done,
            "open todos" | "todos" | "todo" | "next steps" => Sec::Todos,
            "constraints" | "constraints/rules" | "constraints & preferences" | "rules" => {
                Sec::Constraints
            }
            "pending user asks" => Sec::Pending,
            "exact identifiers" | "identifiers" => Sec::Identifiers,
            "files read / modified" | "files" => Sec::Files,
            "tool failures" => Sec::Failures,
            "latest unresolved request" | "latest unresolved user request" => Sec::Latest,
            _ => return None,
        })
    }
}
