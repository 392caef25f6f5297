//! `prune` hooks chain: each sees the messages the one before it left (issue 22, item 3 of
//! the brief), and each call's report says what each prune hook removed or changed.

use std::sync::Arc;

use serde_json::json;

use ctxhost::runtime::Host;

use super::{assemblies, fixture, pipeline};
use crate::common;

#[test]
fn each_prune_hook_sees_what_the_one_before_it_left() {
    let config = pipeline(
        6_000,
        &[
            ("prune-a", fixture("prune_a.lua"), json!({})),
            ("prune-b", fixture("prune_b.lua"), json!({})),
        ],
    );
    let mut pruned_calls = 0;
    let mut cleared_seen = 0;
    for file in common::shared_transcripts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Arc::new(Host::new(config.clone()).expect("host"));
        let (calls, _) = common::block_on(assemblies(host, &file, dir.path()));
        for a in &calls {
            let report = &a.projection.as_ref().expect("a pipeline report")["pipeline"];
            let pruned = report["pruned"].as_array().expect("pruned");
            if pruned.is_empty() {
                continue;
            }
            pruned_calls += 1;
            assert_eq!(pruned[0]["hook"], "prune-a", "{report}");
            let changed = pruned[0]["changed"].as_u64().expect("changed");
            let addition = a.system_prompt_addition.as_deref().unwrap_or_default();
            let seen: u64 = addition
                .strip_prefix("prune-b saw ")
                .and_then(|r| r.strip_suffix(" cleared"))
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{}: prune-b's block: {addition:?}", file.display()));
            assert_eq!(
                seen,
                changed,
                "{}: prune-b must see every tool result prune-a cleared",
                file.display()
            );
            cleared_seen += seen;
        }
    }
    assert!(pruned_calls > 0, "no call was under token pressure");
    assert!(cleared_seen > 0, "no tool result was pruned");
}
