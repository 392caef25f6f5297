use super::*;

#[test]
fn log_text_is_cut_on_a_char_boundary_saying_how_much() {
    assert_eq!(cut_log_text("short".into(), 10), "short");
    // "€" is three bytes: a cap of 4 falls inside the second one.
    assert_eq!(cut_log_text("€€€".into(), 4), "€… (6 more bytes cut)");
    let cut = cut_log_text("€".repeat(30_000), LOG_CAP);
    assert!(cut.ends_with(&format!("… ({} more bytes cut)", 90_000 - 65_535)));
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
