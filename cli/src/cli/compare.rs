//! `ctxhost compare`: several engines over the same transcripts and windows, side by side, in
//! money, prompt-cache reuse, what the model can still find and time; `--gate` for CI.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cli::Outcome;
use crate::report::compare::{self as compare_report, CompareMeta};
use crate::report::group;
use ctxhost::config::Config;
use ctxhost::contract::LEGACY_ID;
use ctxhost::services::tokens::Tokenizer;
use ctxhost::tools::compare::{
    self, CompareOptions, Condition, DEFAULT_BREAK_SHARE, DEFAULT_MODEL, Figures, Job, Prices, Row,
    SCHEMA, Total,
};

/// `ctxhost compare`.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// The transcripts to replay (any format `replay` reads).
    #[arg(required = true, value_name = "TRANSCRIPT")]
    pub transcripts: Vec<PathBuf>,
    /// An engine to compare: a file (.lua, .luau, .rhai) or `legacy`; repeat for each.
    #[arg(long = "engine", value_name = "FILE|legacy", required = true)]
    pub engines: Vec<String>,
    /// A context window in tokens; repeat to compare at several (default: the config's).
    #[arg(long = "window", value_name = "TOKENS", allow_negative_numbers = true, value_parser = super::args::window_tokens)]
    pub windows: Vec<u64>,
    /// A JSON5 config file whose `host` settings apply to every engine.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// How tokens are counted (default: the config's, else estimate).
    #[arg(long, value_name = "estimate|o200k|cl100k")]
    pub tokenizer: Option<Tokenizer>,
    /// The model whose prices apply (from the built-in table or `--prices`).
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// A price table: `{"model": {"input": 3.0, "cachedInput": 0.3, "output": 15.0}}` in
    /// dollars per million tokens (a table of one model needs no `--model`).
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
    /// Show each figure as a ratio to this engine's (`legacy` or a file; added to the engines
    /// when not among them).
    #[arg(long, value_name = "ENGINE")]
    pub baseline: Option<String>,
    /// Exit 1 naming the rows that fail any condition, e.g. `cost<=1.05,reref>=0.9,nohistory==0`
    /// (with `--baseline`, counts and cost are ratios to the baseline's).
    #[arg(long, value_name = "CONDITIONS")]
    pub gate: Option<String>,
    /// A call reusing less than this share of the previous call's tokens is a cache break.
    #[arg(long, value_name = "SHARE", default_value_t = DEFAULT_BREAK_SHARE)]
    pub break_share: f64,
    /// Replays at once (default: the number of cores).
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
    /// One JSON document (schema `ctxhost.compare/1`, see docs/compare.md).
    #[arg(long)]
    pub json: bool,
    /// Also write one self-contained HTML page: per transcript and window, cost and cache hit
    /// rate per model call for every engine, where each compacted, and two engines' contexts of
    /// a call side by side (with `--json`, each row then carries its `callLog`).
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
}

pub(crate) fn run(mut args: CompareArgs, out: &mut dyn Write) -> anyhow::Result<Outcome> {
    if !(0.0..=1.0).contains(&args.break_share) {
        bail!(
            "--break-share must be between 0 and 1, not {}",
            args.break_share
        );
    }
    if let Some(b) = &args.baseline
        && !args.engines.contains(b)
    {
        args.engines.insert(0, b.clone());
    }
    let gate = match &args.gate {
        Some(g) => Some(compare::parse_gate(g).map_err(|e| anyhow::anyhow!("--gate: {e}"))?),
        None => None,
    };
    let (model, prices) = pick_prices(args.model.as_deref(), args.prices.as_deref())?;
    let mut configs = Vec::new();
    for e in &args.engines {
        configs.push((e.clone(), engine_config(&args, e)?));
    }
    for t in &args.transcripts {
        if !t.is_file() {
            bail!("transcript {} not found", t.display());
        }
    }
    let windows = if args.windows.is_empty() {
        vec![configs.first().map_or(32_000, |(_, c)| c.host.window)]
    } else {
        args.windows.clone()
    };
    let mut jobs = Vec::new();
    for &window in &windows {
        for (engine, config) in &configs {
            for t in &args.transcripts {
                jobs.push(Job {
                    engine: engine.clone(),
                    config: config.clone(),
                    transcript: t.clone(),
                    window,
                });
            }
        }
    }
    let scratch = tempfile::Builder::new()
        .prefix("ctxhost-compare-")
        .tempdir()
        .context("create a temporary directory for the replayed sessions")?;
    let opts = CompareOptions {
        break_share: args.break_share,
        prices,
        threads: args
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
        scratch: scratch.path().to_path_buf(),
        record_calls: args.report.is_some(),
    };
    let started = std::time::Instant::now();
    let bar = progress(jobs.len(), args.json);
    let on_done = |job: &Job, _: &ctxhost::Result<Row>| {
        if let Some(bar) = &bar {
            bar.set_message(format!("{} · {}", job.engine, file_name(&job.transcript)));
            bar.inc(1);
        }
    };
    let results = compare::run(jobs.clone(), &opts, &on_done);
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let mut rows = Vec::new();
    for (job, r) in jobs.iter().zip(results) {
        rows.push(r.with_context(|| {
            format!(
                "replay {} through {} at {} tokens",
                job.transcript.display(),
                job.engine,
                job.window
            )
        })?);
    }
    let wall_ms = started.elapsed().as_millis() as u64;
    let totals = compare::totals(&rows, &prices);
    let failures = match &gate {
        Some(g) => gate_failures(g, args.baseline.as_deref(), &rows, &totals),
        None => Vec::new(),
    };
    if let Some(page) = &args.report {
        let meta = CompareMeta {
            engines: args.engines.clone(),
            transcripts: args.transcripts.clone(),
            windows: windows.clone(),
            model: model.clone(),
            prices,
            break_share: args.break_share,
        };
        std::fs::write(page, compare_report::render(&meta, &rows, &totals))
            .with_context(|| format!("write the report {}", page.display()))?;
    }
    let view = View {
        baseline: args.baseline.as_deref(),
        rows: &rows,
        totals: &totals,
    };
    if args.json {
        let doc = serde_json::json!({
            "schema": SCHEMA,
            "model": model,
            "prices": prices,
            "breakShare": args.break_share,
            "windows": windows,
            "engines": args.engines,
            "transcripts": args.transcripts,
            "baseline": args.baseline,
            "totals": totals,
            "rows": rows,
            "gate": gate.as_ref().map(|g| serde_json::json!({
                "conditions": g.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "failures": failures,
                "passed": failures.is_empty(),
            })),
            "wallMs": wall_ms,
        });
        serde_json::to_writer(&mut *out, &doc)?;
        writeln!(out)?;
    } else {
        view.table(out)?;
        writeln!(
            out,
            "\n{} replays ({} engines × {} transcripts × {} windows) in {:.1} s; prices of {model}: ${}/${}/${} per million input/cached/output tokens; break below {:.0}% reuse",
            rows.len(),
            args.engines.len(),
            args.transcripts.len(),
            windows.len(),
            wall_ms as f64 / 1000.0,
            prices.input,
            prices.cached_input,
            prices.output,
            args.break_share * 100.0
        )?;
        if let Some(page) = &args.report {
            writeln!(out, "report: {}", page.display())?;
        }
        if let Some(g) = &gate {
            let names: Vec<String> = g.iter().map(ToString::to_string).collect();
            if failures.is_empty() {
                writeln!(out, "gate {} passed", names.join(","))?;
            } else {
                writeln!(out, "gate {} failed:", names.join(","))?;
                for f in &failures {
                    writeln!(out, "  {f}")?;
                }
            }
        }
    }
    Ok(if failures.is_empty() {
        Outcome::Ok
    } else {
        Outcome::Problems
    })
}

/// The prices to apply: `--model` from `--prices` or the built-in table.
fn pick_prices(model: Option<&str>, file: Option<&Path>) -> anyhow::Result<(String, Prices)> {
    let table = match file {
        Some(f) => compare::load_prices(f)?,
        None => compare::default_prices(),
    };
    let name = match (model, file) {
        (Some(m), _) => m.to_owned(),
        (None, Some(_)) if table.len() == 1 => table.keys().next().cloned().unwrap_or_default(),
        (None, Some(f)) => bail!(
            "{} has {} models; name one with --model ({})",
            f.display(),
            table.len(),
            table.keys().cloned().collect::<Vec<_>>().join(", ")
        ),
        (None, None) => DEFAULT_MODEL.to_owned(),
    };
    match table.get(&name) {
        Some(p) => Ok((name, *p)),
        None => bail!(
            "no prices for model \"{name}\" (known: {}); give your own with --prices FILE",
            table.keys().cloned().collect::<Vec<_>>().join(", ")
        ),
    }
}

/// The config an engine runs with: the discovered (or `--config`) file with the engine in the
/// slot, or `legacy`.
fn engine_config(args: &CompareArgs, engine: &str) -> anyhow::Result<Config> {
    let mut config = if engine == LEGACY_ID {
        let mut c = ctxhost::config::discover(args.config.as_deref())?;
        c.plugins.slots.context_engine = Some(LEGACY_ID.to_owned());
        c
    } else {
        let path = Path::new(engine);
        if !path.is_file() {
            bail!("engine {engine} is neither a file nor `legacy`");
        }
        Config::with_engine_file(args.config.as_deref(), Some(path))?
    };
    if let Some(t) = args.tokenizer {
        config.host.tokenizer = t;
    }
    Ok(config)
}

/// A bar of replays done, for a person at a terminal (none for `--json` or piped output).
fn progress(total: usize, json: bool) -> Option<ProgressBar> {
    let wanted = !json && std::io::stdout().is_terminal() && std::io::stderr().is_terminal();
    wanted.then(|| {
        let style = ProgressStyle::with_template(
            "{spinner:.cyan} comparing [{bar:36.cyan/blue}] {pos}/{len} replays {msg}",
        )
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
        bar.set_style(style);
        bar
    })
}

/// Every row and total that fails a condition, named.
fn gate_failures(
    gate: &[Condition],
    baseline: Option<&str>,
    rows: &[Row],
    totals: &[Total],
) -> Vec<String> {
    let mut out = Vec::new();
    let mut judge = |name: String, f: &Figures, base: Option<&Figures>| {
        for c in gate {
            if let Some(x) = compare::relative(&c.metric, f, base)
                && !c.holds(x)
            {
                out.push(format!("{name}: {} = {} (needs {c})", c.metric, number(x)));
            }
        }
    };
    for t in totals {
        if baseline == Some(t.engine.as_str()) {
            continue;
        }
        let base = baseline.and_then(|b| {
            totals
                .iter()
                .find(|o| o.engine == b && o.window == t.window)
                .map(|o| &o.figures)
        });
        judge(
            format!("{} @ {} (all transcripts)", t.engine, t.window),
            &t.figures,
            base,
        );
    }
    for r in rows {
        if baseline == Some(r.engine.as_str()) {
            continue;
        }
        let base = baseline.and_then(|b| {
            rows.iter()
                .find(|o| o.engine == b && o.window == r.window && o.transcript == r.transcript)
                .map(|o| &o.figures)
        });
        judge(
            format!("{} @ {} {}", r.engine, r.window, file_name(&r.transcript)),
            &r.figures,
            base,
        );
    }
    out
}

fn number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else {
        format!("{x:.3}")
    }
}

fn file_name(p: &Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

struct View<'a> {
    baseline: Option<&'a str>,
    rows: &'a [Row],
    totals: &'a [Total],
}

impl View<'_> {
    fn table(&self, out: &mut dyn Write) -> anyhow::Result<()> {
        let ratio = self.baseline.is_some();
        writeln!(
            out,
            "{:<34} {:>7} {:>6} {:>12} {:>5} {:>9} {:>7} {:>6} {:>7} {:>6} {:>6} {:>5} {:>6} {:>6} {:>14}",
            "engine / transcript",
            "window",
            "calls",
            if ratio { "input (×)" } else { "input tok" },
            "hit%",
            if ratio { "cost (×)" } else { "cost $" },
            "breaks",
            "compct",
            "summrz",
            "nohist",
            "noreq",
            "fallb",
            "reref%",
            "srch%",
            "assemble p95",
        )?;
        for t in self.totals {
            let base = self.baseline.and_then(|b| {
                self.totals
                    .iter()
                    .find(|o| o.engine == b && o.window == t.window)
            });
            let p95 = t.times.iter().find(|m| m.method == "assemble");
            self.line(
                out,
                &clip(&t.engine, 34),
                t.window,
                &t.figures,
                base.map(|b| &b.figures),
                p95.map(|m| m.p95_ms),
            )?;
            for r in self
                .rows
                .iter()
                .filter(|r| r.engine == t.engine && r.window == t.window)
            {
                let base = self.baseline.and_then(|b| {
                    self.rows.iter().find(|o| {
                        o.engine == b && o.window == r.window && o.transcript == r.transcript
                    })
                });
                let p95 = r.times.iter().find(|m| m.method == "assemble");
                self.line(
                    out,
                    &format!("  {}", clip(&file_name(&r.transcript), 32)),
                    r.window,
                    &r.figures,
                    base.map(|b| &b.figures),
                    p95.map(|m| m.p95_ms),
                )?;
            }
        }
        // What broke the cache, and where time went outside assemble, per engine.
        for t in self.totals {
            let causes: Vec<String> = t
                .figures
                .break_causes
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            let times: Vec<String> = t
                .times
                .iter()
                .map(|m| {
                    format!(
                        "{} {}× p50 {:.2} p95 {:.2} total {:.1} ms",
                        m.method, m.calls, m.p50_ms, m.p95_ms, m.total_ms
                    )
                })
                .collect();
            writeln!(out, "\n{} @ {}:", t.engine, t.window)?;
            if !causes.is_empty() {
                writeln!(out, "  cache breaks: {}", causes.join(", "))?;
            }
            writeln!(out, "  time: {}", times.join("; "))?;
            for r in self
                .rows
                .iter()
                .filter(|r| r.engine == t.engine && r.window == t.window)
            {
                if let Some(q) = &r.quarantine {
                    writeln!(out, "  quarantined on {}: {q}", file_name(&r.transcript))?;
                }
            }
        }
        Ok(())
    }

    fn line(
        &self,
        out: &mut dyn Write,
        name: &str,
        window: u64,
        f: &Figures,
        base: Option<&Figures>,
        assemble_p95: Option<f64>,
    ) -> anyhow::Result<()> {
        let (input, cost) = match base {
            Some(b) => (
                format!(
                    "×{:.3}",
                    compare::relative("tokens", f, Some(b)).unwrap_or(0.0)
                ),
                format!(
                    "×{:.3}",
                    compare::relative("cost", f, Some(b)).unwrap_or(0.0)
                ),
            ),
            None => (group(f.input_tokens), format!("{:.4}", f.cost)),
        };
        writeln!(
            out,
            "{:<34} {:>7} {:>6} {:>12} {:>5.1} {:>9} {:>7} {:>6} {:>7} {:>6} {:>6} {:>5} {:>6} {:>6} {:>14}",
            name,
            window,
            f.calls,
            input,
            f.cache_hit_rate * 100.0,
            cost,
            f.cache_breaks,
            f.compactions,
            f.summarizer_calls,
            f.no_history,
            f.no_request,
            f.fallbacks,
            if f.rerefs == 0 {
                "-".to_owned()
            } else {
                format!("{:.1}", f.reref_rate * 100.0)
            },
            if f.rerefs == 0 {
                "-".to_owned()
            } else {
                format!("{:.1}", f.reref_search_rate * 100.0)
            },
            assemble_p95.map_or_else(|| "-".to_owned(), |p| format!("{p:.3} ms")),
        )?;
        Ok(())
    }
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let tail: String = s
            .chars()
            .rev()
            .take(n - 1)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!("…{tail}")
    }
}
