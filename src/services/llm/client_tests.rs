use super::*;

fn client(key: Option<&str>) -> OpenAiClient {
    OpenAiClient::new("http://127.0.0.1:9/v1/", "m", key.map(ApiKey::new))
}

#[test]
fn llm_endpoint_appends_chat_completions_once() {
    assert_eq!(
        client(None).endpoint(),
        "http://127.0.0.1:9/v1/chat/completions"
    );
    let full = OpenAiClient::new("https://example.com/v1/chat/completions", "m", None);
    assert_eq!(full.endpoint(), "https://example.com/v1/chat/completions");
}

#[test]
fn llm_parse_reads_text_parts_and_usage() {
    let c = client(None);
    let a = c
        .parse(r#"{"choices":[{"message":{"content":"  ## Goal\n- x  "}}],"usage":{"prompt_tokens":7,"completion_tokens":3}}"#)
        .unwrap();
    assert_eq!(a.text, "## Goal\n- x");
    assert_eq!(
        a.usage,
        Some(Usage {
            input: 7,
            output: 3
        })
    );
    let parts = c
        .parse(r#"{"choices":[{"message":{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}]}"#)
        .unwrap();
    assert_eq!(parts.text, "ab");
    assert_eq!(parts.usage, None);
}

#[test]
fn llm_parse_rejects_refusals_empty_and_malformed_answers() {
    let c = client(None);
    let refusal =
        c.parse(r#"{"choices":[{"message":{"content":null,"refusal":"I can't help with that"}}]}"#);
    assert!(
        matches!(refusal, Err(LlmError::Refused { .. })),
        "{refusal:?}"
    );
    let filtered =
        c.parse(r#"{"choices":[{"message":{"content":"x"},"finish_reason":"content_filter"}]}"#);
    assert!(
        matches!(filtered, Err(LlmError::Refused { .. })),
        "{filtered:?}"
    );
    let empty = c.parse(r#"{"choices":[{"message":{"content":"   "}}]}"#);
    assert!(matches!(empty, Err(LlmError::Empty { .. })), "{empty:?}");
    let none = c.parse(r#"{"choices":[]}"#);
    assert!(matches!(none, Err(LlmError::Malformed { .. })), "{none:?}");
    let junk = c.parse("{not json");
    let Err(e) = junk else { panic!("junk parsed") };
    assert!(
        e.to_string().contains("127.0.0.1:9/v1/chat/completions"),
        "{e}"
    );
}

#[test]
fn llm_key_is_redacted_from_debug_and_echoed_text() {
    let c = client(Some("sk-secret-123"));
    assert!(!format!("{c:?}").contains("sk-secret-123"));
    assert!(!format!("{:?}", ApiKey::new("sk-secret-123")).contains("sk-secret-123"));
    let refusal = c
        .parse(r#"{"choices":[{"message":{"refusal":"your key sk-secret-123 is bad"}}]}"#)
        .unwrap_err();
    assert!(!refusal.to_string().contains("sk-secret-123"), "{refusal}");
    assert!(!format!("{refusal:?}").contains("sk-secret-123"));
}

#[test]
fn llm_clip_cuts_at_a_char_boundary() {
    assert_eq!(clip("héllo", 2), "hé…");
    assert_eq!(clip("hi", 5), "hi");
}
