//! Transcripts: ctxhost's own append-only JSONL store and importers for recorded agent sessions.
//!
//! - [`store`]: the session file ctxhost writes, in the pi/OpenClaw v3 session format. It is
//!   append-only: earlier bytes are never rewritten, torn lines are reported and skipped.
//! - [`mod@import`]: reads sessions recorded by other agents (pi, Claude Code, Codex, OpenAI Chat
//!   Completions arrays, SWE-agent trajectories) into [`crate::contract::message::Message`]s, detecting the
//!   format from the content.

pub mod import;
pub mod store;

pub use import::{Format, Import, ImportedSession, import};
pub use store::{Durability, TranscriptStore};

use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::contract::client::kind_of;
use crate::contract::message::Message;
use crate::error::{Error, Result};

/// Where a session's entries are kept. The JSONL [`TranscriptStore`] is the one ctxhost ships;
/// an embedder (or a test that needs a failing disk) puts another behind the same seam.
pub trait Store: Send + std::fmt::Debug {
    /// Appends messages as new entries with fresh ids and returns them as stored. On an error
    /// nothing of this call counts as stored, and what was stored before stays as it was.
    fn append(&mut self, messages: Vec<Message>) -> Result<Vec<Arc<Message>>>;
    /// The transcript file; the engine's per-session state is kept beside it.
    fn path(&self) -> &Path;
    /// How many messages the store holds.
    fn len(&self) -> usize;
    /// Whether the store holds no message.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Forces what was appended to durable storage; called at the end of every turn.
    fn sync(&mut self) -> Result<()> {
        Ok(())
    }
}

impl Store for TranscriptStore {
    fn append(&mut self, messages: Vec<Message>) -> Result<Vec<Arc<Message>>> {
        TranscriptStore::append(self, messages)
    }
    fn path(&self) -> &Path {
        TranscriptStore::path(self)
    }
    fn len(&self) -> usize {
        TranscriptStore::len(self)
    }
    fn sync(&mut self) -> Result<()> {
        TranscriptStore::sync(self)
    }
}

/// The largest transcript file the host reads (1 GiB). A larger one is refused before it is
/// read, so a wrong path cannot fill memory.
pub const MAX_TRANSCRIPT_BYTES: u64 = 1 << 30;

/// The longest transcript line the host parses (64 MiB); a longer one is reported and skipped.
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// Reads a whole transcript file within [`MAX_TRANSCRIPT_BYTES`]. Devices and directories are
/// refused by name (`/dev/zero` would never end); pipes are read up to the cap.
pub(crate) fn read_capped(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let refuse = |message: String| Error::Transcript {
        path: path.to_path_buf(),
        line: 0,
        message,
    };
    let file = std::fs::File::open(path).map_err(|e| Error::io("read transcript", path, e))?;
    let meta = file
        .metadata()
        .map_err(|e| Error::io("read transcript", path, e))?;
    let kind = meta.file_type();
    if kind.is_dir() {
        return Err(refuse("is a directory, not a transcript file".into()));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_char_device() || kind.is_block_device() || kind.is_socket() {
            return Err(refuse("is a device, not a transcript file".into()));
        }
    }
    if meta.len() > MAX_TRANSCRIPT_BYTES {
        return Err(refuse(format!(
            "is {} bytes; transcripts over {MAX_TRANSCRIPT_BYTES} bytes are not read",
            meta.len()
        )));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_TRANSCRIPT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("read transcript", path, e))?;
    if bytes.len() as u64 > MAX_TRANSCRIPT_BYTES {
        return Err(refuse(format!(
            "holds more than {MAX_TRANSCRIPT_BYTES} bytes; larger transcripts are not read"
        )));
    }
    Ok(bytes)
}

/// A line that could not be read; it was skipped and every other line was kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineProblem {
    /// 1-based line number in the file (0 when the problem is not tied to a line, as in JSON
    /// documents).
    pub line: usize,
    /// What is wrong with it.
    pub message: String,
}

impl std::fmt::Display for LineProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// One JSONL line that parsed as a JSON object, with its 1-based line number.
pub(crate) struct JsonLine {
    pub(crate) line: usize,
    pub(crate) value: Map<String, Value>,
}

/// The result of splitting a JSONL file: the object lines, the problems, and whether the file
/// ends without a newline.
pub(crate) struct JsonLines {
    pub(crate) lines: Vec<JsonLine>,
    pub(crate) problems: Vec<LineProblem>,
    /// Lines that were kept but repaired (invalid UTF-8 replaced).
    pub(crate) warnings: Vec<LineProblem>,
    pub(crate) missing_final_newline: bool,
}

/// Splits `bytes` into JSON-object lines. Blank lines are ignored; a line that is not valid
/// JSON, or not an object, becomes a [`LineProblem`]; invalid UTF-8 is replaced (U+FFFD) and
/// the line kept, with a warning naming the byte offset.
pub(crate) fn read_json_lines(bytes: &[u8]) -> JsonLines {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let missing_final_newline = !bytes.is_empty() && !bytes.ends_with(b"\n");
    let mut lines = Vec::new();
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let segments: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    let count = segments.len();
    for (i, raw) in segments.into_iter().enumerate() {
        let line = i + 1;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.len() > MAX_LINE_BYTES {
            problems.push(LineProblem {
                line,
                message: format!(
                    "line of {} bytes is over the {MAX_LINE_BYTES}-byte limit",
                    raw.len()
                ),
            });
            continue;
        }
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let torn = missing_final_newline && i + 1 == count;
        let repaired;
        let raw = match std::str::from_utf8(raw) {
            Ok(_) => raw,
            Err(e) => {
                warnings.push(LineProblem {
                    line,
                    message: format!(
                        "invalid UTF-8 at byte {} of the line; replaced with U+FFFD",
                        e.valid_up_to()
                    ),
                });
                repaired = String::from_utf8_lossy(raw).into_owned();
                repaired.as_bytes()
            }
        };
        match serde_json::from_slice::<Value>(raw) {
            Ok(Value::Object(value)) => lines.push(JsonLine { line, value }),
            Ok(other) => problems.push(LineProblem {
                line,
                message: format!("expected a JSON object, found {}", kind_of(&other)),
            }),
            Err(e) => problems.push(LineProblem {
                line,
                message: if torn {
                    format!("torn last line (no final newline): {e}")
                } else {
                    format!("malformed JSON: {e}")
                },
            }),
        }
    }
    JsonLines {
        lines,
        problems,
        warnings,
        missing_final_newline,
    }
}

/// The current time as ISO-8601 UTC with milliseconds (`2025-12-09T00:53:29.825Z`).
pub(crate) fn iso_now() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    iso_from_ms(ms)
}

/// Formats Unix milliseconds as ISO-8601 UTC.
pub(crate) fn iso_from_ms(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

/// Parses an ISO-8601 timestamp (`YYYY-MM-DDTHH:MM:SS[.fff][Z|±HH:MM]`) into Unix milliseconds.
pub(crate) fn parse_iso_ms(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        if part.is_empty() || !part.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut millis = 0i64;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let mut scaled = 0i64;
        for (i, c) in frac.bytes().take(3).enumerate().take(digits) {
            scaled += i64::from(c - b'0') * 10i64.pow(2 - i as u32);
        }
        millis = scaled;
        rest = &frac[digits..];
    }
    let offset_secs = match rest {
        "" | "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let off = &rest[1..];
            let (oh, om) = match off.len() {
                5 if off.as_bytes()[2] == b':' => (off.get(0..2)?, off.get(3..5)?),
                4 => (off.get(0..2)?, off.get(2..4)?),
                _ => return None,
            };
            let (oh, om): (i64, i64) = (oh.parse().ok()?, om.parse().ok()?);
            sign * (oh * 3600 + om * 60)
        }
    };
    let days = days_from_civil(y, mo, d);
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset_secs;
    Some(secs * 1000 + millis)
}

/// Days since 1970-01-01 for a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date for a count of days since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_round_trips_through_millis() {
        let ms = parse_iso_ms("2025-12-09T00:53:29.825Z").unwrap();
        assert_eq!(ms, 1_765_241_609_825);
        assert_eq!(iso_from_ms(ms), "2025-12-09T00:53:29.825Z");
        assert_eq!(parse_iso_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_iso_ms("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(
            parse_iso_ms("2024-02-29T12:00:00.5Z"),
            Some(1_709_208_000_500)
        );
        assert_eq!(parse_iso_ms("not a date"), None);
        assert_eq!(parse_iso_ms("2024-13-01T00:00:00Z"), None);
    }

    #[test]
    fn json_lines_report_bad_lines_with_numbers() {
        let input = b"{\"a\":1}\n\nnot json\n[1]\n{\"b\":2}\n{\"torn\":";
        let r = read_json_lines(input);
        assert_eq!(r.lines.iter().map(|l| l.line).collect::<Vec<_>>(), [1, 5]);
        let lines: Vec<usize> = r.problems.iter().map(|p| p.line).collect();
        assert_eq!(lines, [3, 4, 6]);
        assert!(r.problems[2].message.starts_with("torn last line"));
        assert!(r.missing_final_newline);
    }
}
