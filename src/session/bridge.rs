//! Sessions whose transcript a client owns (`ctxhost serve`): OpenClaw keeps its own
//! transcript and hands each lifecycle call the messages it holds. These entry points mirror
//! that view into the session's store, then call the engine through the very same path as the
//! turn driver (quarantine, fallback to `legacy`, result checks, pairing repair, re-measuring),
//! so a bridged call keeps every promise a driven turn keeps.
//!
//! Mirroring: the client's view of the history is appended to the store as it grows (and each
//! new message is ingested once). A second `assemble` of a turn receives the first call's
//! output back: its messages carry the session's own entry ids, so that view is recognised as
//! an echo and never mirrored again; only what follows the echoed window (a tool loop's calls
//! and results) joins the context, for that call only. An engine's compaction summary lives
//! in the store, so every later view is assembled from the compacted context even though the
//! client never applies the summary to its own transcript.
//!
//! A crash between a call's transcript append and its state write (which holds the mirror)
//! stores messages the saved mirror does not know. The state file records how many stored
//! messages the mirror accounts for; after a restart, the first client view is matched
//! against the messages stored beyond that (by fingerprint, in order), and those are taken as
//! stored instead of being appended again.

use std::collections::HashSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::contract::message::{Message, Role};
use crate::contract::{
    self, BootstrapResult, CompactResult, CompactionTarget, MaintainReason, MaintainResult, Method,
    Operation,
};
use crate::engine::api::{ClientCompaction, ClientParams};
use crate::error::Result;

use super::{Assembly, Session};

/// How much of a client-owned transcript a session has mirrored, saved with the session so a
/// new server process continues where the last one stopped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientMirror {
    /// A fingerprint of each client message mirrored so far, in the client's order.
    pub fingerprints: Vec<String>,
}

/// What a client passed with a lifecycle call beyond what the session makes itself.
#[derive(Clone, Debug)]
pub struct ClientCall {
    /// The method the client called.
    pub method: Method,
    /// Its host params as the client sent them (`runtimeContext`, `sessionTarget`).
    pub host_params: serde_json::Map<String, serde_json::Value>,
    /// `assemble`'s tool names available this turn.
    pub available_tools: Option<Vec<String>>,
    /// The client's own compaction, for a script's `host.delegateCompaction(p)`.
    pub compaction: Option<ClientCompaction>,
}

/// The client call a session is serving now.
#[derive(Debug)]
pub(super) struct Serving {
    pub(super) params: Arc<ClientParams>,
    pub(super) available_tools: Option<Vec<String>>,
    pub(super) compaction: Option<ClientCompaction>,
}

/// What the client asked `assemble` for, beyond its messages.
#[derive(Clone, Debug, Default)]
pub struct ClientAssemble {
    /// The budget the client gives the window (the session's own when `None`).
    pub token_budget: Option<u64>,
    /// The current turn's prompt (not yet in the messages).
    pub prompt: Option<String>,
    /// The model id the client will call.
    pub model: Option<String>,
}

impl Session {
    /// `bootstrap` from a client: runs the engine's `bootstrap` once per engine instance (the
    /// client calls it at every operation); later calls answer without calling the engine.
    pub fn client_bootstrap(&mut self) -> Result<BootstrapResult> {
        self.sync_engine()?;
        if self.bootstrapped {
            return Ok(BootstrapResult {
                bootstrapped: true,
                imported_messages: None,
                reason: Some("already bootstrapped by this engine instance".into()),
            });
        }
        self.bootstrapped = true;
        if !self.defines(Method::Bootstrap) {
            return Ok(BootstrapResult {
                bootstrapped: false,
                imported_messages: None,
                reason: Some("the engine defines no bootstrap".into()),
            });
        }
        self.run_bootstrap()
    }

    /// `ingest` / `ingestBatch` from a client: the messages join the mirror (and the store)
    /// and are ingested once. Returns how many were new.
    pub fn client_ingest(
        &mut self,
        mirror: &mut ClientMirror,
        messages: Vec<Message>,
        is_heartbeat: bool,
    ) -> Result<usize> {
        self.sync_engine()?;
        let mut fresh: Vec<Message> = messages
            .into_iter()
            .filter(|m| !self.is_own_entry(m))
            .collect();
        // A call re-sent after its answer was lost (the bridge retries a call whose process
        // died under it) carries what the mirror already ends with: stored once, not again.
        // A real transcript never repeats its last message verbatim; if one did, the next view
        // (assemble, afterTurn) carries it and it joins the mirror there.
        let prints: Vec<String> = fresh.iter().map(fingerprint).collect();
        let repeated = (1..=prints.len())
            .rev()
            .find(|&k| mirror.fingerprints.ends_with(&prints[..k]))
            .unwrap_or(0);
        if repeated > 0 {
            tracing::info!(
                session = &*self.id,
                repeated,
                "an ingest repeats the last mirrored message(s): a retried call, not stored again"
            );
            fresh.drain(..repeated);
        }
        mirror
            .fingerprints
            .extend(prints.into_iter().skip(repeated));
        let stored = self.store_once(fresh)?;
        self.ingest_new(&stored, is_heartbeat)?;
        Ok(stored.len())
    }

    /// `assemble` from a client: mirror the client's view, then assemble, repair, re-measure
    /// and recover from overflow exactly like a driven turn.
    pub fn client_assemble(
        &mut self,
        mirror: &mut ClientMirror,
        messages: Vec<Message>,
        request: ClientAssemble,
    ) -> Result<Assembly> {
        self.sync_engine()?;
        self.check_requirements(Operation::AgentRun)?;
        let tail = self.mirror_view(mirror, messages)?;
        if let Some(model) = request.model {
            self.setup.model = Some(model);
        }
        let budget = self.budget_or_default(request.token_budget);
        if tail.is_empty() {
            return self.assemble_within_budget(budget, request.prompt);
        }
        // Messages after an echoed window (a tool loop): part of this call's context only.
        let saved = Arc::clone(&self.context);
        let tail: Vec<Arc<Message>> = tail.into_iter().map(Arc::new).collect();
        let mut transient = saved.as_ref().clone();
        transient.extend(tail.iter().cloned());
        self.context = Arc::new(transient);
        let before = Arc::clone(&self.context);
        let r = self.assemble_within_budget(budget, request.prompt);
        if Arc::ptr_eq(&self.context, &before) {
            self.context = saved;
        } else {
            // A compaction replaced the context during the call: keep it, without the tail.
            let kept: Vec<Arc<Message>> = self
                .context
                .iter()
                .filter(|m| !tail.iter().any(|t| Arc::ptr_eq(t, m)))
                .cloned()
                .collect();
            self.context = Arc::new(kept);
        }
        r
    }

    /// `compact` from a client: the engine's `compact` (falling back like any call), its
    /// summary applied to the session so later windows are built from it. With `client`, a
    /// script's `host.delegateCompaction(p)` runs the client's own compaction instead of the
    /// built-in one; the client then applies that result to the transcript it owns, so the
    /// session leaves it alone and picks the client's summary up from its next view.
    pub fn client_compact(
        &mut self,
        token_budget: Option<u64>,
        target: CompactionTarget,
        instructions: Option<String>,
    ) -> Result<CompactResult> {
        self.sync_engine()?;
        self.check_requirements(Operation::ManualCompact)?;
        let budget = self.budget_or_default(token_budget);
        self.engine_compact(budget, target, instructions, None)
    }

    /// Runs `f` (one of the `client_*` calls) as the client's `call`: the engine's `p` for that
    /// method carries the client's host params, `assemble` its `availableTools`, and a script's
    /// `host.delegateCompaction(p)` runs the client's compaction when it offers one (the client
    /// then applies that result to the transcript it owns, so the session leaves it alone and
    /// picks the client's summary up from its next view).
    pub fn serve_client<R>(&mut self, call: ClientCall, f: impl FnOnce(&mut Session) -> R) -> R {
        self.serving = Some(Serving {
            params: Arc::new(ClientParams {
                method: call.method,
                fields: call.host_params,
            }),
            available_tools: call.available_tools,
            compaction: call.compaction,
        });
        let r = f(self);
        self.serving = None;
        r
    }

    /// The client's budget, or the session's own when the client gave none.
    fn budget_or_default(&self, token_budget: Option<u64>) -> u64 {
        token_budget
            .filter(|b| *b > 0)
            .unwrap_or_else(|| self.token_budget())
    }

    /// `afterTurn` from a client: mirror the snapshot, then the engine's `afterTurn` if it
    /// defines one.
    pub fn client_after_turn(
        &mut self,
        mirror: &mut ClientMirror,
        messages: Vec<Message>,
        pre_prompt_message_count: usize,
        token_budget: Option<u64>,
        is_heartbeat: bool,
    ) -> Result<()> {
        self.sync_engine()?;
        self.mirror_view(mirror, messages)?;
        if !self.defines(Method::AfterTurn) {
            return Ok(());
        }
        let budget = self.budget_or_default(token_budget);
        self.run_after_turn(pre_prompt_message_count, budget, is_heartbeat)
    }

    /// `commitTurn` from a client: the engine's `commitTurn` with the client's turn messages.
    /// The caller keeps the idempotency record and calls this once per `advancementKey`.
    pub fn client_commit_turn(
        &mut self,
        advancement_key: &str,
        messages: Vec<Message>,
    ) -> Result<()> {
        self.sync_engine()?;
        if !self.defines(Method::CommitTurn) {
            return Ok(());
        }
        let messages = messages.into_iter().map(Arc::new).collect();
        self.run_commit_turn(advancement_key.to_owned(), messages)
    }

    /// Ends a client's turn (the serving side decides when: `commitTurn` or `afterTurn` after
    /// an `assemble`): the engine time of the turn's calls is held against `host.turnBudget`
    /// as a driven turn's is, so a slow engine is reported (or quarantined) under `serve` too.
    pub fn end_client_turn(&mut self) -> Result<()> {
        let r = self.judge_turn_time();
        self.turn_engine_time = std::time::Duration::ZERO;
        self.stats = super::TurnStats::default();
        r
    }

    /// `maintain` from a client: the engine's result, or a no-change answer when it defines none.
    pub fn client_maintain(&mut self, reason: MaintainReason) -> Result<MaintainResult> {
        self.sync_engine()?;
        let nothing = MaintainResult {
            reason: Some("the engine defines no maintain".into()),
            ..MaintainResult::default()
        };
        if !self.defines(Method::Maintain) {
            return Ok(nothing);
        }
        let r = self.run_maintain(reason)?;
        Ok(r.unwrap_or(MaintainResult {
            reason: None,
            ..nothing
        }))
    }

    /// Saves the engine's per-session state now (a client process may end at any call), with
    /// `record` (what the client's bridge keeps: its mirror, the turns committed) in the same
    /// atomic write, so a crash leaves both as they were before or both as they are now.
    pub fn persist_state(&mut self, record: serde_json::Value) -> Result<()> {
        self.client_record = Some(record);
        if !self.client_unmatched {
            self.client_stored = Some(self.store.len());
        }
        self.save_state()
    }

    /// Marks the session as one a client owns, once it is open: when no record was ever saved
    /// (a crash between the session's first append and its first save), what the store holds
    /// is matched against the client's next view rather than stored a second time.
    pub fn expect_client(&mut self) {
        if self.client_record.is_none() && self.client_stored.is_none() {
            self.client_stored = Some(0);
            self.client_unmatched = !self.store.is_empty();
        }
    }

    /// The record [`Session::persist_state`] last saved with this session, if any.
    pub fn client_record(&self) -> Option<&serde_json::Value> {
        self.client_record.as_ref()
    }

    /// The `info` of the engine answering now (`legacy`'s after a quarantine).
    pub fn active_info(&self) -> contract::EngineInfo {
        match &self.engine {
            Some(e) => e.info().clone(),
            None => crate::engine::legacy::legacy_info(),
        }
    }

    /// Appends client messages that join the mirror, except those a call that crashed before
    /// its save already stored: the messages stored after what the saved record accounts for
    /// are matched (by fingerprint, in order) against the start of `fresh`, and the ones that
    /// match are taken as stored. Returns every message of `fresh` as stored, in order. The
    /// engine's state was saved with the record, so it never saw those messages: all of them
    /// are ingested again.
    fn store_once(&mut self, mut fresh: Vec<Message>) -> Result<Vec<Arc<Message>>> {
        // The session's own summaries among them are not the client's: they never match.
        let unsaved: Vec<Arc<Message>> = match self.client_stored {
            Some(n) if self.client_unmatched => self
                .recall
                .since(n)
                .into_iter()
                .filter(|m| m.role() != Role::CompactionSummary)
                .collect(),
            _ => Vec::new(),
        };
        self.client_unmatched = false;
        let known = fresh
            .iter()
            .zip(&unsaved)
            .take_while(|(f, u)| fingerprint(f) == fingerprint(u))
            .count();
        if known == 0 {
            return self.append(fresh);
        }
        tracing::info!(
            session = &*self.id,
            known,
            "client messages stored by a call that ended before its save are not stored again"
        );
        let rest = fresh.split_off(known);
        let mut stored: Vec<Arc<Message>> = unsaved.into_iter().take(known).collect();
        stored.extend(self.append(rest)?);
        Ok(stored)
    }

    fn is_own_entry(&self, m: &Message) -> bool {
        !m.id.is_empty() && self.context.iter().any(|c| c.id == m.id)
    }

    /// Mirrors a client view into the store; returns the messages that follow an echoed window
    /// (empty for a plain view).
    fn mirror_view(
        &mut self,
        mirror: &mut ClientMirror,
        messages: Vec<Message>,
    ) -> Result<Vec<Message>> {
        let own: HashSet<&str> = self.context.iter().map(|m| m.id.as_str()).collect();
        if let Some(last) = messages
            .iter()
            .rposition(|m| !m.id.is_empty() && own.contains(m.id.as_str()))
        {
            drop(own);
            let tail: Vec<Message> = messages
                .into_iter()
                .skip(last + 1)
                .filter(|m| !self.is_own_entry(m))
                .collect();
            return Ok(tail);
        }
        drop(own);
        let prints: Vec<String> = messages.iter().map(fingerprint).collect();
        let seen = mirror.fingerprints.len();
        let agree = prints
            .iter()
            .zip(&mirror.fingerprints)
            .take_while(|(a, b)| a == b)
            .count();
        let rebase = agree != seen.min(prints.len())
            && messages
                .first()
                .is_some_and(|m| m.role() == Role::CompactionSummary);
        let fresh: Vec<Message> = if rebase {
            // The client compacted its own transcript: adopt its view after what we hold.
            tracing::info!(
                session = &*self.id,
                "the client's transcript was compacted; mirroring its new view"
            );
            mirror.fingerprints = prints;
            messages
        } else if let Some(new) = (agree != seen.min(prints.len()))
            .then(|| gaps(&mirror.fingerprints, &prints))
            .flatten()
        {
            // Everything mirrored is in the view, in order, with messages between that never
            // arrived (a call carrying them was given up while later ones got through): those
            // are new, stored once (after what is stored; the transcript only appends).
            tracing::info!(
                session = &*self.id,
                new = new.iter().filter(|n| **n).count(),
                "the client's view holds messages the mirror lacks between mirrored ones"
            );
            mirror.fingerprints = prints;
            messages
                .into_iter()
                .zip(new)
                .filter_map(|(m, n)| n.then_some(m))
                .collect()
        } else {
            // The view repeats, shortens or extends what was mirrored — or the client rewrote
            // history (pruning, an edit): either way keep the longest view seen, and append
            // only what lies beyond it.
            if agree != seen.min(prints.len()) {
                tracing::debug!(
                    session = &*self.id,
                    agree,
                    seen,
                    "the client's view differs from the mirror; appending only what lies beyond it"
                );
            }
            if prints.len() > seen {
                mirror.fingerprints.extend(prints[seen..].iter().cloned());
                messages.into_iter().skip(seen).collect()
            } else {
                Vec::new()
            }
        };
        if !fresh.is_empty() {
            let stored = self.store_once(fresh)?;
            if rebase {
                // The client's summary now stands for everything before it, as on a reopen.
                self.context = Arc::new(super::derive_context(&self.context));
            }
            self.ingest_new(&stored, false)?;
        }
        Ok(Vec::new())
    }
}

/// Which messages of `view` are not in `mirror` when `mirror` is a subsequence of `view`
/// (matched in order, each to its earliest match); `None` when it is not.
fn gaps(mirror: &[String], view: &[String]) -> Option<Vec<bool>> {
    let mut next = mirror.iter().peekable();
    let new: Vec<bool> = view
        .iter()
        .map(|v| {
            if next.peek() == Some(&v) {
                next.next();
                false
            } else {
                true
            }
        })
        .collect();
    next.peek().is_none().then_some(new)
}

/// A fingerprint of a client message that stays the same across processes and releases
/// (FNV-1a over its role, text, tool call ids and names). Fields the client adds or changes
/// between calls (ids, metadata) do not count.
fn fingerprint(m: &Message) -> String {
    let mut h = Fnv::new();
    h.write(m.role().as_str().as_bytes());
    h.write(&[0]);
    h.write(m.text().as_bytes());
    h.write(&[0]);
    h.write(m.tool_call_id().unwrap_or_default().as_bytes());
    for c in m.tool_calls() {
        h.write(&[0]);
        h.write(c.id.as_bytes());
        h.write(&[0]);
        h.write(c.name.as_bytes());
    }
    format!("{:016x}", h.0)
}

/// The 64-bit FNV-1a hash: tiny, and fixed forever (unlike `DefaultHasher`), so what is hashed
/// in one process can be compared in the next.
pub(crate) struct Fnv(pub(crate) u64);

impl Fnv {
    /// A hash of nothing yet.
    pub(crate) fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    /// Hashes `bytes` in.
    pub(crate) fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}
