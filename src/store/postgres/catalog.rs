//! Every session at once, for `doctor` and `store migrate`: the list of sessions, and a whole
//! session copied in from another store in one transaction.

use std::sync::Arc;

use serde_json::Value;

use super::driver::Fail;
use super::session::read;
use super::{KIND, Shared};
use crate::contract::message::Message;
use crate::error::{Error, Result};
use crate::store::{SessionMeta, SessionSummary};

/// Every session, for `doctor` and `store migrate`.
pub(super) fn list(shared: &Arc<Shared>) -> Result<Vec<SessionSummary>> {
    let (pool, s) = (shared.pool.clone(), shared.s.clone());
    shared.run("list sessions", None, move || {
        let (pool, s) = (pool.clone(), s.clone());
        async move {
            let client = pool.get().await?;
            let rows = client
                .query(
                    &format!(
                        "SELECT id, last_seq, created_at, turns FROM {s}.ctxhost_sessions ORDER BY id"
                    ),
                    &[],
                )
                .await?;
            let mut out = Vec::with_capacity(rows.len());
            for row in rows {
                out.push(SessionSummary {
                    id: row.try_get(0)?,
                    messages: row.try_get::<_, i64>(1)?.max(0) as u64,
                    meta: SessionMeta {
                        created_at: Some(row.try_get(2)?),
                        turns: Some(row.try_get::<_, i64>(3)?.max(0) as u64),
                    },
                });
            }
            Ok(out)
        }
    })
}

/// Copies a whole session in, ids kept, in one transaction; refused while a process serves
/// it, and when it already holds other messages.
pub(super) fn import(
    shared: &Arc<Shared>,
    id: &str,
    messages: &[Arc<Message>],
    state: Option<&Value>,
    meta: &SessionMeta,
) -> Result<bool> {
    let encode = |e: serde_json::Error| Error::Store {
        backend: KIND,
        op: "import session",
        session: Some(id.to_owned()),
        message: format!("encode: {e}"),
    };
    let bodies = messages
        .iter()
        .map(|m| serde_json::to_string(&**m))
        .collect::<serde_json::Result<Vec<_>>>()
        .map_err(encode)?;
    let state = state
        .map(serde_json::to_string)
        .transpose()
        .map_err(encode)?;
    let next_id = messages
        .iter()
        .filter_map(|m| u64::from_str_radix(&m.id, 16).ok())
        .max()
        .unwrap_or(0) as i64
        + 1;
    let input = Arc::new((
        messages.to_vec(),
        messages.iter().map(|m| m.id.clone()).collect::<Vec<_>>(),
        bodies,
        state,
        meta.clone(),
    ));
    let (pool, s, session) = (shared.pool.clone(), shared.s.clone(), id.to_owned());
    shared.run("import session", Some(id), move || {
        let (pool, s, session, input) = (pool.clone(), s.clone(), session.clone(), Arc::clone(&input));
        async move {
            let (messages, ids, bodies, state, meta) = &*input;
            let mut client = pool.get().await?;
            let tx = client.transaction().await?;
            let created = meta
                .created_at
                .clone()
                .unwrap_or_else(crate::transcript::iso_now);
            tx.execute(
                &format!(
                    "INSERT INTO {s}.ctxhost_sessions (id, created_at) VALUES ($1, $2)
                     ON CONFLICT (id) DO NOTHING"
                ),
                &[&session, &created],
            )
            .await?;
            let served = tx
                .query_opt(
                    &format!(
                        "SELECT owner FROM {s}.ctxhost_leases
                         WHERE session_id = $1 AND expires_at > clock_timestamp() FOR UPDATE"
                    ),
                    &[&session],
                )
                .await?;
            if let Some(row) = served {
                let owner: String = row.try_get(0)?;
                return Err(Fail::Fatal(format!(
                    "it is being served by {owner}; nothing was copied (stop that process or let its lease end)"
                )));
            }
            tx.execute(
                &format!("SELECT 1 FROM {s}.ctxhost_sessions WHERE id = $1 FOR UPDATE"),
                &[&session],
            )
            .await?;
            let existing = read(&tx, &s, &session).await?;
            match crate::store::may_import(KIND, &session, &existing.messages, messages) {
                Err(e) => return Ok(Err(e)),
                Ok(false) => return Ok(Ok(false)),
                Ok(true) => {}
            }
            let seqs: Vec<i64> = (1..=messages.len() as i64).collect();
            tx.execute(
                &format!(
                    "INSERT INTO {s}.ctxhost_entries (session_id, seq, entry_id, body, token)
                     SELECT $1, *, 0 FROM unnest($2::bigint[], $3::text[], $4::text[])"
                ),
                &[&session, &seqs, ids, bodies],
            )
            .await?;
            tx.execute(
                &format!(
                    "UPDATE {s}.ctxhost_sessions
                     SET state = $2, turns = $3, last_seq = $4, next_id = greatest(next_id, $5),
                         created_at = $6, commits = commits + 1, updated_at = now()
                     WHERE id = $1"
                ),
                &[
                    &session,
                    state,
                    &(meta.turns.unwrap_or(0) as i64),
                    &(messages.len() as i64),
                    &next_id,
                    &created,
                ],
            )
            .await?;
            tx.commit().await?;
            Ok(Ok(true))
        }
    })?
}
