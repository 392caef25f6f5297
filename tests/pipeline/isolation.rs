//! Hooks under `host.isolation: "process"`: each script hook's instance runs in a child
//! process of its own, the pipeline answers every call as it does in process, and a failing
//! hook is quarantined alone there too.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::json;

use ctxhost::contract::limits::Isolation;
use ctxhost::engine::isolation::ChildCommand;
use ctxhost::runtime::Host;
use ctxhost::session::Assembly;

use super::builtins::seen;
use super::{assemblies, composed, fixture, pipeline};
use crate::common;

fn child_command() -> ChildCommand {
    ChildCommand {
        program: PathBuf::from(env!("CARGO_BIN_EXE_ctxhost-engine-child")),
        args: Vec::new(),
        env: Vec::new(),
    }
}

#[test]
fn hooks_run_in_child_processes_and_answer_as_they_do_in_process() {
    let mut hooks = vec![("throws", fixture("throws.lua"), json!({}))];
    hooks.extend(composed("rhai"));
    let threaded = pipeline(6_000, &hooks);
    let mut isolated = threaded.clone();
    isolated.host.isolation = Isolation::Process;
    let file = common::shared_transcripts()
        .into_iter()
        .find(|f| f.to_string_lossy().contains("sessionshare"))
        .expect("a transcript with tool calls");

    let run = |host: Host| -> (Vec<Assembly>, Vec<ctxhost::engine::pipeline::HookReport>) {
        let host = Arc::new(host);
        let dir = tempfile::tempdir().expect("tempdir");
        let (calls, _) = common::block_on(assemblies(Arc::clone(&host), &file, dir.path()));
        let engine = host.engine().expect("an engine").expect("loaded");
        (calls, engine.pipeline().expect("the pipeline").hooks())
    };
    let (in_process, _) = run(Host::new(threaded).expect("host"));
    let (in_children, hooks) = run(Host::builder(isolated)
        .child_command(child_command())
        .build()
        .expect("host"));
    for h in &hooks {
        assert_eq!(h.runs_in, "process", "{h:?}");
    }
    let throws = hooks.iter().find(|h| h.id == "throws").expect("throws");
    assert_eq!(throws.status.quarantines, 1, "{throws:?}");
    assert!(
        throws
            .status
            .last_failure
            .as_deref()
            .unwrap_or("")
            .contains("boom"),
        "{throws:?}"
    );
    let pinned = hooks
        .iter()
        .find(|h| h.id == "pinned-facts")
        .expect("pinned");
    assert!(pinned.status.calls["collect"] > 0 && pinned.status.quarantines == 0);
    assert_eq!(in_process.len(), in_children.len());
    for (a, b) in in_process.iter().zip(&in_children) {
        assert!(seen(a) == seen(b), "the calls differ");
        assert_eq!(a.system_prompt_addition, b.system_prompt_addition);
        assert!(
            a.system_prompt_addition
                .as_deref()
                .unwrap_or_default()
                .contains("Pinned fact: Never force-push main.")
        );
    }
}
