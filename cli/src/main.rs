//! The `ctxhost` command-line tool: parse, run, map the outcome to an exit code
//! (0 ok, 1 problems found, 2 error).

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

/// Counts what each engine thread allocates, so a Rhai engine's memory cap sees copies no
/// guarded builtin does (`ctxhost::Metered`), over mimalloc: a replay holds a whole transcript
/// in millions of small allocations, which glibc's malloc keeps in more memory (per-chunk
/// headers, a 32-byte minimum, and free memory stranded in each thread's arena).
#[global_allocator]
static ALLOC: ctxhost::Metered<mimalloc::MiMalloc> = ctxhost::Metered(mimalloc::MiMalloc);

mod cli;
mod inert;
mod install;
mod report;

/// mimalloc's `mi_option_arena_eager_commit` and `mi_option_purge_delay`: their places in
/// `enum mi_option_e` of the mimalloc.h that libmimalloc-sys 0.1.49 bundles (pinned in
/// Cargo.toml; the crate does not name these two).
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Has mimalloc commit memory as it is used and give freed pages back at once (its defaults
/// commit its first arena eagerly and keep freed pages a while): a 20,000-message replay peaked
/// at 114 MB RSS with the defaults, 64 MB with these, in about the same time. The options must
/// be set before the first allocation reserves that arena, so on Linux this runs as an ELF
/// constructor, before Rust's `main` (elsewhere first thing in `main`).
#[allow(unsafe_code)] // mimalloc's option setter is a C function; see the SAFETY note
extern "C" fn tune_allocator() {
    // SAFETY: `mi_option_set` is documented as not thread-safe; it runs before this program
    // starts any thread (a constructor, or the start of `main`), with options mimalloc.h
    // defines (see the constants).
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0);
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0);
    }
}

/// Runs [`tune_allocator`] when the program is loaded, before any allocation.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)] // placing a constructor is unsafe by definition; it only sets two options
#[used]
#[unsafe(link_section = ".init_array")]
static TUNE_ALLOCATOR: extern "C" fn() = tune_allocator;

fn main() -> ExitCode {
    #[cfg(not(target_os = "linux"))]
    tune_allocator();
    // `host.isolation: "process"` starts this program again as an engine's child.
    if std::env::args().nth(1).as_deref() == Some(ctxhost::engine::isolation::CHILD_ARG) {
        tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("CTXHOST_LOG")
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .with_ansi(false)
            .with_writer(std::io::stderr)
            .init();
        let code = ctxhost::engine::isolation::child_main();
        return ExitCode::from(u8::try_from(code).unwrap_or(2));
    }
    let args = cli::Args::parse();
    // `check` reports the engine's load warnings itself: the log would print them a second time.
    let default_filter = match args.command {
        cli::args::Command::Check(_) => "warn,ctxhost::engine::script=error",
        // `watch` prints the engine error of each run itself, once.
        cli::args::Command::Watch(_) => "warn,ctxhost::session::dispatch=error",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CTXHOST_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
        )
        // Log lines carry what engines wrote: escaped (`inert`), so no colours of our own either.
        .with_ansi(false)
        .with_writer(|| inert::Inert::new(std::io::stderr()))
        .init();
    let stdout = std::io::stdout();
    // `serve` speaks JSON-RPC on stdout, byte for byte; everything else a person may read on
    // a terminal goes through `inert`.
    let result = if matches!(args.command, cli::args::Command::Serve(_)) {
        let mut out = stdout.lock();
        let r = crate::cli::run(args, &mut out);
        let _ = out.flush();
        r
    } else {
        let mut out = inert::Inert::new(stdout.lock());
        let r = crate::cli::run(args, &mut out);
        let _ = out.flush();
        r
    };
    match result {
        Ok(crate::cli::Outcome::Ok) => ExitCode::SUCCESS,
        Ok(crate::cli::Outcome::Problems) => ExitCode::from(1),
        Err(e) => {
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            eprintln!("ctxhost: {}", inert::escape(&format!("{e:#}")));
            ExitCode::from(2)
        }
    }
}
