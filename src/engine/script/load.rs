//! Loading: read, compile, boot once, validate (contract §2, §3, §6). A [`ScriptFactory`] is a
//! validated file; each instance gets its own VM on its own worker thread.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value as Json;

use super::instance::ScriptInstance;
use super::language::{Boot, Language, Loaded};
use super::located;
use super::site::worker_error;
use crate::contract::{self, EngineInfo, Severity};
use crate::engine::{Engine, EngineFactory, InstanceContext};
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
    /// flag, see [`ScriptInstance::cancel_flag`].
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
type VmWorker<V> = Worker<Option<V>>;

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
    let worker = Worker::spawn(L::THREAD, super::WORKER_STACK, None::<L::Vm>)
        .map_err(|m| EngineError::new(op, &label, EngineErrorKind::Runtime, m))?;
    let loaded = worker
        .call(limits.hard_timeout(), move |slot: &mut Option<L::Vm>| {
            L::boot(&program, &boot).map(|(vm, loaded)| {
                *slot = Some(vm);
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

/// A validated engine file of language `L`.
#[derive(Debug)]
pub struct ScriptFactory<L: Language> {
    path: PathBuf,
    file: String,
    program: Arc<L::Program>,
    info: EngineInfo,
    warnings: Vec<String>,
    opts: LoadOptions,
}

/// Loads an engine file of language `L` with its own `lang` limits, as the trait object the
/// engine loader hands out (see [`ScriptFactory::load`]).
pub fn load<L: Language>(
    path: &Path,
    opts: &LoadOptions,
    lang: L::Limits,
) -> Result<Arc<dyn EngineFactory>, EngineError> {
    Ok(ScriptFactory::<L>::load(path, opts, lang)?)
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
        let warnings = validate(&loaded, &file, &label, opts)?;
        for w in &warnings {
            tracing::warn!(engine = loaded.info.id, "{w}");
        }
        Ok(Arc::new(ScriptFactory {
            path: path.to_path_buf(),
            file,
            program,
            info: loaded.info,
            warnings,
            opts: opts.clone(),
        }))
    }

    /// A fresh instance with its own VM and worker thread, typed (for
    /// [`ScriptInstance::cancel_flag`]).
    pub fn instantiate_typed(
        &self,
        cx: &InstanceContext,
    ) -> Result<ScriptInstance<L::Vm>, EngineError> {
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
        Ok(ScriptInstance::new(
            loaded,
            worker,
            self.opts.limits.clone(),
            self.file.clone(),
            vm_signals,
        ))
    }
}

impl<L: Language> EngineFactory for ScriptFactory<L> {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn source(&self) -> Option<&Path> {
        Some(&self.path)
    }

    fn warnings(&self) -> &[String] {
        &self.warnings
    }

    fn instantiate(&self, cx: &InstanceContext) -> Result<Box<dyn Engine>, EngineError> {
        Ok(Box::new(self.instantiate_typed(cx)?))
    }
}
