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
