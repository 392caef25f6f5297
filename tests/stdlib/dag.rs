//! The `dag` stdlib module (`stdlib/dag.{lua,rhai}`), the summary DAG that `hierarchical` and
//! `recall` share, through the probe engines: Lua and Rhai report the same, leaves and folds
//! cover the condensed messages once and in order, depths stay bounded, the summaries fit
//! their share, and an assembly keeps its budget and its request.

use super::*;

/// One summary node of a probe report: level, depth, message count, id range, tokens.
#[derive(Debug)]
struct Node {
    level: u64,
    depth: u64,
    count: usize,
    first: String,
    last: String,
    tokens: u64,
}

fn nodes(j: &Json) -> Vec<Node> {
    strings(j)
        .iter()
        .map(|s| {
            let f: Vec<&str> = s.split(':').collect();
            assert_eq!(f.len(), 6, "a node: {s}");
            Node {
                level: f[0].parse().expect("level"),
                depth: f[1].parse().expect("depth"),
                count: f[2].parse().expect("count"),
                first: f[3].to_owned(),
                last: f[4].to_owned(),
                tokens: f[5].parse().expect("tokens"),
            }
        })
        .collect()
}

/// The nodes, oldest first, cover `s[..upto]` exactly once and in order, each at its own
/// depth, none deeper than `max_depth`, none larger than its size.
fn covers(s: &[Arc<Message>], list: &[Node], upto: usize, max_depth: u64, leaf: u64, fold: u64) {
    let mut at = 0;
    for n in list {
        assert_eq!(n.level, n.depth, "a node sits at its own depth: {n:?}");
        assert!(n.depth <= max_depth, "deeper than maxDepth: {n:?}");
        assert!(n.count > 0, "an empty node: {n:?}");
        assert_eq!(n.first, s[at].id, "nodes out of order: {n:?}");
        at += n.count;
        assert_eq!(n.last, s[at - 1].id, "a node's range: {n:?}");
        let size = if n.depth == 0 { leaf } else { fold };
        assert!(
            n.tokens <= size,
            "a node larger than its size {size}: {n:?}"
        );
    }
    assert_eq!(at, upto, "the nodes cover every condensed message once");
}

#[test]
fn dag_condenses_in_order_folds_to_a_bounded_depth_and_fits_its_share() {
    // The last turn has no tool call, so nothing of it needs squeezing.
    let s = sessions::messages(&sessions::session(31));
    let tail_at = s.iter().rposition(|m| m.starts_turn()).expect("a request");
    let keep = s.len() - tail_at;
    let cases = [
        (3_000u64, json!({})),
        (
            3_000,
            json!({"fanout": 2, "maxDepth": 1, "summaryShare": 0.1}),
        ),
        (8_000, json!({"leafChunkTokens": 300, "leafTokens": 64})),
    ];
    for (budget, config) in cases {
        let r = probe(
            &s,
            json!({"op": "dag", "budget": budget, "config": config, "keep": keep, "boundTo": 40}),
        );
        let d = &r.data;
        let set = &d["settings"];
        let get = |k: &str| set[k].as_u64().unwrap_or_else(|| panic!("{k} in {set}"));
        if config == json!({}) {
            assert_eq!(
                *set,
                json!({"freshTailMessages": 8, "fanout": 4, "maxDepth": 3, "chunk": 750,
                       "leaf": 187, "condensed": 300, "cap": 750, "reserve": 0}),
                "the defaults at 3,000 tokens"
            );
        }
        let (max_depth, leaf, fold, cap) =
            (get("maxDepth"), get("leaf"), get("condensed"), get("cap"));
        for (first, last) in host_groups(&s) {
            assert_eq!(
                d["groupEnd"][first],
                json!(last + 1),
                "group_end at {first}"
            );
        }
        assert_eq!(d["sameState"], json!(true));

        // Condensed: every message before the tail in exactly one node, leaves folded as
        // they piled up.
        let condensed = nodes(&d["condensed"]);
        assert!(condensed.len() > 1, "{budget} {config}: {condensed:?}");
        covers(&s, &condensed, tail_at, max_depth, leaf, fold);
        assert_eq!(d["through"], json!(s[tail_at - 1].id));
        assert_eq!(d["throughAt"], json!(tail_at), "1-based in both languages");
        assert!(
            condensed.iter().any(|n| n.depth > 0),
            "{budget} {config}: leaves fold"
        );

        // Relieved: still in order, fewer than `fanout` per level, within the share.
        let relieved = nodes(&d["relieved"]);
        covers(&s, &relieved, tail_at, max_depth, leaf, fold);
        for level in 0..=max_depth {
            let at = relieved.iter().filter(|n| n.level == level).count() as u64;
            assert!(at < get("fanout"), "level {level} holds {at}");
        }
        let render = d["render"].as_str().expect("render");
        assert!(render.starts_with(&format!(
            "Condensed history: {tail_at} earlier messages are condensed into {} summaries",
            relieved.len()
        )));
        assert!(
            Estimate.count_text(render) <= cap || relieved.len() == 1,
            "{budget} {config}: the summaries fit their share"
        );
        let bounded = d["bounded"].as_str().expect("bounded");
        assert!(Estimate.count_text(bounded) <= 40 && !bounded.is_empty());

        // A whole assembly: within budget, the request sent, groups whole, the summaries as
        // the addition covering everything before what is sent verbatim.
        assert!(r.tokens <= budget, "{budget} {config}: {} tokens", r.tokens);
        let pos = groups_whole(&s, &r.messages);
        assert_eq!(d["request"], json!(tail_at + 1));
        assert!(pos.contains(&tail_at), "the request is sent");
        let start = d["start"].as_u64().expect("start") as usize;
        assert_eq!(pos.first(), Some(&(start - 1)), "verbatim from start");
        let addition = d["addition"].as_str().expect("addition");
        assert_eq!(
            r.tokens,
            d["used"].as_u64().expect("used") + Estimate.count_text(addition)
        );
        covers(
            &s,
            &nodes(&d["assembled"]),
            start - 1,
            max_depth,
            leaf,
            fold,
        );

        // Compaction: the summaries, and the session kept from the fresh tail on.
        let c = &d["compact"];
        assert_eq!(c["compacted"], json!(true), "{c}");
        let summary = c["result"]["summary"].as_str().expect("summary");
        assert!(summary.starts_with("Condensed history: "));
        assert!(Estimate.count_text(summary) <= cap);
        let kept = c["result"]["firstKeptEntryId"].as_str().expect("kept");
        let kept_at = s.iter().position(|m| m.id == kept).expect("a session id");
        assert!(kept_at >= start - 1 && kept_at <= tail_at);
        assert_eq!(d["ownCompaction"], json!(true));
    }
}

#[test]
fn dag_on_a_short_session_condenses_nothing_and_keeps_everything() {
    let s = sessions::messages(&sessions::session(2));
    let r = probe(
        &s,
        json!({"op": "dag", "budget": 8_000, "config": {}, "keep": s.len(), "boundTo": 40}),
    );
    let d = &r.data;
    assert_eq!(nodes(&d["condensed"]).len(), 0);
    assert_eq!(d["render"], json!(""));
    assert_eq!(d["bounded"], json!(""));
    assert_eq!(d["addition"], json!(""));
    assert_eq!(positions(&s, &r.messages), (0..s.len()).collect::<Vec<_>>());
    assert_eq!(r.tokens, tokens(&s));
    assert_eq!(d["compact"]["compacted"], json!(false));
    assert_eq!(d["ownCompaction"], json!(false));
}
