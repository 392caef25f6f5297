//! Counts from scripts: whole doubles accepted, everything else rejected.

use serde_json::json;

use super::*;

#[test]
fn counts_accept_whole_doubles_and_reject_the_rest() {
    assert_eq!(to_count(3.0), Ok(3));
    assert!(to_count(f64::NAN).is_err());
    assert!(to_count(f64::INFINITY).is_err());
    assert!(to_count(-1.0).is_err());
    assert!(to_count(1.5).is_err());
    let r: IngestBatchResult = serde_json::from_value(json!({"ingestedCount": 4.0})).unwrap();
    assert_eq!(r.ingested_count, 4);
    assert!(serde_json::from_value::<IngestBatchResult>(json!({"ingestedCount": 1.5})).is_err());
}
