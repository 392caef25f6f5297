//! One configured hook as the pipeline keeps it: the loaded version (swapped alone by a reload
//! of that hook, with its own generation) and what its instances did so far (for `check` and
//! `doctor`).

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use serde::Serialize;
use serde_json::Value as Json;

use crate::contract::Method;

use super::hook::{HookSource, priority_of};

/// One loaded version of a hook.
#[derive(Clone, Debug)]
pub(crate) struct HookVersion {
    /// What makes its instances.
    pub source: Arc<dyn HookSource>,
    /// Its entry config (`host.config` of the hook).
    pub config: Arc<Json>,
    /// Where its instances run: `thread` (a worker thread of this process), `process` (a child
    /// process each, `host.isolation: "process"`) or `builtin` (the host's own code).
    pub runs_in: &'static str,
    /// Bumped by every reload of this hook alone.
    pub generation: u64,
}

/// One configured hook: its current version and its record.
#[derive(Debug)]
pub(crate) struct HookCell {
    /// The configured id (`host.pipeline.hooks`).
    pub id: String,
    /// Its place in `host.pipeline.hooks` (ties of priority keep this order).
    pub index: usize,
    current: RwLock<HookVersion>,
    status: Mutex<HookStatus>,
}

/// What a hook's instances did, across the sessions of one loaded pipeline.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HookStatus {
    /// The hook functions it defines, in [`Method::HOOKS`] order (known once an instance ran).
    pub defines: Vec<String>,
    /// Calls per hook function that returned.
    pub calls: BTreeMap<String, u64>,
    /// Instances that were quarantined (one per session at most).
    pub quarantines: u64,
    /// The latest failure, with the method it happened in.
    pub last_failure: Option<String>,
    /// The hook's generation (reloads of this hook alone).
    pub generation: u64,
}

impl HookCell {
    /// A cell serving `version` of hook `id`, configured at `index`.
    pub(crate) fn new(id: &str, index: usize, version: HookVersion) -> Self {
        let generation = version.generation;
        HookCell {
            id: id.to_owned(),
            index,
            current: RwLock::new(version),
            status: Mutex::new(HookStatus {
                generation,
                ..HookStatus::default()
            }),
        }
    }

    /// The current version (cheap: `Arc` clones).
    pub(crate) fn current(&self) -> HookVersion {
        self.current.read().clone()
    }

    /// The current generation.
    pub(crate) fn generation(&self) -> u64 {
        self.current.read().generation
    }

    /// The current version's priority.
    pub(crate) fn priority(&self) -> f64 {
        priority_of(self.current.read().source.info())
    }

    /// Swaps in a new loaded version; returns its generation. Instances follow it at their
    /// next turn; the other hooks' instances are not touched.
    pub(crate) fn swap(&self, version: HookVersion) -> u64 {
        let mut v = self.current.write();
        let generation = v.generation + 1;
        *v = HookVersion {
            generation,
            ..version
        };
        let mut s = self.status.lock();
        s.generation = v.generation;
        s.last_failure = None;
        v.generation
    }

    /// The record so far.
    pub(crate) fn status(&self) -> HookStatus {
        self.status.lock().clone()
    }

    /// An instance started, defining `defines`.
    pub(super) fn started(&self, defines: &[Method]) {
        let mut s = self.status.lock();
        s.defines = defines.iter().map(|m| m.as_str().to_owned()).collect();
    }

    /// A call of `method` returned a result the pipeline accepted.
    pub(super) fn called(&self, method: Method) {
        *self
            .status
            .lock()
            .calls
            .entry(method.as_str().to_owned())
            .or_default() += 1;
    }

    /// An instance failed and was quarantined for its session.
    pub(super) fn failed(&self, why: &str) {
        let mut s = self.status.lock();
        s.quarantines += 1;
        s.last_failure = Some(why.to_owned());
    }
}
