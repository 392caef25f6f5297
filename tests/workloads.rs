//! The three keep-recent engines of `benches/workloads.rs` (Luau, Rhai, native Rust) reproduce
//! the reference outputs of `shared/data/workloads` on both workloads, through the host path
//! (engine call, `check_assemble`, the host's own messages mapped back). The engines and the
//! workload conversion are the bench's own (`benches/common`), so what is benchmarked is what is
//! tested. The same fit as `pipeline` hooks (`benches/pipeline.rs`) does too. Skipped, with a
//! note, when the shared dir is absent.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

#[path = "../benches/common/mod.rs"]
mod bench;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use bench::workloads::{self, BUDGET, Workload, implementations};
use ctxhost::contract::{ResultLimits, check_assemble};

/// Both workloads, built once per test process; `None` when the shared dir is absent.
fn loaded() -> Option<&'static [Workload]> {
    static LOADED: OnceLock<Option<Vec<Workload>>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let shared = bench::shared_dir();
            if !workloads::workloads_dir(&shared).is_dir() {
                eprintln!(
                    "note: skipped, no {} (set CTXHOST_SHARED)",
                    workloads::workloads_dir(&shared).display()
                );
                return None;
            }
            let out = tempfile::tempdir().unwrap();
            Some(workloads::generate(&shared, out.path()).unwrap_or_else(|e| panic!("{e}")))
        })
        .as_deref()
}

/// One `assemble` of each workload by the named implementation, checked against the reference.
fn reproduces_the_reference(engine: &str) {
    let Some(loaded) = loaded() else { return };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let (_, make) = implementations()
        .into_iter()
        .find(|(name, _)| *name == engine)
        .unwrap();
    let services = bench::services();
    let p = bench::params(BUDGET);
    for w in loaded {
        let call = bench::call(Arc::clone(&w.messages), &services, BUDGET);
        let mut e = make(&root);
        let r = e.assemble(&call, &p).unwrap_or_else(|e| panic!("{e}"));
        check_assemble(&r, &ResultLimits::default()).unwrap();
        let got = workloads::check(engine, w, &r).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got, w.spec.reference);
    }
}

#[test]
fn lua_keep_recent_reproduces_the_reference_outputs() {
    reproduces_the_reference("lua");
}

#[test]
fn rhai_keep_recent_reproduces_the_reference_outputs() {
    reproduces_the_reference("rhai");
}

#[test]
fn rust_keep_recent_reproduces_the_reference_outputs() {
    reproduces_the_reference("rust");
}

#[test]
fn lua_keep_recent_by_host_fit_reproduces_the_reference_outputs() {
    reproduces_the_reference("lua host.fit");
}

#[test]
fn rhai_keep_recent_by_host_fit_reproduces_the_reference_outputs() {
    reproduces_the_reference("rhai host::fit");
}

/// Two `assemble`s of each workload by the keep-recent fit as `pipeline` hooks in `lang` (the fit
/// alone as one `project` hook, then among the four cheap hooks of `benches/pipeline.rs`), each
/// checked against the reference: the session's own messages, no hook quarantined, and the
/// `collect` hook's block in the system prompt when it runs.
fn hooks_reproduce_the_reference(lang: &str) {
    let Some(loaded) = loaded() else { return };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let services = bench::services();
    let p = bench::params(BUDGET);
    for w in loaded {
        let call = bench::call(Arc::clone(&w.messages), &services, BUDGET);
        for all in [false, true] {
            let (factory, mut e) = bench::pipeline::pipeline(&root, lang, all);
            for _ in 0..2 {
                let r = e.assemble(&call, &p).unwrap_or_else(|e| panic!("{e}"));
                check_assemble(&r, &ResultLimits::default()).unwrap();
                let got =
                    bench::pipeline::check(lang, w, &r, all).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(got, w.spec.reference);
            }
            // Every hook loaded, and the fit ran in both calls.
            let hooks = factory.hooks();
            assert_eq!(hooks.len(), if all { 5 } else { 1 });
            let fit = hooks.iter().find(|h| h.id == bench::pipeline::FIT).unwrap();
            assert_eq!(fit.status.calls.get("project"), Some(&2), "{fit:?}");
            assert!(hooks.iter().all(|h| h.status.quarantines == 0), "{hooks:?}");
        }
    }
}

#[test]
fn lua_keep_recent_as_pipeline_hooks_reproduces_the_reference_outputs() {
    hooks_reproduce_the_reference("lua");
}

#[test]
fn rhai_keep_recent_as_pipeline_hooks_reproduces_the_reference_outputs() {
    hooks_reproduce_the_reference("rhai");
}

/// The conversion keeps each message's text: the workload's token total survives it.
#[test]
fn converted_messages_keep_the_workload_text() {
    let Some(loaded) = loaded() else { return };
    // `build_workload.py` prints these totals ("est ... tokens").
    let totals = [373_596u64, 2_673_760];
    for (w, total) in loaded.iter().zip(totals) {
        let ours: u64 = w
            .messages
            .iter()
            .map(|m| workloads::tokens(&m.text()))
            .sum();
        assert_eq!(ours, total, "{}", w.spec.name);
        let engines: u64 = w
            .messages
            .iter()
            .map(|m| workloads::message_tokens(m))
            .sum();
        assert_eq!(engines, total, "{}", w.spec.name);
    }
}
