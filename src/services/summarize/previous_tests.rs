//! Folding previous summaries in: ours over three generations, and unsectioned or LLM-style text.

use serde_json::json;

use crate::services::summarize::test_support::{call, result, run, say, section, user};

#[test]
fn a_previous_summary_is_folded_through_three_generations() {
    let first = [
        user(
            "Port the user-message selector to the new theme system in packages/tui/src/selector.ts.",
        ),
        call("a", "read", json!({"path":"packages/tui/src/theme.ts"})),
        result(
            "a",
            "read",
            "export const theme = load('7f3e2d1c9b');",
            false,
        ),
        say("I'll mirror the oauth selector because the theme API is the same."),
    ];
    let second = [
        user("Now also fix the flaky test at https://ci.example.com/run/991."),
        say("Fixed."),
    ];
    let third = [user("Ship it to 10.0.0.9 please."), say("Shipped.")];

    let one = run(&first, None, 2_000);
    let two = run(&second, Some(&one.text), 2_000);
    let three = run(&third, Some(&two.text), 2_000);
    let goal = section(&three.text, "Goal");
    // The latest standing request leads; the earlier ones follow, newest first.
    assert_eq!(goal[0], "Ship it to 10.0.0.9 please.", "{}", three.text);
    assert!(goal[1].starts_with("Earlier goal: Now also fix the flaky test"));
    assert!(goal[2].starts_with("Earlier goal: Port the user-message selector"));
    let ids = section(&three.text, "Exact identifiers");
    for id in [
        "packages/tui/src/selector.ts",
        "packages/tui/src/theme.ts",
        "7f3e2d1c9b",
        "https://ci.example.com/run/991",
        "10.0.0.9",
    ] {
        assert!(ids.iter().any(|l| l == id), "{id} lost:\n{}", three.text);
    }
    assert_eq!(three.read_files, vec!["packages/tui/src/theme.ts"]);
    // Folding is stable: re-folding an empty span gives the same sections.
    let again = run(&[], Some(&three.text), 2_000);
    assert_eq!(again.text, three.text);
}

#[test]
fn unsectioned_and_llm_style_previous_text_survives() {
    let prev = "The user is migrating from Postgres 12 to 16.\n\n## Progress\n### Done\n- [x] dumped the schema\n## Key Decisions\n- Use pg_upgrade --link\n## Next Steps\n1. Verify replicas";
    let s = run(
        &[user("carry on with the upgrade please")],
        Some(prev),
        5_000,
    );
    let earlier = section(&s.text, "Earlier context");
    assert!(
        earlier.contains(&"The user is migrating from Postgres 12 to 16.".into()),
        "{}",
        s.text
    );
    assert!(
        section(&s.text, "Done")
            .iter()
            .any(|e| e.contains("dumped the schema")),
        "{}",
        s.text
    );
    assert!(section(&s.text, "Decisions").contains(&"Use pg_upgrade --link".into()));
    assert!(section(&s.text, "Open TODOs").contains(&"Verify replicas".into()));
    // No goal in the previous text: the span's first request becomes it.
    assert_eq!(
        section(&s.text, "Goal"),
        vec!["carry on with the upgrade please"]
    );
}
