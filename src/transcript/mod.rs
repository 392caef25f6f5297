//! Transcripts: ctxhost's own append-only JSONL store and importers for recorded agent sessions.
