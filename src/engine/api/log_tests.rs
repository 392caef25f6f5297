use super::*;

#[test]
fn log_text_is_cut_on_a_char_boundary_saying_how_much() {
    assert_eq!(cut_log_text("short".into(), 10), "short");
    // "€" is three bytes: a cap of 4 falls inside the second one.
    assert_eq!(cut_log_text("€€€".into(), 4), "€… (6 more bytes cut)");
    let cut = cut_log_text("€".repeat(30_000), LOG_CAP);
    // The cap falls inside a character: the line keeps the whole characters before it.
    assert!(cut.ends_with(&format!("… ({} more bytes cut)", 90_000 - LOG_CAP / 3 * 3)));
}

#[test]
fn an_engine_logs_at_most_its_lines_per_second_and_hears_what_was_suppressed() {
    let start = Instant::now();
    let mut gate = LogGate::new(start);
    let passed = (0..1_000)
        .filter(|_| gate.admit(start) != Admission::Drop)
        .count();
    assert_eq!(passed, LOG_LINES_PER_SECOND as usize);
    // The next window's first line carries the count of the lines dropped before it.
    let later = start + Duration::from_millis(1_500);
    assert_eq!(
        gate.admit(later),
        Admission::Pass {
            suppressed: 1_000 - u64::from(LOG_LINES_PER_SECOND)
        }
    );
    assert_eq!(gate.admit(later), Admission::Pass { suppressed: 0 });
}

#[test]
fn a_call_logs_at_most_its_byte_budget_and_counts_the_rest() {
    let budget = CallLog::default();
    let line = LOG_CAP;
    let fit = LOG_BYTES_PER_CALL / line;
    assert!((0..fit).all(|_| budget.admit(line)));
    assert!(!budget.admit(line));
    assert!(!budget.admit(line));
    // A shorter line that still fits passes.
    assert!(budget.admit(LOG_BYTES_PER_CALL - fit * line));
    assert_eq!(budget.reset(), 2);
    assert!(
        budget.admit(line),
        "the next call starts with its whole budget"
    );
}
