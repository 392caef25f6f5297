//! The engine child on its own: a program that only serves `host.isolation: "process"`
//! instances ([`ctxhost::engine::isolation::child_main`] over stdin and stdout). An embedding program
//! can name it in `host.childCommand` instead of answering `__engine-child` in its own `main`;
//! the isolation tests start it (`CARGO_BIN_EXE_ctxhost-engine-child`).

fn main() {
    std::process::exit(ctxhost::engine::isolation::child_main());
}
