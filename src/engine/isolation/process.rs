//! [`ChildProc`]: one engine child as the parent sees it — spawn, send, wait with a deadline,
//! kill and reap. Its stdout is read by a thread into a channel (so waits can time out), its
//! stderr by another into the parent's log (the last lines are kept to explain a death).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::ChildCommand;
use super::wire::{FromChild, HostOutWire, ToChild};
use crate::engine::api::HostError;

/// Lines of the child's log kept to explain its death.
const LOG_TAIL: usize = 8;

/// The longest log line of a child relayed whole (longer ones are cut, as an engine's own log
/// lines are).
const LOG_LINE_BYTES: usize = 4 << 10;

/// Log lines of a child relayed per second at most; the rest are counted and reported.
const LOG_LINES_PER_SECOND: u32 = 100;

/// How often a waiting parent looks at its cancel flag.
const CANCEL_POLL: Duration = Duration::from_millis(20);

/// How long a child that closed its stdout gets to exit before it is killed.
const EXIT_WAIT: Duration = Duration::from_millis(500);

/// Why a call to the child produced no reply.
#[derive(Debug)]
pub(super) enum Stop {
    /// Past deadline + grace: the child was killed and reaped (`cancelled`: the caller had
    /// asked the call to stop, and it did not).
    TimedOut {
        /// The call had been cancelled.
        cancelled: bool,
    },
    /// The child died (or was already dead): how, in words, and whether of a failed
    /// allocation.
    Died {
        /// Exit status and last log lines.
        how: String,
        /// It died of a failed allocation (its address-space limit).
        out_of_memory: bool,
    },
}

/// A host request from the child: its API path, the name the script used, the arguments.
pub(super) type HostRequest = (Vec<String>, String, Vec<serde_json::Value>);

/// One running engine child.
#[derive(Debug)]
pub(super) struct ChildProc {
    child: Child,
    stdin: Option<ChildStdin>,
    replies: mpsc::Receiver<FromChild>,
    log_tail: Arc<Mutex<VecDeque<String>>>,
    dead: bool,
}

impl ChildProc {
    /// Starts `cmd`; `label` tags its log lines.
    ///
    /// A reply line longer than `max_line` bytes ends the child: what it says no longer fits
    /// any result the limits allow, and reading it whole would let a runaway child fill the
    /// parent's memory.
    pub(super) fn spawn(cmd: &ChildCommand, label: &str, max_line: usize) -> Result<Self, String> {
        let mut command = Command::new(&cmd.program);
        command
            .args(&cmd.args)
            .envs(cmd.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().map_err(|e| {
            format!(
                "cannot start the engine process {}: {e}",
                cmd.program.display()
            )
        })?;
        let pid = child.id();
        let stdin = child.stdin.take();
        let (tx, replies) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
            let label = label.to_owned();
            spawn_reader("ctxhost-child-out", move || {
                read_replies(out, &tx, &label, pid, max_line)
            })?;
        }
        let log_tail = Arc::new(Mutex::new(VecDeque::new()));
        if let Some(err) = child.stderr.take() {
            let tail = Arc::clone(&log_tail);
            let label = label.to_owned();
            spawn_reader("ctxhost-child-log", move || {
                relay_log(err, &tail, &label, pid)
            })?;
        }
        Ok(ChildProc {
            child,
            stdin,
            replies,
            log_tail,
            dead: false,
        })
    }

    /// The child's process id.
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the child was killed or found dead (it is never used again).
    pub(super) fn is_dead(&self) -> bool {
        self.dead
    }

    /// Sends one message.
    fn send(&mut self, msg: &ToChild) -> Result<(), ()> {
        let Some(stdin) = self.stdin.as_mut() else {
            return Err(());
        };
        let mut line = serde_json::to_vec(msg).map_err(|_| ())?;
        line.push(b'\n');
        stdin
            .write_all(&line)
            .and_then(|()| stdin.flush())
            .map_err(|_| ())
    }

    /// Sends `msg` and waits for the child's reply, at most `budget` plus the time spent in
    /// `serve` answering the child's `host` requests; past that the child is killed. While
    /// `cancel` is set the child is told to stop its call.
    pub(super) fn exchange(
        &mut self,
        msg: &ToChild,
        budget: Duration,
        cancel: Option<&AtomicBool>,
        serve: &mut dyn FnMut(HostRequest) -> Result<HostOutWire, HostError>,
    ) -> Result<FromChild, Stop> {
        if self.dead {
            return Err(self.died());
        }
        let started = Instant::now();
        if self.send(msg).is_err() {
            return Err(self.died());
        }
        let mut served = Duration::ZERO;
        let mut cancel_sent = false;
        loop {
            let deadline = started + budget + served;
            let now = Instant::now();
            if now >= deadline {
                self.kill();
                return Err(Stop::TimedOut {
                    cancelled: cancel_sent,
                });
            }
            let wait = match cancel {
                Some(_) => (deadline - now).min(CANCEL_POLL),
                None => deadline - now,
            };
            match self.replies.recv_timeout(wait) {
                Ok(FromChild::Host { path, name, args }) => {
                    // Only the waits of the work (a model call, the client's compaction) move
                    // the deadline; the host work itself counts against it, as in process.
                    let (reply, waited) =
                        crate::engine::sandbox::crediting(|| serve((path, name, args)));
                    let reply = reply.map_err(Into::into);
                    served += waited;
                    if self.send(&ToChild::HostReply { reply }).is_err() {
                        return Err(self.died());
                    }
                }
                Ok(reply) => return Ok(reply),
                Err(mpsc::RecvTimeoutError::Disconnected) => return Err(self.died()),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if !cancel_sent && cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
                        cancel_sent = true;
                        if self.send(&ToChild::Cancel).is_err() {
                            return Err(self.died());
                        }
                    }
                }
            }
        }
    }

    /// SIGKILLs the child and reaps it.
    pub(super) fn kill(&mut self) {
        self.dead = true;
        self.stdin.take();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The child stopped answering: reap it (killing it if it does not exit) and say how it
    /// ended.
    fn died(&mut self) -> Stop {
        self.dead = true;
        self.stdin.take();
        let until = Instant::now() + EXIT_WAIT;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(5)),
                _ => {
                    let _ = self.child.kill();
                    break self.child.wait().ok();
                }
            }
        };
        // The log reader may still be draining the last lines.
        std::thread::sleep(Duration::from_millis(20));
        let tail: Vec<String> = self.log_tail.lock().iter().cloned().collect();
        let out_of_memory = tail.iter().any(|l| l.contains("memory allocation of"));
        let status = status.map_or_else(|| "an unknown status".to_owned(), describe);
        let how = match tail.last() {
            Some(last) => {
                format!("the engine process ended with {status}; its last log line: {last}")
            }
            None => format!("the engine process ended with {status}"),
        };
        Stop::Died { how, out_of_memory }
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        if !self.dead {
            self.kill();
        }
    }
}

/// An exit status in words: `exit code 3`, `signal 9 (SIGKILL)`.
fn describe(status: std::process::ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            let name = match sig {
                6 => " (SIGABRT)",
                9 => " (SIGKILL)",
                11 => " (SIGSEGV)",
                15 => " (SIGTERM)",
                _ => "",
            };
            return format!("signal {sig}{name}");
        }
    }
    match status.code() {
        Some(code) => format!("exit code {code}"),
        None => status.to_string(),
    }
}

fn spawn_reader(name: &str, f: impl FnOnce() + Send + 'static) -> Result<(), String> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map(|_| ())
        .map_err(|e| format!("cannot start a thread reading an engine process: {e}"))
}

/// Reads the child's stdout: each protocol line into `tx`; any other line (a test harness's
/// banner, a native library's print) is logged and skipped.
fn read_replies(
    out: std::process::ChildStdout,
    tx: &mpsc::Sender<FromChild>,
    label: &str,
    pid: u32,
    max_line: usize,
) {
    let mut reader = BufReader::new(out);
    let mut line = Vec::new();
    loop {
        match read_line_within(&mut reader, &mut line, max_line) {
            Ok(Line::End) | Err(_) => return,
            Ok(Line::Whole) => {}
            Ok(Line::Cut { dropped }) => {
                // Nothing further is read: the parent sees the child gone and ends it.
                tracing::error!(
                    target: "ctxhost::engine::isolation::child",
                    engine = label,
                    pid,
                    "the engine process wrote a line of {} bytes, over the {max_line} any reply may take; ending it",
                    line.len() + dropped
                );
                return;
            }
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end();
        if text.is_empty() {
            continue;
        }
        match serde_json::from_str::<FromChild>(text) {
            Ok(reply) => {
                if tx.send(reply).is_err() {
                    return;
                }
            }
            Err(e) => tracing::debug!(
                target: "ctxhost::engine::isolation::child",
                engine = label,
                pid,
                "not a protocol line ({e}): {}",
                crate::error::cut_text(text.to_owned(), 200)
            ),
        }
    }
}

/// Relays the child's stderr into the parent's log: each line cut at [`LOG_LINE_BYTES`], at
/// most [`LOG_LINES_PER_SECOND`] a second (the lines dropped are counted in the next one
/// relayed), the last few kept to explain a death.
fn relay_log(
    err: std::process::ChildStderr,
    tail: &Mutex<VecDeque<String>>,
    label: &str,
    pid: u32,
) {
    let mut reader = BufReader::new(err);
    let mut line = Vec::new();
    let (mut window, mut relayed, mut dropped) = (Instant::now(), 0u32, 0u64);
    loop {
        let cut = match read_line_within(&mut reader, &mut line, LOG_LINE_BYTES) {
            Ok(Line::End) | Err(_) => return,
            Ok(Line::Whole) => 0,
            Ok(Line::Cut { dropped }) => dropped,
        };
        let mut text = String::from_utf8_lossy(&line).trim_end().to_owned();
        if cut > 0 {
            text.push_str(&format!(" [{cut} more bytes cut]"));
        }
        if window.elapsed() >= Duration::from_secs(1) {
            (window, relayed) = (Instant::now(), 0);
        }
        if relayed < LOG_LINES_PER_SECOND {
            relayed += 1;
            if dropped > 0 {
                tracing::warn!(target: "ctxhost::engine::isolation::child", engine = label, pid, "{dropped} log line(s) of the engine process dropped (over {LOG_LINES_PER_SECOND} a second)");
                dropped = 0;
            }
            tracing::warn!(target: "ctxhost::engine::isolation::child", engine = label, pid, "{text}");
        } else {
            dropped += 1;
        }
        let mut tail = tail.lock();
        if tail.len() == LOG_TAIL {
            tail.pop_front();
        }
        tail.push_back(text);
    }
}

/// How a line was read.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// The stream ended before any byte of a new line.
    End,
    /// A whole line (without its newline) is in the buffer.
    Whole,
    /// The line was longer than the cap: its first `cap` bytes are in the buffer, and
    /// `dropped` more were read past and thrown away (up to and without its newline).
    Cut { dropped: usize },
}

/// Reads one line into `buf` (cleared first), holding at most `cap` bytes of it however long
/// it is: the rest of an over-long line is consumed in chunks and not kept.
fn read_line_within(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<Line> {
    buf.clear();
    let (mut any, mut dropped) = (false, 0usize);
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok(if !any {
                Line::End
            } else if dropped > 0 {
                Line::Cut { dropped }
            } else {
                Line::Whole
            });
        }
        any = true;
        let (part, newline) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (&chunk[..i], Some(i)),
            None => (chunk, None),
        };
        let room = cap.saturating_sub(buf.len());
        let keep = part.len().min(room);
        buf.extend_from_slice(&part[..keep]);
        dropped += part.len() - keep;
        let used = newline.map_or(part.len(), |i| i + 1);
        reader.consume(used);
        if newline.is_some() {
            return Ok(if dropped > 0 {
                Line::Cut { dropped }
            } else {
                Line::Whole
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_over_the_cap_is_cut_and_the_next_one_is_read_whole() {
        let input = format!("short\n{}\nafter\ntail", "x".repeat(10_000));
        // A small buffer: the long line spans many fills.
        let mut reader = BufReader::with_capacity(64, input.as_bytes());
        let mut buf = Vec::new();
        assert_eq!(
            read_line_within(&mut reader, &mut buf, 100).ok(),
            Some(Line::Whole)
        );
        assert_eq!(buf, b"short");
        assert_eq!(
            read_line_within(&mut reader, &mut buf, 100).ok(),
            Some(Line::Cut { dropped: 9_900 })
        );
        assert_eq!(buf.len(), 100);
        assert_eq!(
            read_line_within(&mut reader, &mut buf, 100).ok(),
            Some(Line::Whole)
        );
        assert_eq!(buf, b"after");
        assert_eq!(
            read_line_within(&mut reader, &mut buf, 100).ok(),
            Some(Line::Whole)
        );
        assert_eq!(buf, b"tail");
        assert_eq!(
            read_line_within(&mut reader, &mut buf, 100).ok(),
            Some(Line::End)
        );
    }
}
