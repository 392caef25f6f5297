//! The policy lab behind `ctxhost compare`: the same recorded conversations replayed through
//! several engines (and windows), measured in what a team pays and what the model still sees.
//!
//! # Prefix reuse (what the provider's prompt cache can serve)
//!
//! Each model call is a sequence of *blocks*: the `systemPromptAddition` first (when the engine
//! returned one; it goes into the system prompt, ahead of every message), then the assembled
//! messages in order. Two blocks are identical when they are the same kind and equal as values
//! (a message's id, role and every content block; the addition's text). A call's **cached**
//! tokens are the host-counted tokens of its longest run of leading blocks identical to the
//! previous call's leading blocks (the previous call of the same conversation; the first call
//! has none); the rest are **fresh**. This is the ideal block-granular cache: a provider that
//! caches at finer granularity can serve a little more of a changed block, one with minimum
//! cacheable lengths or expiry a little less. The static system prompt is the same for every
//! engine and is not counted.
//!
//! A **cache break** is a call (after the first) whose cached tokens are less than
//! `break_share` (default 0.9) of the previous call's tokens. Its cause, checked in this order:
//! `compaction` (a summary the session did not hold at the previous call), `fallback` (the
//! answering engine changed), `system-prompt-addition` (the addition differs), `pruned-tool-result`
//! (the first differing block is a tool result the previous call sent and this one sent changed
//! or not at all), else `engine-cut` (the engine left out or reordered messages).
//!
//! # Re-references
//!
//! At each turn's first call, every identifier ([`find_identifiers`]: paths, hashes, UUIDs,
//! issue numbers, function names) of the user's request that an earlier message of the
//! conversation already named is a re-reference; it is **found** when the call's context
//! (any sent message other than the request, or the addition) contains it verbatim.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::guarantee::Violation;
use crate::message::{Message, Role};
use crate::runtime::{Host, SessionSpec};
use crate::session::{Assembly, CallTimes, MethodTimes, Session};
use crate::summarize::find_identifiers;
use crate::tokens::TokenCache;
use crate::transcript::Durability;

/// The version of `compare --json`'s schema, bumped on any incompatible change.
pub const SCHEMA: &str = "ctxhost.compare/1";

/// The default share of the previous call's tokens a call must reuse not to count as a break.
pub const DEFAULT_BREAK_SHARE: f64 = 0.9;

/// The model whose prices apply when none is named.
pub const DEFAULT_MODEL: &str = "claude-sonnet-4";

/// What a model charges, in dollars per million tokens.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Prices {
    /// Fresh (uncached) input.
    pub input: f64,
    /// Input served from the prompt cache.
    pub cached_input: f64,
    /// Output.
    pub output: f64,
}

impl Prices {
    /// The dollars for `fresh` and `cached` input tokens and `output` tokens.
    pub fn cost(&self, fresh: u64, cached: u64, output: u64) -> f64 {
        (fresh as f64 * self.input
            + cached as f64 * self.cached_input
            + output as f64 * self.output)
            / 1_000_000.0
    }
}

/// The built-in price table (list prices per million tokens, cached input as cache reads;
/// check your own contract and pass `--prices` when it differs).
pub fn default_prices() -> BTreeMap<String, Prices> {
    let table = [
        ("claude-sonnet-4", 3.00, 0.30, 15.00),
        ("claude-opus-4", 15.00, 1.50, 75.00),
        ("claude-haiku-3.5", 0.80, 0.08, 4.00),
        ("gpt-4.1", 2.00, 0.50, 8.00),
        ("gpt-4o", 2.50, 1.25, 10.00),
        ("gpt-4o-mini", 0.15, 0.075, 0.60),
    ];
    table
        .into_iter()
        .map(|(name, input, cached_input, output)| {
            (
                name.to_owned(),
                Prices {
                    input,
                    cached_input,
                    output,
                },
            )
        })
        .collect()
}

/// Reads a price table: a JSON object of model name to `{input, cachedInput, output}`.
pub fn load_prices(path: &Path) -> Result<BTreeMap<String, Prices>> {
    let text =
        std::fs::read_to_string(path).map_err(|e| Error::io("read the price table", path, e))?;
    serde_json::from_str(&text).map_err(|e| Error::Config {
        place: format!("{}:{}:{}", path.display(), e.line(), e.column()),
        message: format!(
            "a price table is {{\"model\": {{\"input\": 3.0, \"cachedInput\": 0.3, \"output\": 15.0}}}} (dollars per million tokens): {e}"
        ),
    })
}

/// One block of a model call, as the prompt cache sees it.
#[derive(Clone, Debug)]
pub enum Block {
    /// The engine's `systemPromptAddition`.
    Addition(String),
    /// One assembled message.
    Message(Arc<Message>),
}

impl PartialEq for Block {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Block::Addition(a), Block::Addition(b)) => a == b,
            (Block::Message(a), Block::Message(b)) => Arc::ptr_eq(a, b) || **a == **b,
            _ => false,
        }
    }
}

/// A model call's blocks, each with its host-counted tokens.
pub type Shape = Vec<(Block, u64)>;

/// The blocks of an assembly, counted with `tokens`.
pub fn shape(assembly: &Assembly, tokens: &TokenCache) -> Shape {
    let mut out = Vec::with_capacity(assembly.messages.len() + 1);
    if let Some(a) = &assembly.system_prompt_addition {
        out.push((Block::Addition(a.clone()), tokens.text(a)));
    }
    for m in &assembly.messages {
        out.push((Block::Message(Arc::clone(m)), tokens.message(m)));
    }
    out
}

/// Tokens of the longest run of leading blocks `now` shares with `previous`, and the index of
/// the first block that differs (`now.len()` when all of `now` is shared).
pub fn shared_prefix(previous: &[(Block, u64)], now: &[(Block, u64)]) -> (u64, usize) {
    let mut tokens = 0;
    for (i, (b, t)) in now.iter().enumerate() {
        match previous.get(i) {
            Some((p, _)) if p == b => tokens += t,
            _ => return (tokens, i),
        }
    }
    (tokens, now.len())
}

/// Why a call's prefix broke, given what changed (see the module docs for the order).
pub fn break_cause(
    previous: &[(Block, u64)],
    now: &[(Block, u64)],
    first_diff: usize,
    compacted: bool,
    engine_changed: bool,
) -> &'static str {
    if compacted {
        return "compaction";
    }
    if engine_changed {
        return "fallback";
    }
    let addition = |s: &[(Block, u64)]| match s.first() {
        Some((Block::Addition(a), _)) => Some(a.clone()),
        _ => None,
    };
    if addition(previous) != addition(now) {
        return "system-prompt-addition";
    }
    if let Some((Block::Message(p), _)) = previous.get(first_diff)
        && p.role() == Role::ToolResult
    {
        let sent_same = now
            .iter()
            .any(|(b, _)| matches!(b, Block::Message(m) if m.id == p.id && **m == **p));
        if !sent_same {
            return "pruned-tool-result";
        }
    }
    "engine-cut"
}

/// Tallies one conversation's model calls (or several conversations', one after another).
#[derive(Debug)]
pub struct Meter {
    break_share: f64,
    previous: Option<(Shape, String)>,
    summaries: HashSet<String>,
    seen_text: HashSet<String>,
    history_text: String,
    last_request: Option<String>,
    /// What has been counted so far.
    pub row: Figures,
}

/// The figures of one row of the comparison (one engine, transcript and window, or a total).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Figures {
    /// Model calls.
    pub calls: u64,
    /// Input tokens sent over all calls (systemPromptAddition and messages).
    pub input_tokens: u64,
    /// Of those, served by prefix reuse.
    pub cached_tokens: u64,
    /// Of those, not.
    pub fresh_tokens: u64,
    /// The recorded replies' tokens (the same for every engine of a transcript).
    pub output_tokens: u64,
    /// Dollars at the chosen prices.
    pub cost: f64,
    /// `cachedTokens / inputTokens` (0 without input).
    pub cache_hit_rate: f64,
    /// Calls that reused less than the break share of the previous call.
    pub cache_breaks: u64,
    /// Breaks by cause.
    pub break_causes: BTreeMap<String, u64>,
    /// Summaries the session came to hold (built-in or engine compaction).
    pub compactions: u64,
    /// Calls to the summarizer (`host.summarize` and the built-in compaction's).
    pub summarizer_calls: u64,
    /// Calls that carried no history (neither an earlier message, a summary nor an addition).
    pub no_history: u64,
    /// Calls without the current request.
    pub no_request: u64,
    /// Calls `legacy` answered in place of the engine.
    pub fallbacks: u64,
    /// Conversations whose engine ended quarantined.
    pub quarantines: u64,
    /// Identifiers requests named again (see the module docs).
    pub rerefs: u64,
    /// Of those, found in the call's context.
    pub rerefs_found: u64,
    /// `rerefsFound / rerefs` (1 without re-references).
    pub reref_rate: f64,
}

impl Figures {
    /// Adds `other`'s counts (rates and cost are recomputed by [`Figures::finish`]).
    pub fn add(&mut self, other: &Figures) {
        self.calls += other.calls;
        self.input_tokens += other.input_tokens;
        self.cached_tokens += other.cached_tokens;
        self.fresh_tokens += other.fresh_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_breaks += other.cache_breaks;
        for (k, v) in &other.break_causes {
            *self.break_causes.entry(k.clone()).or_default() += v;
        }
        self.compactions += other.compactions;
        self.summarizer_calls += other.summarizer_calls;
        self.no_history += other.no_history;
        self.no_request += other.no_request;
        self.fallbacks += other.fallbacks;
        self.quarantines += other.quarantines;
        self.rerefs += other.rerefs;
        self.rerefs_found += other.rerefs_found;
    }

    /// Computes cost and rates from the counts.
    pub fn finish(&mut self, prices: &Prices) {
        self.cost = prices.cost(self.fresh_tokens, self.cached_tokens, self.output_tokens);
        self.cache_hit_rate = if self.input_tokens == 0 {
            0.0
        } else {
            self.cached_tokens as f64 / self.input_tokens as f64
        };
        self.reref_rate = if self.rerefs == 0 {
            1.0
        } else {
            self.rerefs_found as f64 / self.rerefs as f64
        };
    }

    /// The figure a gate names (`cost`, `tokens`, `cached`, `fresh`, `hit`, `breaks`,
    /// `compactions`, `summarizer`, `nohistory`, `norequest`, `fallbacks`, `quarantines`,
    /// `reref`, `calls`).
    pub fn metric(&self, name: &str) -> Option<f64> {
        Some(match name {
            "cost" => self.cost,
            "tokens" | "input" => self.input_tokens as f64,
            "cached" => self.cached_tokens as f64,
            "fresh" => self.fresh_tokens as f64,
            "hit" | "hitrate" => self.cache_hit_rate,
            "breaks" => self.cache_breaks as f64,
            "compactions" => self.compactions as f64,
            "summarizer" => self.summarizer_calls as f64,
            "nohistory" => self.no_history as f64,
            "norequest" => self.no_request as f64,
            "fallbacks" => self.fallbacks as f64,
            "quarantines" => self.quarantines as f64,
            "reref" => self.reref_rate,
            "calls" => self.calls as f64,
            _ => return None,
        })
    }
}

/// The names [`Figures::metric`] knows, for error messages.
pub const METRICS: &str = "cost, tokens, cached, fresh, hit, breaks, compactions, summarizer, nohistory, norequest, fallbacks, quarantines, reref, calls";

impl Meter {
    /// A meter counting a break below `break_share` of the previous call's tokens.
    pub fn new(break_share: f64) -> Self {
        Meter {
            break_share,
            previous: None,
            summaries: HashSet::new(),
            seen_text: HashSet::new(),
            history_text: String::new(),
            last_request: None,
            row: Figures::default(),
        }
    }

    /// Starts another conversation: the next call has no previous call and no history.
    pub fn next_conversation(&mut self) {
        self.previous = None;
        self.summaries.clear();
        self.seen_text.clear();
        self.history_text.clear();
        self.last_request = None;
    }

    /// Counts summaries of `context` the meter had not seen; returns whether there were any.
    pub fn note_summaries(&mut self, context: &[Arc<Message>]) -> bool {
        let mut any = false;
        for m in context {
            if matches!(m.role(), Role::CompactionSummary | Role::BranchSummary)
                && self.summaries.insert(m.id.clone())
            {
                self.row.compactions += 1;
                any = true;
            }
        }
        any
    }

    /// Counts one model call: its blocks, which engine answered, whether a compaction happened
    /// since the previous call, and what it lacked.
    pub fn call(&mut self, now: Shape, engine: &str, compacted: bool, lacks: &[Violation]) {
        let total: u64 = now.iter().map(|(_, t)| t).sum();
        self.row.calls += 1;
        self.row.input_tokens += total;
        let cached = match &self.previous {
            None => 0,
            Some((prev, prev_engine)) => {
                let (cached, first_diff) = shared_prefix(prev, &now);
                let prev_total: u64 = prev.iter().map(|(_, t)| t).sum();
                if (cached as f64) < self.break_share * prev_total as f64 {
                    self.row.cache_breaks += 1;
                    let cause =
                        break_cause(prev, &now, first_diff, compacted, prev_engine != engine);
                    *self.row.break_causes.entry(cause.to_owned()).or_default() += 1;
                }
                cached
            }
        };
        self.row.cached_tokens += cached;
        self.row.fresh_tokens += total - cached;
        self.row.no_history += u64::from(lacks.contains(&Violation::NoHistory));
        self.row.no_request += u64::from(lacks.contains(&Violation::MissingRequest));
        self.previous = Some((now, engine.to_owned()));
    }

    /// Counts the re-references of a turn's request (once per request), `history` being the
    /// session's context at the call (every message any call's context held is remembered,
    /// so compacted ones still count as named earlier), and `sent` the call's context.
    pub fn rerefs(&mut self, request: &Message, history: &[Arc<Message>], sent: &Shape) {
        if self.last_request.as_deref() == Some(request.id.as_str()) {
            return;
        }
        self.last_request = Some(request.id.clone());
        for m in history {
            if m.id != request.id && self.seen_text.insert(m.id.clone()) {
                self.history_text.push_str(&m.text());
                self.history_text.push('\n');
            }
        }
        let context: String = sent
            .iter()
            .filter_map(|(b, _)| match b {
                Block::Addition(a) => Some(a.clone()),
                Block::Message(m) if m.id != request.id => Some(m.text()),
                Block::Message(_) => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        let text = request.text();
        let mut named = HashSet::new();
        for (_, id) in find_identifiers(&text) {
            if !named.insert(id) || !self.history_text.contains(id) {
                continue;
            }
            self.row.rerefs += 1;
            self.row.rerefs_found += u64::from(context.contains(id));
        }
    }
}

/// One run of the comparison: an engine over one transcript at one window.
#[derive(Clone, Debug)]
pub struct Job {
    /// The engine's label (`legacy`, or the file as given).
    pub engine: String,
    /// The host config with the engine in the slot.
    pub config: Config,
    /// The transcript.
    pub transcript: PathBuf,
    /// The window in tokens.
    pub window: u64,
}

/// One row: an engine over one transcript at one window.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// The engine's label.
    pub engine: String,
    /// The transcript.
    pub transcript: PathBuf,
    /// The window in tokens.
    pub window: u64,
    /// Conversations in the transcript.
    pub conversations: usize,
    /// The figures.
    #[serde(flatten)]
    pub figures: Figures,
    /// Where the engine's time went, per lifecycle method and `host.*` function.
    pub times: Vec<MethodTimes>,
    /// The first quarantine's error, when one happened.
    pub quarantine: Option<String>,
    /// How long this row's replay took, in ms.
    pub wall_ms: u64,
    #[serde(skip)]
    /// The raw times, for totals.
    pub raw_times: CallTimes,
}

/// How to compare.
#[derive(Clone, Debug)]
pub struct CompareOptions {
    /// A call reusing less than this share of the previous call's tokens is a break.
    pub break_share: f64,
    /// The prices applied.
    pub prices: Prices,
    /// Replays at once.
    pub threads: usize,
    /// A scratch directory for the replayed sessions' transcripts.
    pub scratch: PathBuf,
}

/// Runs every job, `threads` at once; `on_done` sees each row as it finishes (from the worker
/// threads). Rows come back in job order.
pub fn run(
    jobs: Vec<Job>,
    opts: &CompareOptions,
    on_done: &(dyn Fn(&Job, &Result<Row>) + Sync),
) -> Vec<Result<Row>> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<Row>>>> =
        Mutex::new((0..jobs.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..opts.threads.clamp(1, jobs.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = jobs.get(i) else { break };
                    let dir = opts.scratch.join(format!("job-{i}"));
                    let r = run_job(job, opts, &dir);
                    on_done(job, &r);
                    if let Ok(mut all) = results.lock() {
                        all[i] = Some(r);
                    }
                }
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_default()
        .into_iter()
        .map(|r| {
            r.unwrap_or_else(|| {
                Err(Error::Task {
                    task: "compare",
                    message: "a replay did not finish".into(),
                })
            })
        })
        .collect()
}

/// Replays one job's transcript, every conversation in turn, and measures it.
pub fn run_job(job: &Job, opts: &CompareOptions, dir: &Path) -> Result<Row> {
    let started = Instant::now();
    std::fs::create_dir_all(dir).map_err(|e| Error::io("create compare directory", dir, e))?;
    let mut config = job.config.clone();
    config.host.window = job.window;
    config.host.durability = Durability::None;
    let host = Host::new(config)?;
    let import = crate::transcript::import(&job.transcript)?;
    let counter = crate::tokens::counter(host.config().host.tokenizer)?;
    let tokens = TokenCache::new(counter);
    let mut meter = Meter::new(opts.break_share);
    let (mut times, mut quarantine) = (CallTimes::default(), None);
    let conversations = import.sessions.len();
    for (n, source) in import.sessions.into_iter().enumerate() {
        meter.next_conversation();
        for m in &source.messages {
            if m.role() == Role::Assistant {
                meter.row.output_tokens += tokens.message(&Arc::new(m.clone()));
            }
        }
        let file = dir.join(format!("conversation-{}.jsonl", n + 1));
        let mut spec = SessionSpec::new(format!("compare-{}", n + 1), &file);
        spec.system_prompt = source.system_prompt.clone();
        let mut session = Session::create(host.session_setup(&spec), &file, "")?;
        crate::replay::drive(&mut session, source.messages, |s, a| {
            let compacted = meter.note_summaries(s.context());
            let now = shape(a, &tokens);
            if let Some(request) = s.current_request() {
                meter.rerefs(request, s.context(), &now);
            }
            meter.row.fallbacks += u64::from(a.fallback);
            meter.call(now, &a.engine, compacted, &a.violations);
        })?;
        meter.note_summaries(session.context());
        times.merge(session.call_times());
        times.merge(&session.host_times());
        if let Some(q) = session.quarantine() {
            meter.row.quarantines += 1;
            quarantine.get_or_insert(q.to_string());
        }
        session.close()?;
    }
    let summary = times.summary();
    meter.row.summarizer_calls = summary
        .iter()
        .filter(|t| t.method.contains("summarize"))
        .map(|t| t.calls)
        .sum();
    meter.row.finish(&opts.prices);
    let _ = std::fs::remove_dir_all(dir);
    Ok(Row {
        engine: job.engine.clone(),
        transcript: job.transcript.clone(),
        window: job.window,
        conversations,
        figures: meter.row,
        times: summary,
        quarantine,
        wall_ms: started.elapsed().as_millis() as u64,
        raw_times: times,
    })
}

/// One engine's totals at one window over every transcript.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Total {
    /// The engine's label.
    pub engine: String,
    /// The window in tokens.
    pub window: u64,
    /// The figures summed over the transcripts.
    #[serde(flatten)]
    pub figures: Figures,
    /// Where the engine's time went over all transcripts.
    pub times: Vec<MethodTimes>,
}

/// Sums rows per engine and window, in the order they first appear.
pub fn totals(rows: &[Row], prices: &Prices) -> Vec<Total> {
    let mut out: Vec<(Total, CallTimes)> = Vec::new();
    for r in rows {
        let at = out
            .iter()
            .position(|(t, _)| t.engine == r.engine && t.window == r.window);
        let (total, times) = match at {
            Some(i) => &mut out[i],
            None => {
                out.push((
                    Total {
                        engine: r.engine.clone(),
                        window: r.window,
                        figures: Figures::default(),
                        times: Vec::new(),
                    },
                    CallTimes::default(),
                ));
                let last = out.len() - 1;
                &mut out[last]
            }
        };
        total.figures.add(&r.figures);
        times.merge(&r.raw_times);
    }
    out.into_iter()
        .map(|(mut t, times)| {
            t.figures.finish(prices);
            t.times = times.summary();
            t
        })
        .collect()
}

/// One condition of a gate: `metric op value`.
#[derive(Clone, Debug, PartialEq)]
pub struct Condition {
    /// The figure ([`METRICS`]).
    pub metric: String,
    /// `<=`, `<`, `>=`, `>`, `==` or `!=`.
    pub op: String,
    /// The bound.
    pub value: f64,
}

impl Condition {
    /// Whether `x` meets the condition.
    pub fn holds(&self, x: f64) -> bool {
        const EPS: f64 = 1e-9;
        match self.op.as_str() {
            "<=" => x <= self.value + EPS,
            "<" => x < self.value,
            ">=" => x + EPS >= self.value,
            ">" => x > self.value,
            "==" => (x - self.value).abs() <= EPS,
            _ => (x - self.value).abs() > EPS,
        }
    }
}

impl std::fmt::Display for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}{}", self.metric, self.op, self.value)
    }
}

/// Parses `cost<=1.05,reref>=0.9,nohistory==0`.
pub fn parse_gate(text: &str) -> std::result::Result<Vec<Condition>, String> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some(at) = part.find(['<', '>', '=', '!']) else {
            return Err(format!(
                "`{part}` has no comparison (write metric<=N, >=, <, >, == or !=)"
            ));
        };
        let (metric, rest) = part.split_at(at);
        let op_len = if rest.len() > 1 && rest.as_bytes()[1] == b'=' {
            2
        } else {
            1
        };
        let (op, value) = rest.split_at(op_len);
        if !matches!(op, "<=" | "<" | ">=" | ">" | "==" | "!=") {
            return Err(format!("`{part}`: `{op}` is not a comparison"));
        }
        let metric = metric.trim().to_ascii_lowercase();
        if Figures::default().metric(&metric).is_none() {
            return Err(format!("`{part}`: no figure `{metric}` (one of {METRICS})"));
        }
        let value: f64 = value
            .trim()
            .parse()
            .map_err(|_| format!("`{part}`: `{}` is not a number", value.trim()))?;
        out.push(Condition {
            metric,
            op: op.to_owned(),
            value,
        });
    }
    if out.is_empty() {
        return Err("the gate names no condition".into());
    }
    Ok(out)
}

/// The figure a gate or a baseline column shows: the row's own, or its ratio to the
/// baseline's (`reref` and `hit` are rates and stay absolute; a zero baseline gives the
/// row's value when the row is zero too, else infinity).
pub fn relative(metric: &str, row: &Figures, baseline: Option<&Figures>) -> Option<f64> {
    let x = row.metric(metric)?;
    let Some(b) = baseline else { return Some(x) };
    if matches!(
        metric,
        "reref" | "hit" | "hitrate" | "nohistory" | "norequest" | "quarantines"
    ) {
        return Some(x);
    }
    let base = b.metric(metric)?;
    Some(if base == 0.0 {
        if x == 0.0 { 1.0 } else { f64::INFINITY }
    } else {
        x / base
    })
}

#[cfg(test)]
#[path = "compare_tests.rs"]
mod tests;
