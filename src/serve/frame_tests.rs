use super::*;

#[test]
fn a_lone_surrogate_is_read_as_the_replacement_character_and_a_pair_is_kept() {
    let line = br#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":"cut \ud83d here","b":"\ud83d\ude00","c":"\ude00"}}"#;
    let (frame, repairs) = decode(line);
    assert_eq!(repairs.surrogates, 2);
    let Incoming::Request { params, .. } = frame else {
        panic!("{frame:?}")
    };
    assert_eq!(params["a"], "cut \u{fffd} here");
    assert_eq!(params["b"], "\u{1f600}");
    assert_eq!(params["c"], "\u{fffd}");
}

#[test]
fn a_frame_nested_past_the_parsers_limit_is_cut_with_a_note() {
    let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
    let line =
        format!(r#"{{"jsonrpc":"2.0","id":"x","method":"m","params":{{"d":{deep},"s":"[{{"}}}}"#);
    let (frame, repairs) = decode(line.as_bytes());
    assert_eq!(repairs.cut, 1);
    let Incoming::Request { id, params, .. } = frame else {
        panic!("{frame:?}")
    };
    assert_eq!(id, Id::Text("x".into()));
    assert_eq!(params["s"], "[{", "brackets inside strings do not count");
    let mut v = &params["d"];
    let mut levels = 0;
    while let Value::Array(a) = v {
        v = &a[0];
        levels += 1;
    }
    assert_eq!(v, CUT_NOTE);
    assert_eq!(
        levels + 2,
        CUT_DEPTH,
        "frame and params are the first two levels"
    );
}

#[test]
fn ids_are_read_before_anything_else_is_judged() {
    let (frame, _) = decode(br#"{"jsonrpc":"2.0","id":132,"method":5}"#);
    let Incoming::Invalid { id, error } = frame else {
        panic!("{frame:?}")
    };
    assert_eq!(id, Some(Id::Number(132.into())));
    assert_eq!(error.code, code::INVALID_REQUEST);
    let (frame, _) = decode(br#"["2.0", 110, "info"]"#);
    assert!(
        matches!(&frame, Incoming::Invalid { id: None, error } if error.code == code::INVALID_REQUEST),
        "{frame:?}"
    );
    let (frame, _) = decode(br#"{"jsonrpc":"2.0","method":5}"#);
    assert!(matches!(frame, Incoming::Dropped(_)), "{frame:?}");
}
