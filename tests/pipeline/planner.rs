//! The example compaction planner (`scripts/hooks/compaction_planner.{lua,rhai}`): in the
//! composed pipeline, every compaction is the planner's plan, and what the host persisted is
//! that plan: the stored summary carries the planner's own details, the span it counted is the
//! span the host summarized, and each call's report names the planner as the hook that
//! summarized it.

use std::sync::Arc;

use serde_json::Value as Json;

use ctxhost::runtime::Host;

use super::{assemblies, composed, pipeline, stored_summaries};
use crate::common;

#[test]
fn the_planner_hooks_plan_is_what_the_host_persisted() {
    for ext in ["lua", "rhai"] {
        let config = pipeline(6_000, &composed(ext));
        let mut persisted = 0;
        for file in common::shared_transcripts() {
            let dir = tempfile::tempdir().expect("tempdir");
            let host = Arc::new(Host::new(config.clone()).expect("host"));
            let (calls, _) = common::block_on(assemblies(host, &file, dir.path()));
            // Which hook summarized what, as each call's pipeline report says (with the
            // call's budget, the window the compaction before it was planned for).
            let reported: Vec<(Json, u64)> = calls
                .iter()
                .filter_map(|a| Some((a.projection.as_ref()?, a.token_budget)))
                .filter_map(|(p, budget)| Some((p["pipeline"]["compactions"].as_array()?, budget)))
                .flat_map(|(records, budget)| records.iter().map(move |r| (r.clone(), budget)))
                .collect();
            let stored = stored_summaries(&dir.path().join("s0.jsonl"));
            let at = format!("{} ({ext})", file.display());
            assert_eq!(
                reported.len(),
                stored.len(),
                "{at}: every stored summary is reported, once"
            );
            for ((r, budget), s) in reported.iter().zip(&stored) {
                assert_eq!(r["summarizedBy"], "compaction-planner", "{at}: {r}");
                let details = &s["details"];
                // The plan's own details are what the host stored with the summary...
                assert_eq!(details["planner"], "compaction-planner", "{at}: {s}");
                assert_eq!(
                    details["historyBudget"].as_f64(),
                    Some((budget / 2) as f64),
                    "{at}: maxHistoryShare 0.5 of the window: {s}"
                );
                // ...with the pipeline's record of who summarized what, as reported.
                assert_eq!(&details["pipeline"], r, "{at}");
                assert_eq!(s["firstKeptEntryId"], r["firstKeptEntryId"], "{at}");
                // The span the planner summarized is the span the host replaced.
                assert_eq!(
                    details["summarizedMessages"], r["summarizedMessages"],
                    "{at}: {s}"
                );
                assert!(
                    r["summarizedMessages"].as_u64().is_some_and(|n| n > 0),
                    "{at}: {r}"
                );
            }
            persisted += stored.len();
        }
        assert!(persisted > 0, "{ext}: the planner never compacted");
    }
}
