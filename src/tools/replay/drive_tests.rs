use super::*;

fn texts(ms: &[Message]) -> Vec<String> {
    ms.iter().map(Message::text).collect()
}

#[test]
fn turns_taken_one_at_a_time_are_the_turns_split_at_once() {
    // Messages before the first user message are the preamble; each user message starts a
    // turn, and each assistant message in it a model step.
    let conversation = || {
        vec![
            Message::assistant("hello"),
            Message::user("u1"),
            Message::assistant("a1"),
            Message::assistant("a2"),
            Message::user("u2"),
            Message::user("u3"),
            Message::assistant("a3"),
        ]
    };
    let (preamble, mut turns) = recorded_turns(conversation());
    assert_eq!(texts(&preamble), ["hello"]);
    let first = turns.next().unwrap();
    assert_eq!(first.user.text(), "u1");
    assert_eq!(
        first.steps.iter().map(|s| texts(s)).collect::<Vec<_>>(),
        [["a1"]]
    );
    assert_eq!(texts(&first.last), ["a2"]);
    let second = turns.next().unwrap();
    assert_eq!((second.user.text(), second.steps.len()), ("u2".into(), 0));
    assert!(second.last.is_empty());
    let third = turns.next().unwrap();
    assert_eq!(texts(&third.last), ["a3"]);
    assert!(turns.next().is_none());

    let (all_preamble, all) = split_turns(conversation());
    assert_eq!(texts(&all_preamble), ["hello"]);
    let users: Vec<String> = all.iter().map(|t| t.user.text()).collect();
    assert_eq!(users, ["u1", "u2", "u3"]);

    let (preamble, mut turns) = recorded_turns(vec![Message::assistant("only")]);
    assert_eq!(texts(&preamble), ["only"]);
    assert!(turns.next().is_none());
}
