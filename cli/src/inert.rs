//! Text an engine wrote (a `systemPromptAddition`, message bodies, names, log lines, errors) is
//! untrusted: on a terminal an ESC starts a CSI or OSC sequence (clear the screen, retitle the
//! window, forge a hyperlink), a CR overwrites the line it is on, a U+202E turns what follows
//! around. Everything the command prints goes through [`escape`], so such characters show as
//! `\u001b`, `\r`, `\u202e` and do nothing.
//!
//! The escapes are JSON's, so the same writer is safe on `--json` output too: serde_json
//! never writes a raw control character, and a bidi or C1 character inside a JSON string
//! written as `\u202e` decodes to the same string.

use std::io::{self, Write};

pub(crate) use ctxhost::contract::inert::escape;

/// A writer that passes everything through [`escape`]. A UTF-8 sequence split across two
/// writes is held back until it is whole; bytes that are not UTF-8 pass unchanged (a terminal
/// shows them as replacement characters, they start no sequence).
pub(crate) struct Inert<W: Write> {
    inner: W,
    pending: Vec<u8>,
}

impl<W: Write> Inert<W> {
    /// Escapes what is written to `inner`.
    pub(crate) fn new(inner: W) -> Self {
        Inert {
            inner,
            pending: Vec::new(),
        }
    }
}

impl<W: Write> Write for Inert<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut bytes = std::mem::take(&mut self.pending);
        bytes.extend_from_slice(buf);
        let mut rest: &[u8] = &bytes;
        while !rest.is_empty() {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    self.inner.write_all(escape(s).as_bytes())?;
                    rest = &[];
                }
                Err(e) => {
                    let (good, bad) = rest.split_at(e.valid_up_to());
                    // `good` is valid UTF-8 by construction.
                    self.inner
                        .write_all(escape(&String::from_utf8_lossy(good)).as_bytes())?;
                    match e.error_len() {
                        // An incomplete sequence at the end: wait for the rest of it.
                        None => {
                            self.pending = bad.to_vec();
                            rest = &[];
                        }
                        Some(n) => {
                            self.inner.write_all(&bad[..n])?;
                            rest = &bad[n..];
                        }
                    }
                }
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.pending.is_empty() {
            let pending = std::mem::take(&mut self.pending);
            self.inner.write_all(&pending)?;
        }
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a panic is a failure

    use super::*;

    #[test]
    fn the_writer_escapes_across_split_writes_and_keeps_json_valid() {
        let mut w = Inert::new(Vec::new());
        let text = "x\u{202e}y\u{1b}z";
        let bytes = text.as_bytes();
        // Split inside U+202E's three bytes.
        w.write_all(&bytes[..2]).unwrap();
        w.write_all(&bytes[2..]).unwrap();
        w.flush().unwrap();
        assert_eq!(String::from_utf8(w.inner).unwrap(), "x\\u202ey\\u001bz");

        let mut w = Inert::new(Vec::new());
        serde_json::to_writer(&mut w, &serde_json::json!({"a": "\u{202e}\u{1b}"})).unwrap();
        let back: serde_json::Value = serde_json::from_slice(&w.inner).unwrap();
        assert_eq!(back["a"], "\u{202e}\u{1b}");
    }
}
