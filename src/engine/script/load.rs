//! Loading: read, compile, boot once, validate (contract §2, §3, §6). A [`ScriptFactory`] is a
//! validated file ([`Compiled`] over the shared [`Factory`]); each instance gets its own VM on
//! its own worker thread.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value as Json;

use super::instance::{VmSlot, WorkerVm};
use super::language::{Boot, Language, Loaded};
use super::located;
use super::site::worker_error;
use crate::contract::{self, EngineInfo, Method, Severity};
use crate::engine::instance::{Connect, Factory};
use crate::engine::{EngineFactory, InstanceContext};
use crate::error::{EngineError, EngineErrorKind, Op};
use crate::sandbox::{Limits, StopSignals, Worker};

/// How to load a script engine (any language).
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// The configured entry id; `info.id` should equal it (a warning, an error when `strict`).
    pub configured_id: Option<String>,
    /// Turn the id-mismatch warning into an error.
    pub strict: bool,
    /// The entry config (`host.config`, `ctx.config`).
    pub config: Arc<Json>,
    /// Budgets every language has: deadline, grace, memory, result caps.
    pub limits: Limits,
    /// `ctx.agentDir` for the load-time factory run.
    pub agent_dir: String,
    /// `ctx.workspaceDir` for the load-time factory run.
    pub workspace_dir: String,
    /// A caller-owned abort flag shared by every instance: while set, running calls stop with
    /// `Cancelled` (never a quarantine). The host clears it. Each instance also has its own
    /// flag, see `ScriptInstance::cancel_flag`.
    pub cancel: Option<Arc<AtomicBool>>,
    /// The file is a pipeline hook (validated as one: `info` and any hook functions).
    pub hook: bool,
}

fn label_for(path: &Path, opts: &LoadOptions) -> String {
    opts.configured_id.clone().unwrap_or_else(|| {
        path.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "script".into())
    })
}

/// Checks what loading found against the contract; returns the warnings.
fn validate(
    loaded: &Loaded,
    file: &str,
    label: &str,
    opts: &LoadOptions,
) -> Result<Vec<String>, EngineError> {
    let findings = if opts.hook {
        contract::check_hook_shape(&loaded.info, &loaded.members)
    } else {
        contract::check_engine_shape(
            &loaded.info,
            &loaded.members,
            opts.configured_id.as_deref(),
            opts.strict,
        )
    };
    let locate = |message: &str| -> Option<u32> {
        loaded
            .lines
            .iter()
            .find(|(name, _)| message.contains(&format!("`{name}`")))
            .map(|(_, l)| *l)
    };
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let mut first_line = None;
    for f in findings {
        let line = locate(&f.message);
        match f.severity {
            Severity::Error => {
                first_line = first_line.or(line);
                errors.push(f.message);
            }
            Severity::Warning => warnings.push(match line {
                Some(l) => format!("{file}:{l}: {}", f.message),
                None => format!("{file}: {}", f.message),
            }),
        }
    }
    if !errors.is_empty() {
        let engine = if loaded.info.id.is_empty() {
            label
        } else {
            &loaded.info.id
        };
        return Err(EngineError::new(
            crate::error::Op::Validate,
            engine,
            EngineErrorKind::Contract,
            errors.join("; "),
        )
        .at(located(file, first_line)));
    }
    Ok(warnings)
}

/// The worker thread owning one VM (empty until booted).
type VmWorker<V> = Worker<VmSlot<V>>;

/// Starts a worker and boots a VM of `L` on it.
fn spawn_vm<L: Language>(
    program: Arc<L::Program>,
    boot: Boot,
    op: Op,
) -> Result<(VmWorker<L::Vm>, Loaded), EngineError> {
    let file = boot.file.clone();
    let label = boot.label.clone();
    let limits = boot.limits.clone();
    let cancelled = boot.signals.cancel.clone();
    crate::sandbox::admit_worker(limits.max_abandoned_workers)
        .map_err(|m| EngineError::new(op, &label, EngineErrorKind::Limit, m))?;
    let worker = Worker::spawn(L::THREAD, super::WORKER_STACK, VmSlot::<L::Vm>::empty())
        .map_err(|m| EngineError::new(op, &label, EngineErrorKind::Runtime, m))?;
    let loaded = worker
        .call(limits.hard_timeout(), move |slot: &mut VmSlot<L::Vm>| {
            L::boot(&program, &boot).map(|(vm, loaded)| {
                slot.vm = Some(vm);
                loaded
            })
        })
        .map_err(|e| {
            worker_error(
                e,
                op,
                &label,
                &file,
                &limits,
                cancelled.load(Ordering::Relaxed),
            )
        })??;
    Ok((worker, loaded))
}

/// A validated engine file of language `L`, its instances each on a VM of their own.
pub(crate) type ScriptFactory<L> = Factory<Compiled<L>>;

/// What starts an instance of a validated file of language `L`: the compiled program and the
/// options it was loaded with.
#[derive(Debug)]
pub struct Compiled<L: Language> {
    path: PathBuf,
    file: String,
    program: Arc<L::Program>,
    opts: LoadOptions,
}

/// Loads an engine file of language `L` with its own `lang` limits, as the trait object the
/// engine loader hands out (see [`ScriptFactory::load`]).
pub(crate) fn load<L: Language>(
    path: &Path,
    opts: &LoadOptions,
    lang: L::Limits,
) -> Result<Arc<dyn EngineFactory>, EngineError> {
    Ok(ScriptFactory::<L>::load(path, opts, lang)?)
}

/// A file booted once: the program, what booting found, the file as errors name it and the
/// label.
type Booted<L> = (Arc<<L as Language>::Program>, Loaded, String, String);

/// Reads, compiles and boots `path` once.
fn boot_file<L: Language>(
    path: &Path,
    opts: &LoadOptions,
    lang: L::Limits,
) -> Result<Booted<L>, EngineError> {
    let label = label_for(path, opts);
    let file = path.display().to_string();
    let source = std::fs::read_to_string(path).map_err(|e| {
        EngineError::new(
            crate::error::Op::Load,
            &label,
            EngineErrorKind::MissingFile,
            format!("cannot read {file}: {e}"),
        )
        .at(located(&file, None))
    })?;
    let program = Arc::new(L::compile(&file, &source, &label, &opts.limits, &lang)?);
    let boot = Boot {
        file: file.clone(),
        config: opts.config.clone(),
        agent_dir: opts.agent_dir.clone(),
        workspace_dir: opts.workspace_dir.clone(),
        limits: opts.limits.clone(),
        label: label.clone(),
        signals: Arc::new(StopSignals::new(opts.cancel.clone())),
    };
    let (_worker, loaded) = spawn_vm::<L>(program.clone(), boot, Op::Load)?;
    Ok((program, loaded, file, label))
}

/// The top-level members a file of language `L` defines (each with whether it is a function),
/// booted once and not validated: enough to tell a hook file from an engine file.
pub(crate) fn members<L: Language>(
    path: &Path,
    opts: &LoadOptions,
    lang: L::Limits,
) -> Result<Vec<(String, bool)>, EngineError> {
    boot_file::<L>(path, opts, lang).map(|(_, loaded, _, _)| loaded.members)
}

impl<L: Language> ScriptFactory<L> {
    /// Loads, compiles and validates an engine file (contract §2, §3, §6): the file is booted
    /// once here so that every load-time failure surfaces before any session uses it. `lang`:
    /// the language's own limits.
    pub fn load(
        path: &Path,
        opts: &LoadOptions,
        lang: L::Limits,
    ) -> Result<Arc<Self>, EngineError> {
        let (program, loaded, file, label) = boot_file::<L>(path, opts, lang)?;
        let warnings = validate(&loaded, &file, &label, opts)?;
        for w in &warnings {
            tracing::warn!(engine = loaded.info.id, "{w}");
        }
        let compiled = Compiled {
            path: path.to_path_buf(),
            file,
            program,
            opts: opts.clone(),
        };
        Ok(Arc::new(Factory::new(
            path,
            loaded.info,
            warnings,
            compiled,
        )))
    }
}

impl<L: Language> Connect for Compiled<L> {
    type Transport = WorkerVm<L::Vm>;

    /// A fresh VM on a worker thread of its own.
    fn connect(
        &self,
        cx: &InstanceContext,
    ) -> Result<(EngineInfo, Vec<Method>, WorkerVm<L::Vm>), EngineError> {
        // The interrupt reads one cancel flag: the session's, else the factory's, else the
        // instance's own.
        let cancel = cx.cancel.clone().or_else(|| self.opts.cancel.clone());
        let signals = Arc::new(StopSignals::new(cancel));
        let vm_signals = Arc::clone(&signals);
        let label = label_for(&self.path, &self.opts);
        let boot = Boot {
            file: self.file.clone(),
            config: cx.config.clone(),
            agent_dir: cx.agent_dir.clone(),
            workspace_dir: cx.workspace_dir.clone(),
            limits: self.opts.limits.clone(),
            label: label.clone(),
            signals,
        };
        let (worker, loaded) = spawn_vm::<L>(self.program.clone(), boot, Op::Instantiate)?;
        validate(&loaded, &self.file, &label, &self.opts)?;
        let defined = Method::ALL
            .into_iter()
            .chain(Method::HOOKS)
            .filter(|m| loaded.members.iter().any(|(n, f)| *f && n == m.as_str()))
            .collect();
        let transport = WorkerVm::new(
            loaded.info.id.clone(),
            worker,
            self.opts.limits.clone(),
            self.file.clone(),
            loaded.lines,
            &vm_signals,
        );
        Ok((loaded.info, defined, transport))
    }
}
