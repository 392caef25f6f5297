//! The engine child on its own: a program that only serves `host.isolation: "process"`
//! instances ([`ctxhost::engine::isolation::child_main`] over stdin and stdout). An embedding program
//! can name it in `host.childCommand` instead of answering `__engine-child` in its own `main`;
//! the isolation tests start it (`CARGO_BIN_EXE_ctxhost-engine-child`).

/// Counts what each engine thread allocates, so the VM's memory cap sees the copies a Rhai
/// script makes by plain assignment (`a = [a, a]`) and stops it at its next operation, as in
/// the `ctxhost` program's own children; without it such an engine ran on to deadline + grace.
#[global_allocator]
static ALLOC: ctxhost::MeteredAlloc = ctxhost::MeteredAlloc;

fn main() {
    std::process::exit(ctxhost::engine::isolation::child_main());
}
