//! The JSONL store's commit journal: two slot files beside the transcript, written in turn,
//! so a commit costs one durable sync (of one slot file) instead of three (the transcript,
//! the state file, its directory).
//!
//! ```text
//! transcript.jsonl.commit-0, transcript.jsonl.commit-1:
//!   ctxhost-commit 1 <seq> <state bytes> <tail from> <tail bytes> <sha256>\n
//!   <the state document, with its commit mark>
//!   <the transcript's bytes from <tail from> to the commit's end>
//! ```
//!
//! A record carries the transcript bytes written since the transcript was last synced, so it
//! stands on its own: after a power loss the transcript is restored to what the newest record
//! accounts for. A commit overwrites the slot of the commit before the previous one; a record
//! torn by a crash fails its digest and the other slot, one commit older and synced, stands.
//! After a record, a slot holds the end of an older, longer one or the zeros it grew by
//! (slots grow in steps, so that most records are written in place); neither is read.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The first word of a record's header.
const MAGIC: &str = "ctxhost-commit 1";

/// The largest record read back (a state is capped far below this).
const MAX_RECORD: u64 = 1 << 30;

/// One commit as the journal keeps it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Record {
    /// The commit's number (the mark's `seq`).
    pub(super) seq: u64,
    /// The state document, as the state file holds it.
    pub(super) state: Vec<u8>,
    /// Where in the transcript `tail` starts.
    pub(super) tail_from: u64,
    /// The transcript's bytes from `tail_from` to the commit's end.
    pub(super) tail: Vec<u8>,
}

/// The slot file `slot` (0 or 1) of a transcript's journal.
pub(super) fn slot_path(transcript: &Path, slot: u64) -> PathBuf {
    super::beside(transcript, &format!(".commit-{}", slot % 2))
}

/// Whether both slot files exist (created with a synced directory, so a record written into
/// them survives a power loss).
pub(super) fn slots_exist(transcript: &Path) -> bool {
    (0..2).all(|s| slot_path(transcript, s).exists())
}

/// Creates both slot files empty (dropping any record they held). The caller syncs the
/// directory.
pub(super) fn reset(transcript: &Path) -> Result<()> {
    for s in 0..2 {
        let path = slot_path(transcript, s);
        std::fs::File::create(&path).map_err(|e| Error::io("create commit journal", &path, e))?;
    }
    Ok(())
}

/// Removes both slot files (a session written without them, whose slots would be stale).
pub(super) fn remove(transcript: &Path) {
    for s in 0..2 {
        let _ = std::fs::remove_file(slot_path(transcript, s));
    }
}

fn digest(seq: u64, state: &[u8], tail_from: u64, tail: &[u8]) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(format!("{seq} {} {tail_from} {}\n", state.len(), tail.len()).as_bytes());
    ctx.update(state);
    ctx.update(tail);
    ctx.finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The step a slot file grows by: a record longer than its slot is written followed by zeros
/// up to the next multiple of this, so the records after it (up to that length) are written
/// in place. A commit's records carry at most [`super::UNSYNCED_MAX`] of transcript, so with a
/// small state a slot grows once.
const SLOT_STEP: u64 = 32 << 10;

/// Writes a record into its slot (`seq` mod 2) and syncs that file: the commit's one durable
/// sync. On an error the other slot still holds the commit before. The record is written over
/// the slot's old one in place, never truncated first: a slot keeps its blocks, so the sync
/// writes data only (no size or block change to record, no discard of freed blocks), and
/// what an older, longer record leaves after the new one is not read (the header gives the
/// record's length; the digest tells a torn one). A record longer than the slot grows it by
/// whole [`SLOT_STEP`]s of zeros in the same sync, so that only one sync in many (not every
/// one of a session whose records grow) records a new size and new blocks: on ext4 such a
/// sync also commits the file system's journal, about twice the cost of a sync in place.
pub(super) fn write(
    transcript: &Path,
    seq: u64,
    state: &[u8],
    tail_from: u64,
    tail: &[u8],
) -> Result<()> {
    let path = slot_path(transcript, seq);
    let header = format!(
        "{MAGIC} {seq} {} {tail_from} {} {}\n",
        state.len(),
        tail.len(),
        digest(seq, state, tail_from, tail)
    );
    let io = |e| Error::io("write commit journal", &path, e);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io)?;
    let len = (header.len() + state.len() + tail.len()) as u64;
    let room = file.metadata().map_err(io)?.len();
    let zeros = if len > room {
        len.div_ceil(SLOT_STEP) * SLOT_STEP - len
    } else {
        0
    };
    // Written piece by piece, not gathered into one buffer first: a state near the result cap
    // would otherwise be held twice (the digest tells a torn record anyway).
    file.write_all(header.as_bytes())
        .and_then(|()| file.write_all(state))
        .and_then(|()| file.write_all(tail))
        .and_then(|()| std::io::copy(&mut std::io::repeat(0).take(zeros), &mut file).map(drop))
        .and_then(|()| file.sync_data())
        .map_err(io)
}

/// The newest whole record of a transcript's journal, if any: a torn or altered one is
/// passed over.
pub(super) fn newest(transcript: &Path) -> Option<Record> {
    (0..2)
        .filter_map(|s| read(&slot_path(transcript, s)))
        .max_by_key(|r| r.seq)
}

fn read(path: &Path) -> Option<Record> {
    let file = std::fs::File::open(path).ok()?;
    if file.metadata().ok()?.len() > MAX_RECORD {
        return None;
    }
    let mut bytes = Vec::new();
    std::io::BufReader::new(file)
        .take(MAX_RECORD)
        .read_to_end(&mut bytes)
        .ok()?;
    let end = bytes.iter().position(|b| *b == b'\n')?;
    let header = std::str::from_utf8(&bytes[..end]).ok()?;
    let fields = header.strip_prefix(MAGIC)?;
    let fields: Vec<&str> = fields.split_ascii_whitespace().collect();
    let [seq, state_len, tail_from, tail_len, sha] = fields[..] else {
        return None;
    };
    let seq: u64 = seq.parse().ok()?;
    let state_len: usize = state_len.parse().ok()?;
    let tail_from: u64 = tail_from.parse().ok()?;
    let tail_len: usize = tail_len.parse().ok()?;
    // Bytes after the record are an older, longer record's end or zeros (slots are written in
    // place and grow in steps).
    let body = bytes[end + 1..].get(..state_len.checked_add(tail_len)?)?;
    let (state, tail) = body.split_at(state_len);
    if digest(seq, state, tail_from, tail) != sha {
        return None;
    }
    Some(Record {
        seq,
        state: state.to_vec(),
        tail_from,
        tail: tail.to_vec(),
    })
}

/// Makes the transcript hold `record`'s tail where it belongs: after a power loss the bytes
/// written since the last transcript sync may be missing or not what was written. Bytes after
/// the tail are left for the caller to set aside. Returns whether anything was rewritten.
pub(super) fn redo(transcript: &Path, record: &Record) -> Result<bool> {
    let io = |op, e| Error::io(op, transcript, e);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(transcript)
        .map_err(|e| io("open transcript", e))?;
    let len = file
        .metadata()
        .map_err(|e| io("measure transcript", e))?
        .len();
    if len < record.tail_from {
        tracing::warn!(
            file = %transcript.display(),
            bytes = len,
            synced = record.tail_from,
            "the transcript is shorter than what its last commit found synced: it was replaced or cut by hand; reading it as it is"
        );
        return Ok(false);
    }
    let mut have = Vec::with_capacity(record.tail.len());
    file.seek(SeekFrom::Start(record.tail_from))
        .and_then(|_| {
            (&mut file)
                .take(record.tail.len() as u64)
                .read_to_end(&mut have)
        })
        .map_err(|e| io("read transcript", e))?;
    if have == record.tail {
        return Ok(false);
    }
    file.seek(SeekFrom::Start(record.tail_from))
        .and_then(|_| file.write_all(&record.tail))
        .and_then(|()| file.sync_data())
        .map_err(|e| io("restore transcript from its commit journal", e))?;
    tracing::warn!(
        file = %transcript.display(),
        bytes = record.tail.len(),
        "the transcript lacked bytes its last commit holds (a power loss): restored from the commit journal"
    );
    Ok(true)
}
