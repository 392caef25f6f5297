//! `info` deserialization: unknown enum values are errors.

use serde_json::json;

use super::*;

#[test]
fn enums_in_info_are_checked() {
    assert!(
        serde_json::from_value::<EngineInfo>(
            json!({"id":"a","name":"A","turnMaintenanceMode":"later"})
        )
        .is_err()
    );
    assert!(
        serde_json::from_value::<EngineInfo>(
            json!({"id":"a","name":"A","hostRequirements":{"agent-walk":{}}})
        )
        .is_err()
    );
}
