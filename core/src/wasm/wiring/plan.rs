//! What instantiating a component runs, checked against what the direct
//! path runs: the main module alone, its `log` imports served by the host,
//! and its `_initialize` called if the component calls it.
//!
//! A component built the standard way (wit-component) instantiates, in
//! order: a shim (a table and a trampoline per lowered import), the main
//! module with its `log` import bound to the shim's trampoline, a fixup
//! that places `log` lowered with the main module's memory into the shim's
//! table, and, if the main module exports `_initialize`, a start shim that
//! calls it. The direct path runs that and nothing else, so every core
//! instance the component makes must be one of these, wired this way;
//! otherwise the direct path declines with the first difference found.

use super::module_shape::{Fixup, ImportKind, ModuleShape, Shim, StartShim};
use super::{Checked, CompInstance, CoreExport, CoreFunc, CoreInstance, Decline, Func, Lifted};
use super::{Options, Wiring, at};
use crate::wasm::contract::is_log;

/// What the direct path runs besides the main module's slot functions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct CorePlan {
    /// The main module's export the component calls once at instantiation,
    /// after the `log` import is wired (wit-component's start shim calls
    /// `_initialize` this way), if any.
    pub(crate) initialize: Option<String>,
}

/// A core instance of a known helper module.
struct Helper<T> {
    instance: u32,
    args: Vec<(String, u32)>,
    shape: T,
}

impl<T> Helper<T> {
    fn new(instance: u32, args: &[(String, u32)], shape: T) -> Helper<T> {
        Helper {
            instance,
            args: args.to_vec(),
            shape,
        }
    }
}

/// The helper instances of a component.
#[derive(Default)]
struct Helpers {
    shim: Option<Helper<Shim>>,
    fixup: Option<Helper<Fixup>>,
    start: Option<Helper<StartShim>>,
}

impl Wiring {
    /// Checks that instantiating the component runs only the main module
    /// (the instance `main` comes from, whose code is `modules[main.module]`,
    /// top-level module sections by ordinal) and helpers that do what the
    /// direct path does in their place, and says what the path must call.
    pub(crate) fn core_plan(&self, main: &Lifted, modules: &[&[u8]]) -> Checked<CorePlan> {
        if self.start {
            return Err(Decline::new("the component has a start function"));
        }
        for inst in &self.instances {
            if let CompInstance::Instantiated { component, .. } = inst
                && at(&self.components, *component).is_none_or(Option::is_none)
            {
                return Err(Decline(format!(
                    "the component instantiates nested component {component}, which is not a plain re-export"
                )));
            }
        }
        let memory = main
            .memory
            .as_deref()
            .ok_or_else(|| Decline::new("the slot functions are lifted without a memory"))?;
        let helpers = self.helpers(main.instance, modules)?;
        let main_shape = at(modules, main.module)
            .and_then(|bytes| ModuleShape::read(bytes))
            .ok_or_else(|| Decline::new("the main module does not parse"))?;
        if main_shape.start.is_some() {
            return Err(Decline::new(
                "the main module has a start function, which runs before its imports are wired",
            ));
        }
        let Some(CoreInstance::Module { args, .. }) = at(&self.core_instances, main.instance)
        else {
            return Err(Decline::new("the main instance is not a module instance"));
        };
        for import in &main_shape.imports {
            let what = format!("the main module's import {}.{}", import.module, import.name);
            if !matches!(import.kind, ImportKind::Func(_)) {
                return Err(Decline(format!("{what} is not a function")));
            }
            let arg =
                arg(args, &import.module).ok_or_else(|| Decline(format!("{what} is not given")))?;
            let func = self.instance_func(arg, &import.name).ok_or_else(|| {
                Decline(format!("{what} is not a function the component defines"))
            })?;
            self.check_log(&what, func, main, memory, &helpers)?;
        }
        let initialize = match &helpers.start {
            None => None,
            Some(start) => Some(self.start_target(start, main, &helpers)?),
        };
        Ok(CorePlan { initialize })
    }

    /// Classifies every module instance but `main` as a helper, or declines.
    fn helpers(&self, main: u32, modules: &[&[u8]]) -> Checked<Helpers> {
        let mut helpers = Helpers::default();
        for (index, inst) in (0u32..).zip(&self.core_instances) {
            let CoreInstance::Module { module, args } = inst else {
                continue;
            };
            if index == main {
                continue;
            }
            let other = || {
                Decline(format!(
                    "core instance {index} runs a module other than the main one and wit-component's shim, fixup and start shim"
                ))
            };
            let shape = at(&self.modules, *module)
                .copied()
                .flatten()
                .and_then(|ordinal| at(modules, ordinal))
                .and_then(|bytes| ModuleShape::read(bytes))
                .ok_or_else(other)?;
            if let Some(shim) = shape.as_shim()
                && helpers.shim.is_none()
            {
                helpers.shim = Some(Helper::new(index, args, shim));
            } else if let Some(fixup) = shape.as_fixup()
                && helpers.fixup.is_none()
            {
                helpers.fixup = Some(Helper::new(index, args, fixup));
            } else if let Some(start) = shape.as_start()
                && helpers.start.is_none()
            {
                helpers.start = Some(Helper::new(index, args, start));
            } else {
                return Err(other());
            }
        }
        if let Some(shim) = &helpers.shim {
            self.check_table_writers(shim, &helpers)?;
        }
        Ok(helpers)
    }

    /// Only the fixup may receive the shim's table (or the shim instance).
    fn check_table_writers(&self, shim: &Helper<Shim>, helpers: &Helpers) -> Checked<()> {
        let fixup = helpers.fixup.as_ref().map(|f| f.instance);
        for (index, inst) in (0u32..).zip(&self.core_instances) {
            let CoreInstance::Module { args, .. } = inst else {
                continue;
            };
            for (_, arg) in args {
                let gives_table = *arg == shim.instance
                    || matches!(at(&self.core_instances, *arg),
                    Some(CoreInstance::Exports(exports)) if exports.iter().any(|(_, kind, i)| {
                        *kind == wasmparser::ExternalKind::Table && self.is_shim_table(shim, *i)
                    }));
                if gives_table && Some(index) != fixup {
                    return Err(Decline(format!(
                        "core instance {index} can change the shim's table"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Export `name` of core instance `instance`, as a core function.
    fn instance_func(&self, instance: u32, name: &str) -> Option<&CoreFunc> {
        match at(&self.core_instances, instance)? {
            CoreInstance::Exports(exports) => {
                let (_, _, index) = exports.iter().rev().find(|(n, kind, _)| {
                    n == name
                        && matches!(
                            kind,
                            wasmparser::ExternalKind::Func | wasmparser::ExternalKind::FuncExact
                        )
                })?;
                at(&self.core_funcs, *index)
            }
            // A module instance's export, not in the function index space:
            // only the shim's trampolines are followed, by name.
            CoreInstance::Module { .. } => None,
        }
    }

    /// Checks that `func`, bound to a main module import, is the host's
    /// `log` lowered with the main module's memory, directly or through the
    /// shim's table as the fixup fills it.
    fn check_log(
        &self,
        what: &str,
        func: &CoreFunc,
        main: &Lifted,
        memory: &str,
        helpers: &Helpers,
    ) -> Checked<()> {
        let lowered = match func {
            CoreFunc::Export(CoreExport { instance, name }) => match &helpers.shim {
                Some(shim) if shim.instance == *instance => {
                    self.through_shim(what, name, shim, helpers.fixup.as_ref(), main)?
                }
                _ => None,
            },
            lowered => Some(lowered),
        };
        match lowered {
            Some(CoreFunc::Lower { func, options }) => {
                self.check_lower(what, *func, options, main, memory)
            }
            _ => Err(Decline(format!(
                "{what} is bound to a core function, not the lowered log"
            ))),
        }
    }

    /// The core function the shim's trampoline `name` reaches once the
    /// fixup has filled the shim's table, checked to be filled in time.
    fn through_shim<'w>(
        &'w self,
        what: &str,
        name: &str,
        shim: &Helper<Shim>,
        fixup: Option<&Helper<Fixup>>,
        main: &Lifted,
    ) -> Checked<Option<&'w CoreFunc>> {
        let (slot, sig) = shim.shape.trampoline(name).ok_or_else(|| {
            Decline(format!(
                "{what} is the shim's export {name}, not a trampoline"
            ))
        })?;
        if !sig.is_log() {
            return Err(Decline(format!(
                "{what} calls the shim's table with another type than log's"
            )));
        }
        let fixup =
            fixup.ok_or_else(|| Decline(format!("{what} goes through a table nothing fills")))?;
        if fixup.instance < main.instance {
            return Err(Decline(format!(
                "{what} goes through a table filled before the main module exists"
            )));
        }
        if fixup
            .shape
            .last_slot()
            .is_some_and(|last| last >= shim.shape.size)
        {
            return Err(Decline::new(
                "the fixup writes past the end of the shim's table (instantiation traps)",
            ));
        }
        let (table_module, table_name) = &fixup.shape.table;
        let fills_shim = arg(&fixup.args, table_module)
            .and_then(|a| self.instance_table(a, table_name))
            .is_some_and(|table| self.is_shim_table(shim, table));
        if !fills_shim {
            return Err(Decline::new(
                "the fixup fills another table than the shim's",
            ));
        }
        let (module, field) = fixup.shape.slot(*slot).ok_or_else(|| {
            Decline(format!(
                "{what} goes through table slot {slot}, which nothing fills"
            ))
        })?;
        let placed = arg(&fixup.args, module)
            .and_then(|a| self.instance_func(a, field))
            .ok_or_else(|| {
                Decline(format!(
                    "the fixup's import {module}.{field} is not a function the component defines"
                ))
            })?;
        Ok(Some(placed))
    }

    /// Export `name` of the exports instance `instance`, as a core table
    /// index.
    fn instance_table(&self, instance: u32, name: &str) -> Option<u32> {
        let CoreInstance::Exports(exports) = at(&self.core_instances, instance)? else {
            return None;
        };
        exports
            .iter()
            .rev()
            .find(|(n, kind, _)| n == name && *kind == wasmparser::ExternalKind::Table)
            .map(|(_, _, index)| *index)
    }

    /// Whether core table `table` is the shim's table.
    fn is_shim_table(&self, shim: &Helper<Shim>, table: u32) -> bool {
        at(&self.core_tables, table).cloned().flatten()
            == Some(CoreExport {
                instance: shim.instance,
                name: shim.shape.table.clone(),
            })
    }

    /// Checks a `canon lower` that serves the main module's `log`: of the
    /// imported `log`, UTF-8, with the slot functions' memory.
    fn check_lower(
        &self,
        what: &str,
        func: u32,
        options: &Options,
        main: &Lifted,
        memory: &str,
    ) -> Checked<()> {
        options.check(&format!("the log lowered for {what}"))?;
        if options.post_return.is_some() {
            return Err(Decline(format!(
                "the log lowered for {what} has a post-return"
            )));
        }
        let own_memory = Some(CoreExport {
            instance: main.instance,
            name: memory.to_string(),
        });
        let lowered_memory = options
            .memory
            .and_then(|m| at(&self.core_memories, m).cloned().flatten());
        if lowered_memory != own_memory {
            return Err(Decline(format!(
                "the log lowered for {what} reads another memory than the slot functions'"
            )));
        }
        let imported_log = match self.func(func) {
            Some(Func::InstanceExport { instance, name }) if name == "log" => {
                matches!(self.instance(*instance), Some(CompInstance::Imported(i)) if is_log(i))
            }
            _ => false,
        };
        if !imported_log {
            return Err(Decline(format!(
                "{what} is served by another function than the imported log"
            )));
        }
        Ok(())
    }

    /// The main module's export the start shim calls, checked to run after
    /// the main module and the fixup.
    fn start_target(
        &self,
        start: &Helper<StartShim>,
        main: &Lifted,
        helpers: &Helpers,
    ) -> Checked<String> {
        let after_fixup = helpers
            .fixup
            .as_ref()
            .is_none_or(|f| f.instance < start.instance);
        if start.instance < main.instance || !after_fixup {
            return Err(Decline::new(
                "the start shim runs before the main module is wired",
            ));
        }
        let (module, name) = &start.shape.calls;
        let called = arg(&start.args, module).and_then(|a| self.instance_func(a, name));
        match called {
            Some(CoreFunc::Export(CoreExport { instance, name })) if *instance == main.instance => {
                Ok(name.clone())
            }
            _ => Err(Decline::new(
                "the start shim calls something other than a main module export",
            )),
        }
    }
}

/// The instance given for import module `name` (the last one given wins,
/// as in instantiation).
fn arg(args: &[(String, u32)], name: &str) -> Option<u32> {
    args.iter().rev().find(|(n, _)| n == name).map(|(_, i)| *i)
}
