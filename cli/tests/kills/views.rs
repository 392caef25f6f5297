//! Delta views as `bridges/openclaw/index.js` sends them: per conversation, what the bridge
//! believes ctxhost holds (the messages, each one's hash and the rolling hash after it); a
//! call sends only what changed since, checked by ctxhost against the hash; a base ctxhost
//! refuses is sent again from what it says it holds (or, for an ingest, as OpenClaw passed
//! it); a child that died under the call leaves no belief, so its retry hashes the client's
//! view and offers all of it as the base (or sends an ingest as OpenClaw passed it).

use super::*;

/// What the bridge believes ctxhost holds of one conversation.
#[derive(Clone, Debug, Default)]
pub(super) struct Known {
    msgs: Vec<Value>,
    /// The rolling hash after each message.
    hashes: Vec<u64>,
}

fn fnv(bytes: &[u8], mut h: u64) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn hex(h: u64) -> String {
    format!("{h:016x}")
}

impl Known {
    fn of(msgs: Vec<Value>) -> Known {
        let mut k = Known::default();
        for m in msgs {
            let prev = k.hashes.last().copied().unwrap_or(0xcbf2_9ce4_8422_2325);
            k.hashes.push(fnv(m.to_string().as_bytes(), prev));
            k.msgs.push(m);
        }
        k
    }

    fn hash_at(&self, n: usize) -> Option<String> {
        n.checked_sub(1).map(|i| hex(self.hashes[i]))
    }

    /// How many of `msgs` are the ones held at the same places.
    fn agreeing(&self, msgs: &[Value]) -> usize {
        self.msgs
            .iter()
            .zip(msgs)
            .take_while(|(a, b)| a == b)
            .count()
    }

    /// The `view` param of a call whose view is this one, from `base`.
    fn delta(&self, base: usize) -> Value {
        json!({
            "base": base,
            "baseHash": self.hash_at(base),
            "append": self.msgs[base..],
            "hashes": self.hashes[base..].iter().map(|h| hex(*h)).collect::<Vec<_>>(),
        })
    }

    /// The view as ctxhost answered it held: kept as far as both agree.
    fn settle(mut self, held: &Value) -> Option<Known> {
        let count = held["count"].as_u64()? as usize;
        let agree = count <= self.msgs.len() && held["hash"] == json!(self.hash_at(count));
        let n = if agree { count } else { 0 };
        self.msgs.truncate(n);
        self.hashes.truncate(n);
        Some(self)
    }
}

/// What a call carries of the client's messages.
pub(super) enum Carried {
    /// New messages (`ingest`: one; `ingestBatch`: several).
    New(Vec<Value>),
    /// The client's whole view (`assemble`, `afterTurn`).
    View(Vec<Value>),
}

impl Bridge<'_> {
    /// One call carrying the client's messages, as the plugin sends it over delta views; sent
    /// again after a kill until answered (or given up: `None`, and no belief is left).
    pub(super) fn view_call(
        &mut self,
        known: &mut Option<Known>,
        method: &str,
        params: Value,
        carried: Carried,
        early: bool,
    ) -> Option<Value> {
        let mut died = 0;
        loop {
            // One resend from what ctxhost says it holds, per belief (as the plugin's call).
            let mut refused = false;
            let belief = known.take();
            // The view this call means, and the base to send it from.
            let (next, base) = match (&carried, belief) {
                (Carried::New(added), Some(k)) => {
                    let base = k.msgs.len();
                    let mut msgs = k.msgs;
                    msgs.extend(added.iter().cloned());
                    (Known::of(msgs), base)
                }
                (Carried::New(added), None) => {
                    // Nothing known: as OpenClaw passed it.
                    let mut p = params.clone();
                    match added.as_slice() {
                        [one] if method == "ingest" => p["message"] = one.clone(),
                        all => p["messages"] = json!(all),
                    }
                    match self.attempt(method, &p, early, &mut died) {
                        Attempt::Answered(r) => return Some(r),
                        Attempt::Refused(e) => panic!("{method} refused: {e}"),
                        Attempt::Died => continue,
                        Attempt::GivenUp => return None,
                    }
                }
                (Carried::View(msgs), Some(k)) => {
                    let base = k.agreeing(msgs);
                    (Known::of(msgs.clone()), base)
                }
                (Carried::View(msgs), None) => (Known::of(msgs.clone()), msgs.len()),
            };
            let mut base = base;
            loop {
                let mut p = params.clone();
                p["view"] = next.delta(base);
                match self.attempt(method, &p, early, &mut died) {
                    Attempt::Answered(r) => {
                        *known = next.clone().settle(&r["view"]);
                        return Some(r);
                    }
                    Attempt::Refused(e) if e["code"] == -32012 && !refused => {
                        refused = true;
                        let held = e["data"]["count"].as_u64().unwrap_or(0) as usize;
                        if held > 0
                            && held <= next.msgs.len()
                            && e["data"]["hash"] == json!(next.hash_at(held))
                        {
                            base = held;
                        } else if let Carried::New(_) = carried {
                            // As OpenClaw passed it, with no belief.
                            break;
                        } else {
                            base = 0;
                        }
                    }
                    Attempt::Refused(e) => panic!("{method} refused: {e}\n{}", self.log.join("\n")),
                    Attempt::Died => break,
                    Attempt::GivenUp => return None,
                }
            }
        }
    }
}

/// `assemble`'s window over delta views, rebuilt from the client's own messages (the view the
/// call sent, then its tail).
pub(super) fn rebuilt(result: &Value, view: &[Value]) -> Value {
    let mut messages = Vec::new();
    for item in result["window"].as_array().expect("a window") {
        match item {
            Value::Number(n) => messages.push(view[n.as_u64().unwrap() as usize].clone()),
            Value::Array(r) => {
                let (a, b) = (r[0].as_u64().unwrap(), r[1].as_u64().unwrap());
                messages.extend((a..b).map(|p| view[p as usize].clone()));
            }
            made => messages.push(made.clone()),
        }
    }
    json!({ "messages": messages })
}
