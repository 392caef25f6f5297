//! `check --transcript FILE`: the engine over a real conversation (any format `replay` reads)
//! instead of the synthetic one, driven as `replay` drives it ([`crate::tools::replay::drive_turn`]); every model call is judged like the synthetic
//! session's, and a failure names the conversation, the turn and the model call.

use std::path::Path;

use crate::session::Session;
use crate::tools::replay::{TurnFault, drive_turn, split_turns};

use super::{CheckReport, judge_call};

/// Drives the transcript's first conversation through `session` (one session holds one
/// conversation; a file with several is checked on its first, and says so).
pub(super) fn drive(session: &mut Session, path: &Path, report: &mut CheckReport) -> bool {
    let import = match crate::transcript::import(path) {
        Ok(i) => i,
        Err(e) => return report.failed("read the transcript".into(), e.to_string()),
    };
    let total = import.sessions.len();
    let Some(source) = import.sessions.into_iter().next() else {
        return report.failed(
            "read the transcript".into(),
            format!("{}: no conversation in the file", path.display()),
        );
    };
    let name = source.name.clone();
    let (preamble, turns) = split_turns(source.messages);
    let turn_count = turns.len();
    report.pass(
        "read the transcript",
        format!(
            "{} ({}), conversation \"{name}\"{}: {turn_count} turns",
            path.display(),
            import.format.name(),
            if total > 1 {
                format!(" (the first of {total})")
            } else {
                String::new()
            }
        ),
    );
    if let Err(e) = session.record(preamble) {
        return report.failed(
            format!("conversation \"{name}\", before turn 1"),
            e.to_string(),
        );
    }
    let (mut calls, mut largest, mut compactions) = (0u64, 0u64, 0u32);
    for (n, recorded) in turns.into_iter().enumerate() {
        let turn = n + 1;
        let place = |call| format!("conversation \"{name}\", turn {turn}, model call {call}");
        let driven = drive_turn(session, recorded, |_, _, a| {
            judge_call(a)?;
            calls += 1;
            largest = largest.max(a.assembled_tokens);
            Ok(())
        });
        match driven {
            Ok(d) => {
                report.slowest_turn_ms = report.slowest_turn_ms.max(d.stats.engine_ms);
                compactions += d.stats.compactions;
            }
            Err(TurnFault::Compact(e)) => {
                return report.failed(
                    format!("conversation \"{name}\", turn {turn}, /compact"),
                    e.to_string(),
                );
            }
            Err(TurnFault::Call { call, error }) => {
                return report.failed(place(call), error.to_string());
            }
            Err(TurnFault::Rejected { call, reason }) => return report.failed(place(call), reason),
            Err(TurnFault::End { calls, error }) => {
                return report.failed(
                    format!("conversation \"{name}\", turn {turn}, after model call {calls}"),
                    error.to_string(),
                );
            }
        }
    }
    report.pass(
        &format!("every model call of conversation \"{name}\""),
        format!(
            "{turn_count} turns, {calls} model calls, {compactions} compactions, largest call {largest} of {} tokens",
            session.token_budget()
        ),
    );
    match session.close() {
        Ok(()) => report.pass("save state and dispose", String::new()),
        Err(e) => return report.failed("save state and dispose".into(), e.to_string()),
    }
    true
}
