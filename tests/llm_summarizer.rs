//! The LLM summarizer against a fake model on 127.0.0.1: a tiny HTTP server on a
//! `TcpListener` answering scripted Chat Completions responses and recording every request.
//! Good answers, the identifier audit (corrective retry, appended identifiers), timeouts, 429
//! and 5xx retries, malformed answers, the per-turn and per-day budgets (all falling back to
//! the offline summarizer), the API key kept out of logs, and a shared transcript replayed
//! with compaction by the model.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use ctxhost::config::Config;
use ctxhost::contract::message::{Message, MessageBody, Role};
use ctxhost::services::llm::{ApiKey, LlmSettings, LlmSummarizer, SummarizerSettings};
use ctxhost::services::summarize::{IdentifierPolicy, Summarizer, Summary, SummaryRequest};
use ctxhost::services::tokens::{Estimate, TokenCounter};
use ctxhost::transcript::TranscriptStore;

use crate::common;
use crate::common::block_on;
use crate::common::fake_model::{FakeModel, Reply, capture};

/// Identifiers the span below holds.
const UUID: &str = "3f2b8c1e-9a4d-4e7f-b6a2-1c5d8e9f0a7b";
const URL: &str = "https://git.example.com/acme/api/pull/42";
const PATH: &str = "/srv/acme/api/src/main.rs";
const PREV_ID: &str = "0a1b2c3d4e5f6789";

fn span() -> Vec<Arc<Message>> {
    vec![
        Arc::new(Message::user(format!(
            "Fix the crash in {PATH}; the failing job is {UUID}. Never touch the database schema."
        ))),
        Arc::new(Message::assistant(format!(
            "I reproduced it and opened {URL} with the fix."
        ))),
        Arc::new(Message::user("Good. Next, add a regression test.")),
    ]
}

const GOOD: &str = "## Goal\n- Fix the crash in /srv/acme/api/src/main.rs (job 3f2b8c1e-9a4d-4e7f-b6a2-1c5d8e9f0a7b)\n## Constraints\n- Never touch the database schema\n## Progress\n- Fix opened as https://git.example.com/acme/api/pull/42\n## Decisions\n- None\n## Open questions / pending\n- Add a regression test\n## Exact identifiers\n- 0a1b2c3d4e5f6789";

const MISSING_URL: &str = "## Goal\n- Fix the crash in /srv/acme/api/src/main.rs (job 3f2b8c1e-9a4d-4e7f-b6a2-1c5d8e9f0a7b)\n## Progress\n- A fix was opened\n## Open questions / pending\n- Add a regression test\n## Exact identifiers\n- 0a1b2c3d4e5f6789";

/// `n` alternating user and assistant messages of about 100 tokens each, naming PATH and UUID.
fn history(n: usize, tag: &str) -> Vec<Message> {
    (0..n)
        .map(|i| {
            let text = format!(
                "{tag} {i}: {} touched {PATH} for job {UUID}",
                "words ".repeat(60)
            );
            if i % 2 == 0 {
                Message::user(text)
            } else {
                Message::assistant(text)
            }
        })
        .collect()
}

fn settings(model: &FakeModel) -> LlmSettings {
    let mut s = LlmSettings::new(model.url(), "fake");
    s.timeout_ms = 10_000;
    s
}

fn summarize(llm: &dyn Summarizer, messages: &[Arc<Message>]) -> Summary {
    let request = SummaryRequest {
        messages,
        previous_summary: Some("## Goal\n- Keep the API up (deploy 0a1b2c3d4e5f6789)"),
        max_tokens: 1_000,
        instructions: None,
        identifier_policy: IdentifierPolicy::Strict,
    };
    block_on(llm.summarize(request, &Estimate)).unwrap()
}

fn assert_builtin(s: &Summary) {
    assert_eq!(s.summarizer, "builtin", "{}", s.text);
    assert!(s.text.contains("## Goal"), "{}", s.text);
    assert_eq!(s.identifiers_kept, s.identifiers_found, "{}", s.text);
}

#[test]
fn llm_good_answer_is_the_summary() {
    let model = FakeModel::start(vec![], Reply::answer(GOOD));
    let llm = LlmSummarizer::new(&settings(&model), None).unwrap();
    let s = summarize(&llm, &span());
    assert_eq!(s.summarizer, "llm:fake");
    assert_eq!(s.text, GOOD);
    // The span's own three, and the deploy hash the previous summary carried, counted apart.
    assert_eq!(s.identifiers_found, 3);
    assert_eq!(s.identifiers_kept, 3);
    assert_eq!((s.carried_found, s.carried_kept), (1, 1));
    assert_eq!(s.tokens, Estimate.count_text(GOOD));
    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert_eq!(r.body["model"], "fake");
    assert_eq!(r.body["stream"], false);
    assert!(r.header("authorization").is_none(), "no key, no header");
    let prompt = r.prompt();
    for section in [
        "## Goal",
        "## Constraints",
        "## Progress",
        "## Decisions",
        "## Open questions / pending",
        "## Exact identifiers",
    ] {
        assert!(
            prompt.contains(section),
            "{section} missing from the prompt"
        );
    }
    // The previous summary is folded in, not summarized again from scratch.
    assert!(prompt.contains("<previous-summary>\n## Goal\n- Keep the API up"));
    assert!(prompt.contains("Do not summarize the previous summary again"));
    assert!(prompt.contains(&format!("- {PREV_ID}")));
    assert!(prompt.contains("[user] Fix the crash"));
}

#[test]
fn llm_missing_identifiers_get_one_corrective_retry_that_fixes_them() {
    let model = FakeModel::start(vec![Reply::answer(MISSING_URL)], Reply::answer(GOOD));
    let llm = LlmSummarizer::new(&settings(&model), None).unwrap();
    let s = summarize(&llm, &span());
    assert_eq!(s.summarizer, "llm:fake");
    assert_eq!(s.text, GOOD, "the corrected answer is the summary");
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let retry = requests[1].body["messages"].as_array().unwrap();
    assert_eq!(
        retry.len(),
        4,
        "system, user, the first answer, the correction"
    );
    assert_eq!(retry[2]["role"], "assistant");
    assert_eq!(retry[2]["content"], MISSING_URL);
    let correction = retry[3]["content"].as_str().unwrap();
    assert!(correction.contains(&format!("- {URL}")), "{correction}");
    assert!(
        !correction.contains(&format!("- {UUID}")),
        "only the missing ones are named"
    );
}

#[test]
fn llm_identifiers_still_missing_are_appended() {
    let model = FakeModel::start(vec![], Reply::answer(MISSING_URL));
    let llm = LlmSummarizer::new(&settings(&model), None).unwrap();
    let s = summarize(&llm, &span());
    assert_eq!(s.summarizer, "llm:fake");
    assert_eq!(model.requests().len(), 2, "one corrective retry, no more");
    assert!(s.text.starts_with(MISSING_URL), "{}", s.text);
    assert!(
        s.text
            .ends_with(&format!("## Exact identifiers (host audit)\n- {URL}")),
        "{}",
        s.text
    );
    assert_eq!(s.identifiers_kept, s.identifiers_found);
}

#[test]
fn llm_identifiers_that_do_not_fit_are_counted_as_omitted() {
    let model = FakeModel::start(vec![], Reply::answer("## Goal\n- Fix the crash"));
    let llm = LlmSummarizer::new(&settings(&model), None).unwrap();
    let many: Vec<Arc<Message>> = (0..200)
        .map(|i| {
            Arc::new(Message::user(format!(
                "read /srv/data/part-{i:04}/index.json"
            )))
        })
        .collect();
    let request = SummaryRequest {
        messages: &many,
        previous_summary: None,
        max_tokens: 300,
        instructions: None,
        identifier_policy: IdentifierPolicy::Strict,
    };
    let s = block_on(llm.summarize(request, &Estimate)).unwrap();
    assert_eq!(s.summarizer, "llm:fake");
    assert!(s.tokens <= 300, "{} tokens", s.tokens);
    assert!(s.identifiers_kept < s.identifiers_found);
    let omitted = s.identifiers_found - s.identifiers_kept;
    assert!(
        s.text.contains(&format!("({omitted} identifiers omitted")),
        "{}",
        s.text
    );
}

#[test]
fn llm_slow_model_times_out_to_the_offline_summarizer() {
    let model = FakeModel::start(vec![], Reply::answer(GOOD).slow(Duration::from_secs(30)));
    let mut settings = settings(&model);
    settings.timeout_ms = 300;
    let llm = LlmSummarizer::new(&settings, None).unwrap();
    let (s, logs) = capture(|| summarize(&llm, &span()));
    assert_builtin(&s);
    assert!(logs.contains("did not answer within 300 ms"), "{logs}");
    assert_eq!(model.requests().len(), 1, "a timeout is not retried");
}

#[test]
fn llm_429_is_retried_then_the_answer_is_used() {
    let model = FakeModel::start(
        vec![Reply::json(429, json!({"error": "slow down"})).header("Retry-After", "0")],
        Reply::answer(GOOD),
    );
    let llm = LlmSummarizer::new(&settings(&model), None).unwrap();
    let s = summarize(&llm, &span());
    assert_eq!(s.summarizer, "llm:fake");
    assert_eq!(s.text, GOOD);
    assert_eq!(model.requests().len(), 2);
}

#[test]
fn llm_500s_fall_back_after_the_retries() {
    let model = FakeModel::start(vec![], Reply::json(500, json!({"error": "boom"})));
    let llm = LlmSummarizer::new(&settings(&model), None).unwrap();
    let (s, logs) = capture(|| summarize(&llm, &span()));
    assert_builtin(&s);
    assert_eq!(
        model.requests().len(),
        4,
        "the first attempt and three retries"
    );
    assert!(logs.contains("answered HTTP 500"), "{logs}");
    assert!(
        logs.contains(&model.url()),
        "the error names the endpoint: {logs}"
    );
}

#[test]
fn llm_client_errors_are_not_retried() {
    let model = FakeModel::start(vec![], Reply::json(400, json!({"error": "bad model"})));
    let llm = LlmSummarizer::new(&settings(&model), None).unwrap();
    assert_builtin(&summarize(&llm, &span()));
    assert_eq!(model.requests().len(), 1);
}

#[test]
fn llm_malformed_json_falls_back() {
    let model = FakeModel::start(vec![], Reply::raw(200, "{\"choices\": [ oops"));
    let llm = LlmSummarizer::new(&settings(&model), None).unwrap();
    let (s, logs) = capture(|| summarize(&llm, &span()));
    assert_builtin(&s);
    assert!(logs.contains("malformed answer"), "{logs}");
    assert_eq!(model.requests().len(), 1);
}

#[test]
fn llm_refusals_and_empty_answers_fall_back() {
    let refusal = Reply::json(
        200,
        json!({"choices": [{"message": {"role": "assistant", "content": null, "refusal": "I can't help with that."}}]}),
    );
    let empty = Reply::answer("   ");
    for reply in [refusal, empty] {
        let model = FakeModel::start(vec![], reply);
        let llm = LlmSummarizer::new(&settings(&model), None).unwrap();
        assert_builtin(&summarize(&llm, &span()));
        assert_eq!(model.requests().len(), 1);
    }
}

#[test]
fn llm_unreachable_endpoint_is_logged_by_name_and_falls_back() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let endpoint = format!("http://127.0.0.1:{port}/v1");
    let llm = LlmSummarizer::new(&LlmSettings::new(&endpoint, "fake"), None).unwrap();
    let (s, logs) = capture(|| summarize(&llm, &span()));
    assert_builtin(&s);
    assert!(
        logs.contains(&format!(
            "the model at {endpoint}/chat/completions is unreachable"
        )),
        "{logs}"
    );
}

#[test]
fn llm_key_is_sent_only_in_the_authorization_header_and_never_logged() {
    const KEY: &str = "sk-test-9f8e7d6c5b4a";
    let model = FakeModel::start(
        vec![],
        Reply {
            echo_auth: true,
            ..Reply::raw(401, "")
        },
    );
    let llm = LlmSummarizer::new(&settings(&model), Some(ApiKey::new(KEY))).unwrap();
    let (s, logs) = capture(|| summarize(&llm, &span()));
    assert_builtin(&s);
    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert!(
        !requests[0].body.to_string().contains(KEY),
        "not in the body"
    );
    assert!(logs.contains("answered HTTP 401"), "{logs}");
    assert!(
        logs.contains("<redacted>"),
        "the echoed key was replaced: {logs}"
    );
    assert!(!logs.contains(KEY), "the key was logged: {logs}");
    assert!(!format!("{llm:?}").contains(KEY));
    assert!(!format!("{:?}", ApiKey::new(KEY)).contains(KEY));
}

#[test]
fn llm_key_comes_from_the_named_variable_and_a_missing_one_is_a_config_error() {
    // A variable every test run has, standing in for a key (tests cannot set variables safely).
    let var = "CARGO_MANIFEST_DIR";
    let key = std::env::var(var).expect("cargo test sets CARGO_MANIFEST_DIR");
    let model = FakeModel::start(vec![], Reply::answer(GOOD));
    let mut config = Config::default();
    let mut settings = settings(&model);
    settings.api_key_env = Some(var.into());
    config.host.summarizer = SummarizerSettings::Llm(settings.clone());
    let llm = LlmSummarizer::from_env(&settings).unwrap();
    assert!(!format!("{llm:?}").contains(&key));
    assert!(!format!("{config:?}").contains(&key));
    assert_eq!(summarize(&llm, &span()).summarizer, "llm:fake");
    assert_eq!(
        model.requests()[0].header("authorization"),
        Some(format!("Bearer {key}").as_str())
    );
    ctxhost::runtime::Host::new(config.clone()).unwrap();

    settings.api_key_env = Some("CTXHOST_TEST_NO_SUCH_KEY_VARIABLE".into());
    config.host.summarizer = SummarizerSettings::Llm(settings);
    let err = ctxhost::runtime::Host::new(config).unwrap_err().to_string();
    assert!(err.contains("CTXHOST_TEST_NO_SUCH_KEY_VARIABLE"), "{err}");
}

#[test]
fn llm_calls_per_turn_are_capped_per_session_turn() {
    let model = FakeModel::start(vec![], Reply::answer(GOOD));
    let mut settings = settings(&model);
    settings.max_calls_per_turn = 1;
    let shared = LlmSummarizer::new(&settings, None).unwrap();
    let session = shared.for_session().unwrap();
    session.begin_turn();
    assert_eq!(summarize(session.as_ref(), &span()).summarizer, "llm:fake");
    let (s, logs) = capture(|| summarize(session.as_ref(), &span()));
    assert_builtin(&s);
    assert!(
        logs.contains("model calls this turn allows are spent"),
        "{logs}"
    );
    assert_eq!(model.requests().len(), 1, "the capped call was never made");
    // Another session has its own turn; the next turn of this one may call again.
    let other = shared.for_session().unwrap();
    assert_eq!(summarize(other.as_ref(), &span()).summarizer, "llm:fake");
    session.begin_turn();
    assert_eq!(summarize(session.as_ref(), &span()).summarizer, "llm:fake");
    assert_eq!(model.requests().len(), 3);
}

#[test]
fn llm_call_cap_skips_the_corrective_retry_and_appends() {
    let model = FakeModel::start(vec![], Reply::answer(MISSING_URL));
    let mut settings = settings(&model);
    settings.max_calls_per_turn = 1;
    let llm = LlmSummarizer::new(&settings, None).unwrap();
    let s = summarize(&llm, &span());
    assert_eq!(s.summarizer, "llm:fake");
    assert_eq!(model.requests().len(), 1);
    assert!(
        s.text.contains(&format!("(host audit)\n- {URL}")),
        "{}",
        s.text
    );
}

#[test]
fn llm_tokens_per_day_are_capped() {
    let heavy = Reply::json(
        200,
        json!({"choices": [{"message": {"content": GOOD}}], "usage": {"prompt_tokens": 9_000, "completion_tokens": 500}}),
    );
    let model = FakeModel::start(vec![], heavy);
    let mut settings = settings(&model);
    settings.max_tokens_per_day = 10_000;
    settings.max_output_tokens = 500;
    let llm = LlmSummarizer::new(&settings, None).unwrap();
    assert_eq!(summarize(&llm, &span()).summarizer, "llm:fake");
    assert_eq!(llm.tokens_spent_today(), 9_500);
    llm.begin_turn();
    let (s, logs) = capture(|| summarize(&llm, &span()));
    assert_builtin(&s);
    assert!(
        logs.contains("day budget is spent: 9500 of 10000 tokens"),
        "{logs}"
    );
    assert_eq!(
        model.requests().len(),
        1,
        "the over-budget call was never made"
    );
}

/// An embedder's summarizer given to `Host::with_summarizer` writes `/compact`'s summary, and
/// the compaction entry records which summarizer that was; the default records `builtin`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llm_compaction_entry_records_the_summarizer() {
    let model = FakeModel::start(vec![], Reply::answer(GOOD));
    let dir = tempfile::tempdir().unwrap();
    let history = history(60, "step");
    let llm: Arc<dyn Summarizer> = Arc::new(LlmSummarizer::new(&settings(&model), None).unwrap());
    let hosts = [
        (
            "llm:fake",
            ctxhost::runtime::Host::with_summarizer(common::replay::config(8_000, None), llm)
                .unwrap(),
        ),
        (
            "builtin",
            ctxhost::runtime::Host::new(common::replay::config(8_000, None)).unwrap(),
        ),
    ];
    for (expected, host) in hosts {
        let file = dir.path().join(format!("{expected}.jsonl"));
        let spec = ctxhost::runtime::SessionSpec::new(expected, &file);
        let session = host.create_session(spec).await.unwrap();
        session.record(history.clone()).await.unwrap();
        let result = session.compact(None).await.unwrap();
        assert!(result.compacted, "{result:?}");
        session.close().await.unwrap();
        let (_, stored, _) = TranscriptStore::open(&file).unwrap();
        let summary = stored
            .iter()
            .find_map(|m| match &m.body {
                MessageBody::CompactionSummary(s) => Some(s),
                _ => None,
            })
            .unwrap();
        assert_eq!(summary.extra["details"]["summarizer"], expected);
        assert!(summary.summary.contains(UUID) && summary.summary.contains(PATH));
    }
    assert_eq!(model.requests().len(), 1);
}

/// Through a real host: `maxCallsPerTurn` counts one session's calls until its next turn
/// begins, and a capped compaction is written by the offline summarizer instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llm_call_cap_is_per_session_turn_through_the_host() {
    let model = FakeModel::start(vec![], Reply::answer(GOOD));
    let mut config = common::replay::config(8_000, None);
    let mut llm = settings(&model);
    llm.max_calls_per_turn = 1;
    config.host.summarizer = SummarizerSettings::Llm(llm);
    let host = ctxhost::runtime::Host::new(config).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.jsonl");
    let session = host
        .create_session(ctxhost::runtime::SessionSpec::new("s", &file))
        .await
        .unwrap();
    session.record(history(60, "first")).await.unwrap();
    assert!(session.compact(None).await.unwrap().compacted);
    session.record(history(40, "second")).await.unwrap();
    assert!(session.compact(None).await.unwrap().compacted);
    session.record(history(40, "third")).await.unwrap();
    let turn = session
        .begin_turn(ctxhost::session::TurnInput {
            user: Message::user("go on"),
            is_heartbeat: false,
        })
        .await
        .unwrap();
    assert!(turn.assembled_tokens <= turn.token_budget);
    session
        .end_turn(vec![Message::assistant("done")])
        .await
        .unwrap();
    session.close().await.unwrap();
    let (_, stored, _) = TranscriptStore::open(&file).unwrap();
    let who: Vec<String> = stored
        .iter()
        .filter_map(|m| match &m.body {
            MessageBody::CompactionSummary(s) => Some(s.extra["details"]["summarizer"].to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(who, ["\"llm:fake\"", "\"builtin\"", "\"llm:fake\""]);
    assert_eq!(model.requests().len(), 2);
}

/// A shared transcript replayed at a small window with the LLM summarizer (against the fake)
/// keeps every budget and pairing guarantee, and its summaries say the model wrote them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llm_replay_of_a_shared_transcript_keeps_every_guarantee() {
    let model = FakeModel::start(
        vec![],
        Reply::answer(
            "## Goal\n- Continue the session's work\n## Progress\n- Earlier turns were summarized by the fake model",
        ),
    );
    let path = common::shared_dir().join("data/transcripts/pimono-before-compaction.jsonl");
    let mut config = common::replay::config(8_000, None);
    config.host.summarizer = SummarizerSettings::Llm(settings(&model));
    let dir = tempfile::tempdir().unwrap();
    let c = common::replay::replay_checked_with(&path, &config, 2, None, dir.path()).await;
    assert!(c.turns > 0);
    assert!(c.compactions > 0, "no compaction at 8,000 tokens");
    assert!(c.summaries_checked > 0);
    let mut by_model = 0;
    for file in &c.files {
        let (_, stored, _) = TranscriptStore::open(file).unwrap();
        for m in stored
            .iter()
            .filter(|m| m.role() == Role::CompactionSummary)
        {
            let MessageBody::CompactionSummary(s) = &m.body else {
                unreachable!()
            };
            let who = s.extra["details"]["summarizer"].as_str().unwrap();
            assert!(who == "llm:fake" || who == "builtin", "{who}");
            if who == "llm:fake" {
                by_model += 1;
                // The model's text, or (when the span's identifiers fill the summary budget)
                // the identifiers alone: they come first.
                let start: String = s.summary.chars().take(600).collect();
                assert!(
                    s.summary
                        .starts_with("## Goal\n- Continue the session's work")
                        || s.summary.starts_with("## Exact identifiers (host audit)"),
                    "{start}"
                );
                let details = &s.extra["details"];
                assert!(
                    details["identifiersKept"] == details["identifiersFound"]
                        || s.summary.contains("identifiers omitted"),
                    "{details}"
                );
            }
        }
    }
    assert!(by_model > 0, "no summary came from the model");
    assert!(!model.requests().is_empty());
}
