//! One `ctxhost serve --stdio` child as the bridge sees it: requests written, answers read, and
//! how each request ended (answered, or the child killed under it).

use super::*;

/// One `serve --stdio` child: its stdin, and its stdout lines (the channel closes at EOF).
pub(crate) struct Serve {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    next: u64,
}

/// What became of one request.
pub(crate) enum Outcome {
    Answered(Value),
    /// The child died (or was killed) before its answer came.
    Died,
}

impl Serve {
    pub(crate) fn spawn(state: &Path, engine: &Path, home: &Path) -> Serve {
        let log = std::env::var("CTXHOST_KILL_LOG").ok();
        let mut child = Command::new(env!("CARGO_BIN_EXE_ctxhost"))
            .args(["serve", "--stdio", "--state-dir"])
            .arg(state)
            .arg("--engine")
            .arg(engine)
            .env("CTXHOST_LOG", log.as_deref().unwrap_or("off"))
            .env_remove("CTXHOST_CONFIG")
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", "/nonexistent/ctxhost-test-config")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(if log.is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .spawn()
            .expect("spawn ctxhost serve");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Serve {
            child,
            stdin,
            lines,
            next: 1,
        }
    }

    /// Writes a request; false when the child's stdin is gone.
    pub(crate) fn write(&mut self, method: &str, params: &Value) -> Option<u64> {
        let id = self.next;
        self.next += 1;
        let frame = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        (writeln!(self.stdin, "{frame}").is_ok() && self.stdin.flush().is_ok()).then_some(id)
    }

    /// Waits for the answer to `id` until `until` (then `None`), answering what the child asks
    /// back as the bridge does when OpenClaw offers no model call.
    pub(crate) fn wait(&mut self, id: u64, until: Option<Instant>) -> Option<Outcome> {
        loop {
            let line = match until {
                Some(t) => match self
                    .lines
                    .recv_timeout(t.saturating_duration_since(Instant::now()))
                {
                    Ok(l) => l,
                    Err(RecvTimeoutError::Timeout) => return None,
                    Err(RecvTimeoutError::Disconnected) => return Some(Outcome::Died),
                },
                None => match self.lines.recv_timeout(Duration::from_secs(60)) {
                    Ok(l) => l,
                    Err(RecvTimeoutError::Timeout) => panic!("no answer to request {id} in 60 s"),
                    Err(RecvTimeoutError::Disconnected) => return Some(Outcome::Died),
                },
            };
            let frame: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
            if frame.get("method").is_some() {
                if let Some(asked) = frame.get("id") {
                    let reply = json!({"jsonrpc": "2.0", "id": asked,
                        "error": {"code": -32010, "message": "no model call here"}});
                    let _ = writeln!(self.stdin, "{reply}");
                    let _ = self.stdin.flush();
                }
                continue;
            }
            if frame["id"] == id {
                return Some(Outcome::Answered(frame));
            }
        }
    }

    /// The child's pid (the Postgres serve test signals it: SIGSTOP, SIGCONT).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, by the child's own handle.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill(); // an error means it had already exited
        let _ = self.child.wait();
    }

    /// Closes stdin and waits for a clean exit.
    pub(crate) fn close(mut self) {
        drop(self.stdin);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the last child exits cleanly: {status}");
    }
}
