//! Both isolation modes for one test: an engine VM on a worker thread of this process
//! (`thread`, the default) or in a child process of its own (`process`, the library's
//! `ctxhost-engine-child` program, which cargo builds for this test binary). A finding about
//! untrusted engines holds only when it holds in both, in both languages:
//! [`each_language_and_mode!`] runs one case four times.

#![allow(clippy::expect_used)] // test code: a panic is the failure report

use std::path::PathBuf;

use ctxhost::config::Config;
use ctxhost::contract::limits::Isolation;
use ctxhost::engine::isolation::ChildCommand;
use ctxhost::runtime::Host;

/// Runs each case in Lua and Rhai, each in thread and in process isolation:
/// `name => f(args);` makes `name::{lua_thread, lua_process, rhai_thread, rhai_process}`,
/// calling `f(Lang, Isolation, args)` (awaited on a multi-threaded runtime after `async:`).
#[allow(unused_macros)]
macro_rules! each_language_and_mode {
    (@one $name:ident, $f:path, [$($arg:expr),*], $($await:tt)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            use $crate::common::engine::Lang;
            use ctxhost::contract::limits::Isolation;

            each_language_and_mode!(@test lua_thread, $f, Lang::Lua, Isolation::Thread, [$($arg),*], $($await)?);
            each_language_and_mode!(@test lua_process, $f, Lang::Lua, Isolation::Process, [$($arg),*], $($await)?);
            each_language_and_mode!(@test rhai_thread, $f, Lang::Rhai, Isolation::Thread, [$($arg),*], $($await)?);
            each_language_and_mode!(@test rhai_process, $f, Lang::Rhai, Isolation::Process, [$($arg),*], $($await)?);
        }
    };
    (@test $test:ident, $f:path, $lang:expr, $mode:expr, [$($arg:expr),*], await) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            $f($lang, $mode $(, $arg)*).await;
        }
    };
    (@test $test:ident, $f:path, $lang:expr, $mode:expr, [$($arg:expr),*], ) => {
        #[test]
        fn $test() {
            $f($lang, $mode $(, $arg)*);
        }
    };
    (async: $($name:ident => $f:path $(, $arg:expr)*;)*) => {$(
        each_language_and_mode!(@one $name, $f, [$($arg),*], await);
    )*};
    ($($name:ident => $f:path $(, $arg:expr)*;)*) => {$(
        each_language_and_mode!(@one $name, $f, [$($arg),*], );
    )*};
}

/// The library's engine child program (`src/bin/engine_child.rs`).
pub fn engine_child() -> ChildCommand {
    ChildCommand {
        program: PathBuf::from(env!("CARGO_BIN_EXE_ctxhost-engine-child")),
        args: Vec::new(),
        env: Vec::new(),
    }
}

/// A host for `config` with its engine in `mode` (the child program for `process`).
pub fn host_in(mut config: Config, mode: Isolation) -> Host {
    config.host.isolation = mode;
    Host::builder(config)
        .child_command(engine_child())
        .build()
        .expect("host")
}
