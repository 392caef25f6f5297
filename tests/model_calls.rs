//! How model calls end and how they travel, against a fake model on 127.0.0.1: a call whose
//! future is dropped (the turn was cancelled, the host stopped waiting) closes its connection
//! at once instead of running to its 60 s timeout; a summary the host waits on (the LLM
//! summarizer, an embedder's own async one; from the host, and from a Lua or Rhai script's
//! `host.summarize`) ends as "cancelled" when the turn's cancel flag is set; and the client speaks https to a server whose CA it is told to trust (`caFile`), and
//! refuses one it does not trust, naming the endpoint.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ctxhost::HostCall;
use ctxhost::contract::ResultLimits;
use ctxhost::services::compaction::CompactionSettings;
use ctxhost::services::llm::ChatMessage;
use ctxhost::services::llm::{
    LlmError, LlmSettings, LlmSummarizer, ModelClient, ModelRequest, OpenAiClient,
};
use ctxhost::services::summarize::{Summarizer, Summary, SummaryFuture, SummaryRequest};
use ctxhost::services::tokens::{Estimate, TokenCache, TokenCounter};
use ctxhost::testing::{SessionServices, SummarizeOptions};

use crate::common::block_on;
use crate::common::engine::{Lang, compact_params, cx, opts, session};
use crate::common::fake_model::{FakeModel, Reply};

/// Long enough that a test reaching its end shows the call did not wait for it.
const LONG: Duration = Duration::from_secs(60);

/// How long a test waits for the fake to see a close that should come at once; far below
/// [`LONG`], so a close seen within it is not ureq's timeout.
const PROMPTLY: Duration = Duration::from_secs(20);

fn request(timeout: Duration) -> ModelRequest {
    ModelRequest {
        messages: vec![ChatMessage::new("user", "Summarize the build log.")],
        max_tokens: 64,
        temperature: None,
        response_format: None,
        session: None,
        timeout,
    }
}

/// Sets `flag` after `after` on a thread of its own.
fn cancel_after(flag: &Arc<AtomicBool>, after: Duration) -> std::thread::JoinHandle<()> {
    let flag = Arc::clone(flag);
    std::thread::spawn(move || {
        std::thread::sleep(after);
        flag.store(true, Ordering::SeqCst);
    })
}

fn services(summarizer: Arc<dyn Summarizer>, cancel: Arc<AtomicBool>) -> Arc<SessionServices> {
    Arc::new(SessionServices {
        tokens: TokenCache::new(Arc::new(Estimate)),
        summarizer,
        compaction: CompactionSettings::default(),
        limits: ResultLimits::default(),
        model: Default::default(),
        host_times: Default::default(),
        cancel,
    })
}

fn call(services: &Arc<SessionServices>) -> HostCall {
    HostCall::new(
        "summer".into(),
        "s1".into(),
        Arc::new(session()),
        Arc::clone(services),
        Arc::new(serde_json::json!({})),
        8000,
    )
}

#[test]
fn a_dropped_model_call_closes_its_connection_before_its_timeout() {
    let model = FakeModel::start(vec![], Reply::silent());
    let client = OpenAiClient::new(&model.url(), "fake", None);
    // The host stops waiting after 100 ms of a 60 s call: the future is dropped.
    let waited = block_on(async {
        tokio::time::timeout(Duration::from_millis(100), client.complete(request(LONG))).await
    });
    assert!(waited.is_err(), "a silent model gave an answer: {waited:?}");
    assert!(
        model.await_closed(1, PROMPTLY),
        "the connection stayed open after the call was dropped"
    );
    assert_eq!(model.requests().len(), 1, "the request reached the model");
}

#[test]
fn a_summary_waiting_on_a_silent_model_ends_cancelled_with_its_turn() {
    let model = FakeModel::start(vec![], Reply::silent());
    let mut settings = LlmSettings::new(model.url(), "fake");
    settings.timeout_ms = 60_000;
    let llm = Arc::new(LlmSummarizer::new(&settings, None).unwrap());
    let cancel = Arc::new(AtomicBool::new(false));
    let services = services(llm.clone(), Arc::clone(&cancel));
    let canceller = cancel_after(&cancel, Duration::from_millis(100));
    let messages = session();
    let out = call(&services).summarize(&messages, &SummarizeOptions::default(), &cancel);
    canceller.join().unwrap();
    let e = out.expect_err("a cancelled summary gives no text");
    assert!(e.to_string().contains("cancelled"), "{e}");
    assert!(
        model.await_closed(1, PROMPTLY),
        "the summary's model call kept its connection open"
    );
    // The cancelled call's reservation was given back, and nothing was counted as spent.
    assert_eq!(llm.tokens_spent_today(), 0);
}

/// An embedder's own async summarizer that waits on something that never comes (a queue, an
/// SDK call); it counts how many of its futures were dropped.
#[derive(Debug, Default)]
struct Waiting {
    dropped: Arc<std::sync::atomic::AtomicUsize>,
}

struct CountDrop(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for CountDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Summarizer for Waiting {
    fn summarize<'a>(
        &'a self,
        _: SummaryRequest<'a>,
        _: &'a dyn TokenCounter,
    ) -> SummaryFuture<'a> {
        let guard = CountDrop(Arc::clone(&self.dropped));
        Box::pin(async move {
            let _guard = guard;
            std::future::pending::<ctxhost::Result<Summary>>().await
        })
    }

    fn calls_a_model(&self) -> bool {
        true
    }
}

#[test]
fn an_embedders_async_summarizer_is_dropped_when_the_turn_is_cancelled() {
    let waiting = Arc::new(Waiting::default());
    let cancel = Arc::new(AtomicBool::new(false));
    let services = services(waiting.clone(), Arc::clone(&cancel));
    let canceller = cancel_after(&cancel, Duration::from_millis(100));
    // Built-in compaction (as `legacy` and `host.delegateCompaction` run it) waits on it.
    let params: ctxhost::contract::CompactParams = serde_json::from_value(serde_json::json!({
        "sessionId": "s1", "tokenBudget": 10,
        "force": true, "currentTokenCount": 0, "compactionTarget": "budget"
    }))
    .unwrap();
    let result = call(&services).delegate_compaction(&params);
    canceller.join().unwrap();
    assert!(!result.ok && !result.compacted, "{result:?}");
    let reason = result.reason.unwrap_or_default();
    assert!(reason.contains("cancelled"), "{reason}");
    assert_eq!(waiting.dropped.load(Ordering::SeqCst), 1);
}

#[test]
fn a_scripts_host_summarize_waiting_on_an_async_summarizer_is_cancelled_with_its_turn() {
    for lang in [Lang::Lua, Lang::Rhai] {
        let waiting = Arc::new(Waiting::default());
        let cancel = Arc::new(AtomicBool::new(false));
        let services = services(waiting.clone(), Arc::clone(&cancel));
        // `table_engine`'s compact in mode "summarize" calls `host.summarize`.
        let config = serde_json::json!({"mode": "summarize"});
        let factory = lang
            .load_fixture("table_engine", &opts(config.clone()))
            .unwrap();
        let mut instance = cx(config.clone());
        instance.cancel = Some(Arc::clone(&cancel));
        let mut engine = factory.instantiate(&instance).unwrap();
        let call = HostCall::new(
            "test".into(),
            "s1".into(),
            Arc::new(session()),
            services,
            Arc::new(config),
            8000,
        );
        let canceller = cancel_after(&cancel, Duration::from_millis(100));
        let e = engine
            .compact(&call, &compact_params())
            .expect_err("a cancelled summary gives no result");
        canceller.join().unwrap();
        assert_eq!(e.kind, ctxhost::EngineErrorKind::Cancelled, "{lang:?}: {e}");
        assert_eq!(waiting.dropped.load(Ordering::SeqCst), 1, "{lang:?}");
    }
}

/// A CA, and a server certificate for 127.0.0.1 it signed, made for this test.
struct Pki {
    ca_pem: String,
    server: Arc<rustls::ServerConfig>,
}

fn pki() -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into());
    let server = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![leaf.der().clone()], key)
    .unwrap();
    Pki {
        ca_pem: ca.pem(),
        server: Arc::new(server),
    }
}

#[test]
fn the_client_speaks_https_to_a_server_whose_ca_file_it_trusts() {
    let pki = pki();
    let model = FakeModel::start_tls(vec![], Reply::answer("over tls"), Arc::clone(&pki.server));
    assert!(model.url().starts_with("https://127.0.0.1:"));
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &pki.ca_pem).unwrap();

    // Through the configuration, as a user sets it: `caFile` beside `baseUrl`.
    let settings: LlmSettings = serde_json::from_value(serde_json::json!({
        "baseUrl": model.url(), "model": "fake", "timeoutMs": 10_000,
        "caFile": ca_file,
    }))
    .unwrap();
    let llm = LlmSummarizer::new(&settings, None).unwrap();
    let answer = block_on(llm.model().complete(request(Duration::from_secs(10)))).unwrap();
    assert_eq!(answer.text, "over tls");
    assert_eq!(model.requests().len(), 1);
    assert_eq!(
        model.requests()[0].body["messages"][0]["content"],
        "Summarize the build log."
    );
}

#[test]
fn an_https_server_the_client_does_not_trust_is_unreachable_naming_the_endpoint() {
    let pki = pki();
    let model = FakeModel::start_tls(vec![], Reply::answer("never read"), pki.server);
    // The webpki roots do not hold the test's CA.
    let client = OpenAiClient::new(&model.url(), "fake", None);
    let e = block_on(client.complete(request(Duration::from_secs(10)))).unwrap_err();
    match &e {
        LlmError::Unreachable { endpoint, cause } => {
            assert_eq!(endpoint, &format!("{}/chat/completions", model.url()));
            assert!(cause.to_lowercase().contains("certificate"), "{cause}");
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
    assert!(
        model.requests().is_empty(),
        "no request crossed an untrusted TLS session"
    );
    // A caFile that holds no certificate is a configuration error naming the key.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("empty.pem");
    std::fs::write(&bad, "not a certificate\n").unwrap();
    let mut settings = LlmSettings::new(model.url(), "fake");
    settings.ca_file = Some(bad);
    let e = LlmSummarizer::new(&settings, None).unwrap_err();
    assert!(e.to_string().contains("host.summarizer.caFile"), "{e}");
}
