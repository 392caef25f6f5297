use std::sync::Arc;

use super::*;

fn stored(id: &str, m: Message) -> Arc<Message> {
    let mut m = m;
    m.id = id.into();
    Arc::new(m)
}

fn index() -> RecallIndex {
    let index = RecallIndex::default();
    index.add(&[
        stored("1", Message::user("please look at src/foo.rs, it panics")),
        stored(
            "2",
            Message::assistant("the order for mia_li_3668 is #W2378156"),
        ),
        stored(
            "3",
            Message::user("and what about foo in general? foo foo foo"),
        ),
        stored("4", Message::assistant("ERR_X came back from the gateway")),
    ]);
    index
}

#[test]
fn a_whole_identifier_outranks_its_parts() {
    let hits = index().search("src/foo.rs", &SearchFilter::default(), 5);
    assert_eq!(hits[0].id, "1");
    assert_eq!(hits[0].matched, ["src/foo.rs", "src", "foo", "rs"]);
    assert_eq!(hits[0].position, 1);
    // The part alone still matches both messages that say `foo`.
    let ids: Vec<String> = index()
        .search("foo", &SearchFilter::default(), 5)
        .into_iter()
        .map(|h| h.id)
        .collect();
    assert_eq!(ids.len(), 2);
}

#[test]
fn record_ids_issues_and_error_codes_are_found_whole_and_by_part() {
    let idx = index();
    let f = SearchFilter::default();
    assert_eq!(idx.search("mia_li_3668", &f, 5)[0].id, "2");
    assert_eq!(idx.search("3668", &f, 5)[0].id, "2");
    assert_eq!(idx.search("#w2378156", &f, 5)[0].id, "2");
    assert_eq!(idx.search("err_x", &f, 5)[0].id, "4");
    assert!(idx.search("the and of", &f, 5).is_empty());
}

#[test]
fn filters_limit_roles_and_before() {
    let idx = index();
    let roles = SearchFilter {
        roles: vec![Role::Assistant],
        before: None,
    };
    assert!(idx.search("src/foo.rs", &roles, 5).is_empty());
    let before = SearchFilter {
        roles: Vec::new(),
        before: Some("3".into()),
    };
    let hits = idx.search("foo", &before, 5);
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].id, "1");
    assert_eq!(idx.search("foo", &SearchFilter::default(), 1).len(), 1);
    let unknown = SearchFilter {
        roles: Vec::new(),
        before: Some("nope".into()),
    };
    assert_eq!(
        idx.try_search("foo", &unknown, 5),
        Err(SearchError::UnknownBefore("nope".into()))
    );
}

#[test]
fn appends_are_searchable_at_once_and_fetch_keeps_the_asked_order() {
    let idx = index();
    assert!(
        idx.search("kubernetes", &SearchFilter::default(), 5)
            .is_empty()
    );
    idx.add(&[stored("5", Message::user("deploy to kubernetes now"))]);
    assert_eq!(
        idx.search("kubernetes", &SearchFilter::default(), 5)[0].id,
        "5"
    );
    let got: Vec<String> = idx
        .fetch(&["4", "missing", "1"])
        .iter()
        .map(|m| m.id.clone())
        .collect();
    assert_eq!(got, ["4", "1"]);
    assert_eq!(idx.len(), 5);
}

/// `terms` as it was before it stopped allocating a string per term: the oracle the index's
/// terms must equal.
fn terms_oracle(text: &str) -> Vec<String> {
    fn joins(c: char) -> bool {
        matches!(c, '_' | '.' | '/' | ':' | '-' | '@' | '~' | '+' | '#')
    }
    const STOPWORDS: &[&str] = &[
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "do", "for", "from", "has", "have",
        "he", "i", "if", "in", "is", "it", "its", "me", "my", "no", "not", "of", "on", "or", "so",
        "that", "the", "then", "there", "this", "to", "was", "we", "what", "with", "you",
    ];
    let mut out = Vec::new();
    for run in text.split(|c: char| !(c.is_alphanumeric() || joins(c))) {
        let body = run.trim_start_matches(joins).trim_end_matches(joins);
        if body.is_empty() {
            continue;
        }
        let lead = &run[..run.len() - run.trim_start_matches(joins).len()];
        let hashed = lead.ends_with('#');
        let parts: Vec<&str> = body
            .split(|c: char| !c.is_alphanumeric())
            .filter(|p| !p.is_empty())
            .collect();
        if parts.len() > 1 || hashed {
            let whole = if hashed {
                format!("#{}", body.to_lowercase())
            } else {
                body.to_lowercase()
            };
            if whole.len() <= 96 {
                out.push(whole);
            }
        }
        for part in parts {
            let part = part.to_lowercase();
            let single_letter = part.chars().count() == 1 && !part.chars().all(|c| c.is_numeric());
            if single_letter || part.len() > 96 || STOPWORDS.contains(&part.as_str()) {
                continue;
            }
            out.push(part);
        }
    }
    out
}

/// Every line of every shared transcript (non-ASCII, long runs, `#` ids and all) is cut into
/// the same terms as before.
#[test]
fn terms_are_what_they_were_on_every_shared_transcript() {
    let shared = match std::env::var_os("CTXHOST_SHARED") {
        Some(p) => std::path::PathBuf::from(p),
        None => std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"),
    };
    let mut lines = 0;
    for entry in std::fs::read_dir(shared.join("data/transcripts")).unwrap() {
        let raw = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for line in raw.lines() {
            assert_eq!(terms(line), terms_oracle(line), "{line}");
            lines += 1;
        }
    }
    assert!(lines > 1_000);
    let odd = "İstanbul #12 ÉTÉ_x Straße ß#a A/B/c.rs a a a";
    assert_eq!(terms(odd), terms_oracle(odd));
}

// The module docs' example, moved here when the module became crate-private.
#[test]
fn the_module_example_finds_a_file_name() {
    let index = RecallIndex::default();
    let mut a = Message::user("the crash is in src/session/turn.rs, see #123");
    a.id = "00000001".into();
    let mut b = Message::user("lunch at noon?");
    b.id = "00000002".into();
    index.add(&[Arc::new(a), Arc::new(b)]);
    let hits = index.search("what did turn.rs do", &SearchFilter::default(), 5);
    assert_eq!(hits[0].id, "00000001");
    assert!(index.search("#123", &SearchFilter::default(), 5).len() == 1);
}

// The doc example of `terms`, moved here when the module became crate-private.
#[test]
fn terms_cut_identifiers_into_their_parts() {
    assert_eq!(
        terms("See src/foo.rs"),
        ["see", "src/foo.rs", "src", "foo", "rs"]
    );
    assert_eq!(
        terms("mia_li_3668 and #123!"),
        ["mia_li_3668", "mia", "li", "3668", "#123", "123"]
    );
    assert_eq!(terms("ERR_X."), ["err_x", "err"]);
}

#[test]
fn postings_hold_far_documents_and_many_occurrences_exactly() {
    // Gaps between documents of 1, 200 (two bytes) and 20,000 (three), and a term said 300
    // times in one message: each must come back as it went in.
    let index = RecallIndex::default();
    let mut batch = Vec::new();
    for i in 0..20_402u32 {
        let text = match i {
            0 | 1 | 201 => "zebra crossing".to_owned(),
            20_201 => "zebra ".repeat(300),
            _ => format!("filler {i}"),
        };
        batch.push(stored(&i.to_string(), Message::user(text)));
    }
    index.add(&batch);
    let hits = index.search("zebra", &SearchFilter::default(), 10);
    let mut positions: Vec<usize> = hits.iter().map(|h| h.position).collect();
    positions.sort_unstable();
    assert_eq!(positions, [1, 2, 202, 20_202]);
    // The 300-times message ranks first; the three others tie and come newest first.
    assert_eq!(hits[0].position, 20_202);
    assert_eq!(hits[1].position, 202);
    // `before` still cuts the list where it should.
    let filter = SearchFilter {
        before: Some("201".into()),
        ..SearchFilter::default()
    };
    let early: Vec<usize> = index
        .search("zebra", &filter, 10)
        .iter()
        .map(|h| h.position)
        .collect();
    assert_eq!(early, [2, 1]);
}

#[test]
fn varints_round_trip_at_their_byte_boundaries() {
    // Distances between documents and occurrence counts at each LEB128 length's edges (1, 2,
    // 3 and 5 bytes).
    let edges = [0u32, 127, 128, 16_383, 16_384, 2_097_151, 2_097_152];
    let mut want = Vec::new();
    let mut doc = 0u32;
    for (k, &gap) in edges.iter().enumerate() {
        doc += gap;
        want.push((doc, edges[edges.len() - 1 - k].max(1)));
    }
    want.push((u32::MAX, u32::MAX));
    let mut p = Postings::default();
    for &(d, n) in &want {
        p.push(d, n);
    }
    assert_eq!(p.iter().collect::<Vec<_>>(), want);
    assert_eq!(p.len as usize, want.len());
}

#[test]
fn a_pair_seen_once_a_few_documents_on_takes_one_byte() {
    let mut p = Postings::default();
    for doc in [5u32, 6, 69] {
        p.push(doc, 1);
    }
    assert_eq!(p.bytes.len(), 3);
    // More than one occurrence, or a gap of 64 documents or more: one byte more each.
    p.push(70, 2);
    p.push(134, 1);
    assert_eq!(p.bytes.len(), 7);
    assert_eq!(
        p.iter().collect::<Vec<_>>(),
        [(5, 1), (6, 1), (69, 1), (70, 2), (134, 1)]
    );
}

/// A compaction summary of `words` repeated (long enough to be packed).
fn long_summary(id: &str, words: &str) -> Arc<Message> {
    let summary = format!("{words} ").repeat(200);
    let mut m = crate::services::compaction::summary_message(&summary, 9000, Some(900), "k1");
    if let MessageBody::CompactionSummary(s) = &mut m.body {
        s.extra
            .insert("details".into(), serde_json::json!({"readFiles": ["a.rs"]}));
    }
    stored(id, m)
}

fn packed(index: &RecallIndex, doc: usize) -> bool {
    matches!(index.inner.lock().messages[doc], Held::Packed(_))
}

#[test]
fn a_summary_nothing_else_holds_is_packed_and_reads_back_the_same() {
    let index = RecallIndex::default();
    let first = long_summary("s1", "the parser rejects nested tables in src/toml.rs");
    let expected = (*first).clone();
    // The token cache keeps a weak reference to every message it counted.
    let counted = Arc::downgrade(&first);
    index.add(&[first]);
    index.add(&[stored("u1", Message::user("and now?"))]);
    assert!(packed(&index, 0));
    assert!(counted.upgrade().is_none());
    let fetched = index.fetch(&["s1"]);
    assert_eq!(fetched.len(), 1);
    assert_eq!(*fetched[0], expected);
    assert_eq!(
        serde_json::to_string(&*fetched[0]).unwrap(),
        serde_json::to_string(&expected).unwrap()
    );
    assert_eq!(*index.since(0)[0], expected);
    let hits = index.search("src/toml.rs", &SearchFilter::default(), 5);
    assert_eq!(hits[0].id, "s1");
    assert_eq!(hits[0].role, Role::CompactionSummary);
    let filter = SearchFilter {
        roles: vec![Role::CompactionSummary],
        before: None,
    };
    assert_eq!(index.search("parser", &filter, 5).len(), 1);
}

#[test]
fn a_summary_the_session_still_holds_stays_whole_until_it_lets_go() {
    let index = RecallIndex::default();
    let context = long_summary("s1", "the deploy failed on ERR_QUOTA");
    index.add(&[Arc::clone(&context)]);
    index.add(&[stored("u1", Message::user("next"))]);
    assert!(!packed(&index, 0));
    assert!(Arc::ptr_eq(&index.fetch(&["s1"])[0], &context));
    let expected = (*context).clone();
    drop(context);
    index.add(&[long_summary("s2", "the deploy works again")]);
    assert!(packed(&index, 0));
    assert!(!packed(&index, 2), "the newest summary is only just added");
    assert_eq!(*index.fetch(&["s1"])[0], expected);
}

#[test]
fn short_messages_are_never_packed() {
    let index = RecallIndex::default();
    let m = crate::services::compaction::summary_message("short", 10, None, "k");
    index.add(&[stored("s1", m), stored("u1", Message::user("x"))]);
    assert!(!packed(&index, 0));
    assert!(!packed(&index, 1));
}
