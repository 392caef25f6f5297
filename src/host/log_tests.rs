use super::*;

#[test]
fn log_text_is_cut_on_a_char_boundary_saying_how_much() {
    assert_eq!(cut_log_text("short".into(), 10), "short");
    // "€" is three bytes: a cap of 4 falls inside the second one.
    assert_eq!(cut_log_text("€€€".into(), 4), "€… (6 more bytes cut)");
    let cut = cut_log_text("€".repeat(30_000), LOG_CAP);
    assert!(cut.ends_with(&format!("… ({} more bytes cut)", 90_000 - 65_535)));
}
