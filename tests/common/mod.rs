//! Shared test helpers: where the shared transcripts live.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

pub mod engine;
pub mod fake_model;
pub mod replay;

/// Runs each case in both languages, one test per language (tokio's `rt_test!` habit), so a case
/// cannot be added for one language and forgotten for the other: `name => f(args);` makes the
/// tests `name::lua` and `name::rhai`, calling `f(Lang::Lua, args)` and `f(Lang::Rhai, args)`.
/// `async:` first makes each a multi-threaded tokio test awaiting `f`; a bare `name, ...` list
/// calls the function of that name. The one macro for "the same body in Lua and in Rhai".
#[allow(unused_macros)]
macro_rules! both_languages {
    (async: $($name:ident),+ $(,)?) => { both_languages!(async: $($name => $name;)+); };
    (async: $($name:ident => $f:path $(, $arg:expr)*;)*) => {$(
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn lua() {
                $f($crate::common::engine::Lang::Lua $(, $arg)*).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn rhai() {
                $f($crate::common::engine::Lang::Rhai $(, $arg)*).await;
            }
        }
    )*};
    ($($name:ident),+ $(,)?) => { both_languages!($($name => $name;)+); };
    ($($name:ident => $f:path $(, $arg:expr)*;)*) => {$(
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[test]
            fn lua() {
                $f($crate::common::engine::Lang::Lua $(, $arg)*);
            }

            #[test]
            fn rhai() {
                $f($crate::common::engine::Lang::Rhai $(, $arg)*);
            }
        }
    )*};
}

/// Runs each case on every example engine of `scripts/` (the one list of them): `test =>
/// f(args);` makes `<engine>::test` for each, awaiting `f("<engine>", args)` on a
/// multi-threaded tokio runtime.
#[allow(unused_macros)]
macro_rules! each_example_engine {
    (@engines [$($engine:ident)*] $tests:tt) => {
        $( each_example_engine!(@one $engine $tests); )*
    };
    (@one $engine:ident { $($test:ident => $f:path $(, $arg:expr)*;)* }) => {
        mod $engine {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    $f(stringify!($engine) $(, $arg)*).await;
                }
            )*
        }
    };
    ($($tests:tt)*) => {
        each_example_engine!(@engines
            [recent_turns delegating tool_pruner pinned_facts hierarchical recall]
            { $($tests)* });
    };
}

use std::future::Future;
use std::path::PathBuf;

/// Runs `future` to its end on a runtime of its own (an async summarizer, from a test).
pub fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// The repository root, whichever package of the workspace (the library, or `cli/`) the test
/// binary belongs to.
pub fn repo_root() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    if dir.join("stdlib").is_dir() {
        dir
    } else {
        dir.parent().map(PathBuf::from).unwrap_or(dir)
    }
}

/// `../shared` beside the checkout (CI lays a copy there), or `$CTXHOST_SHARED`.
pub fn shared_dir() -> PathBuf {
    match std::env::var_os("CTXHOST_SHARED") {
        Some(p) => PathBuf::from(p),
        None => repo_root().join("../shared"),
    }
}

/// A shared transcript by file name, as a command-line argument.
pub fn transcript_arg(name: &str) -> String {
    shared_dir()
        .join("data/transcripts")
        .join(name)
        .display()
        .to_string()
}

/// A file under `tests/fixtures` (e.g. `lua/noop.lua`), as a command-line argument.
pub fn fixture_arg(name: &str) -> String {
    repo_root()
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

/// Every transcript file in `shared/data/transcripts`, sorted by name.
pub fn shared_transcripts() -> Vec<PathBuf> {
    let dir = shared_dir().join("data/transcripts");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(|n| n.to_str()) != Some("SOURCES.md"))
        .collect();
    files.sort();
    // A suite over no transcripts would pass having tested nothing.
    assert!(
        !files.is_empty(),
        "no shared transcripts in {} (set CTXHOST_SHARED to the shared folder)",
        dir.display()
    );
    files
}
