//! How a component wires its core code together, for the direct call path:
//! which core module instance each exported slot function is lifted from,
//! under which core export name and with which canonical options
//! ([`Wiring::lifted`]); how the main module's `log` import reaches the
//! host, and what else runs when the component is instantiated
//! ([`Wiring::core_plan`]). Read from the component's own sections by
//! following its index spaces, so the direct path runs exactly what the
//! component runtime would run, or declines with the reason ([`Decline`])
//! and the component runtime runs the module.

// Numbers here come from the guest or its component: no wrapping
// arithmetic, no `as` casts.
#![warn(clippy::arithmetic_side_effects, clippy::as_conversions)]

mod module_shape;
mod plan;
mod reexports;

use std::collections::HashMap;

use wasmparser::{
    CanonicalFunction, CanonicalOption, ComponentAlias, ComponentCanonicalSectionReader,
    ComponentExportSectionReader, ComponentExternalKind, ComponentImportSectionReader,
    ComponentInstance, ComponentInstanceSectionReader, ComponentOuterAliasKind, ComponentTypeRef,
    ExternalKind, Instance, InstanceSectionReader, InstantiationArgKind, Parser, Payload,
};

/// Why the direct path does not run a component (said at info level when
/// the module loads; the component runtime runs it instead).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Decline(pub(crate) String);

impl Decline {
    fn new(reason: impl Into<String>) -> Decline {
        Decline(reason.into())
    }
}

impl std::fmt::Display for Decline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Entry `index` of an index space (or of any list a component indexes).
fn at<T>(items: &[T], index: u32) -> Option<&T> {
    items.get(usize::try_from(index).ok()?)
}

/// A result the direct path can decline.
pub(crate) type Checked<T> = Result<T, Decline>;

/// An export of a core instance.
#[derive(Clone, Debug, PartialEq, Eq)]
struct CoreExport {
    instance: u32,
    name: String,
}

/// A core function as the component's core function index space defines it.
#[derive(Clone, Debug)]
enum CoreFunc {
    /// An export of a core instance.
    Export(CoreExport),
    /// A `canon lower` of component function `func`.
    Lower { func: u32, options: Options },
    /// Anything else (a builtin such as `resource.drop`, ...).
    Other,
}

/// A core instance.
#[derive(Clone, Debug)]
enum CoreInstance {
    /// An instantiation of core module `module` with these instances as its
    /// imports (module name -> core instance index).
    Module {
        module: u32,
        args: Vec<(String, u32)>,
    },
    /// Made of these exports: (name, kind, index in that kind's space).
    Exports(Vec<(String, ExternalKind, u32)>),
}

/// The canonical options of a lift or lower, all of them read.
#[derive(Clone, Debug, Default)]
struct Options {
    realloc: Option<u32>,
    post_return: Option<u32>,
    memory: Option<u32>,
    /// Strings in another encoding than UTF-8 (the only one the direct path
    /// reads and writes): its name.
    encoding: Option<&'static str>,
    /// An option the direct path does not implement (async, callback, ...).
    unsupported: Option<&'static str>,
}

impl Options {
    fn read(options: &[CanonicalOption]) -> Options {
        let mut o = Options::default();
        for option in options {
            match option {
                CanonicalOption::UTF8 => {}
                CanonicalOption::UTF16 => o.encoding = Some("utf16"),
                CanonicalOption::CompactUTF16 => o.encoding = Some("latin1+utf16"),
                CanonicalOption::Memory(i) => o.memory = Some(*i),
                CanonicalOption::Realloc(i) => o.realloc = Some(*i),
                CanonicalOption::PostReturn(i) => o.post_return = Some(*i),
                CanonicalOption::Async => o.unsupported = Some("async"),
                CanonicalOption::Callback(_) => o.unsupported = Some("callback"),
                CanonicalOption::CoreType(_) => o.unsupported = Some("core-type"),
                CanonicalOption::Gc => o.unsupported = Some("gc"),
            }
        }
        o
    }

    /// Declines options the direct path cannot honour.
    fn check(&self, what: &str) -> Checked<()> {
        if let Some(encoding) = self.encoding {
            return Err(Decline(format!(
                "{what} is {encoding}-encoded; the direct path reads only utf8 strings"
            )));
        }
        if let Some(option) = self.unsupported {
            return Err(Decline(format!(
                "{what} has the `{option}` canonical option"
            )));
        }
        Ok(())
    }
}

/// A component function.
#[derive(Clone, Debug)]
enum Func {
    /// A lift of core function `core`.
    Lift { core: u32, options: Options },
    /// Export `name` of component instance `instance`.
    InstanceExport { instance: u32, name: String },
    /// Another function index this one re-exports.
    Alias(u32),
    /// Anything else.
    Other,
}

/// A component instance.
#[derive(Clone, Debug)]
enum CompInstance {
    /// Made of these named exports (name -> component function index).
    Exports(HashMap<String, u32>),
    /// An instance of nested component `component`, its imports given by
    /// name (name -> component function index of this component).
    Instantiated {
        component: u32,
        args: HashMap<String, u32>,
    },
    /// The component's import of this name.
    Imported(String),
    /// Another instance index this one re-exports.
    Alias(u32),
    /// Anything else.
    Other,
}

/// One lifted export function, resolved to core code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Lifted {
    /// The core instance the function is exported from.
    pub(crate) instance: u32,
    /// The top-level module section (its ordinal) that instance instantiates.
    pub(crate) module: u32,
    /// The core export name of the function.
    pub(crate) name: String,
    /// The core export name of the realloc option, if any (same instance).
    pub(crate) realloc: Option<String>,
    /// The core export name of the post-return option, if any (same instance).
    pub(crate) post_return: Option<String>,
    /// The core export name of the memory option, if any (same instance).
    pub(crate) memory: Option<String>,
}

/// The component's index spaces, as far as the direct path needs them.
#[derive(Default)]
pub(crate) struct Wiring {
    /// The core module index space: `Some(k)` for the `k`-th module
    /// section of the top level, `None` for imported or aliased modules.
    modules: Vec<Option<u32>>,
    defined_modules: u32,
    core_instances: Vec<CoreInstance>,
    core_funcs: Vec<CoreFunc>,
    core_memories: Vec<Option<CoreExport>>,
    core_tables: Vec<Option<CoreExport>>,
    funcs: Vec<Func>,
    instances: Vec<CompInstance>,
    /// Top-level exports: name -> (kind, index).
    exports: HashMap<String, (ComponentExternalKind, u32)>,
    /// Nested components (their function exports, as the names of the
    /// function imports they re-export); `None` for any other shape.
    components: Vec<Option<HashMap<String, String>>>,
    /// Whether the component has a start function.
    start: bool,
}

impl Wiring {
    /// Reads the top level of `component`; `None` if it does not parse.
    pub(crate) fn read(component: &[u8]) -> Option<Wiring> {
        let mut w = Wiring::default();
        let mut depth = 0u32;
        for payload in Parser::new(0).parse_all(component) {
            let payload = payload.ok()?;
            match payload {
                Payload::ModuleSection { .. } if depth == 0 => {
                    w.modules.push(Some(w.defined_modules));
                    w.defined_modules = w.defined_modules.checked_add(1)?;
                    depth = depth.checked_add(1)?;
                }
                Payload::ComponentSection {
                    unchecked_range, ..
                } if depth == 0 => {
                    w.components.push(
                        component
                            .get(unchecked_range)
                            .and_then(reexports::reexports),
                    );
                    depth = depth.checked_add(1)?;
                }
                Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => {
                    depth = depth.checked_add(1)?;
                }
                Payload::End(_) if depth > 0 => depth = depth.saturating_sub(1),
                _ if depth > 0 => {}
                Payload::InstanceSection(reader) => w.core_instance_section(reader)?,
                Payload::ComponentInstanceSection(reader) => w.instance_section(reader)?,
                Payload::ComponentAliasSection(reader) => {
                    for alias in reader {
                        w.alias(alias.ok()?);
                    }
                }
                Payload::ComponentCanonicalSection(reader) => w.canonical_section(reader)?,
                Payload::ComponentImportSection(reader) => w.import_section(reader)?,
                Payload::ComponentExportSection(reader) => w.export_section(reader)?,
                Payload::ComponentStartSection { .. } => w.start = true,
                _ => {}
            }
        }
        Some(w)
    }

    /// Core instances: a module instantiated (with its instance
    /// arguments), or a bag of exports.
    fn core_instance_section(&mut self, reader: InstanceSectionReader<'_>) -> Option<()> {
        for inst in reader {
            self.core_instances.push(match inst.ok()? {
                Instance::Instantiate { module_index, args } => CoreInstance::Module {
                    module: module_index,
                    args: args
                        .iter()
                        .filter(|a| a.kind == InstantiationArgKind::Instance)
                        .map(|a| (a.name.to_string(), a.index))
                        .collect(),
                },
                Instance::FromExports(exports) => CoreInstance::Exports(
                    exports
                        .iter()
                        .map(|e| (e.name.to_string(), e.kind, e.index))
                        .collect(),
                ),
            });
        }
        Some(())
    }

    /// Component instances: a bag of function exports, or a component
    /// instantiated (with its function arguments).
    fn instance_section(&mut self, reader: ComponentInstanceSectionReader<'_>) -> Option<()> {
        for inst in reader {
            self.instances.push(match inst.ok()? {
                ComponentInstance::FromExports(exports) => CompInstance::Exports(
                    exports
                        .iter()
                        .filter(|e| e.kind == ComponentExternalKind::Func)
                        .map(|e| (e.name.name.to_string(), e.index))
                        .collect(),
                ),
                ComponentInstance::Instantiate {
                    component_index,
                    args,
                } => CompInstance::Instantiated {
                    component: component_index,
                    args: args
                        .iter()
                        .filter(|a| a.kind == ComponentExternalKind::Func)
                        .map(|a| (a.name.to_string(), a.index))
                        .collect(),
                },
            });
        }
        Some(())
    }

    /// Canonical functions: lifts add component functions, lowers (and
    /// every other canonical builtin) core functions.
    fn canonical_section(&mut self, reader: ComponentCanonicalSectionReader<'_>) -> Option<()> {
        for canon in reader {
            match canon.ok()? {
                CanonicalFunction::Lift {
                    core_func_index,
                    options,
                    ..
                } => self.funcs.push(Func::Lift {
                    core: core_func_index,
                    options: Options::read(&options),
                }),
                CanonicalFunction::Lower {
                    func_index,
                    options,
                } => self.core_funcs.push(CoreFunc::Lower {
                    func: func_index,
                    options: Options::read(&options),
                }),
                _ => self.core_funcs.push(CoreFunc::Other),
            }
        }
        Some(())
    }

    /// Imports: each adds an index to its sort.
    fn import_section(&mut self, reader: ComponentImportSectionReader<'_>) -> Option<()> {
        for import in reader {
            let import = import.ok()?;
            match import.ty {
                ComponentTypeRef::Func(_) => self.funcs.push(Func::Other),
                ComponentTypeRef::Instance(_) => self
                    .instances
                    .push(CompInstance::Imported(import.name.name.to_string())),
                ComponentTypeRef::Module(_) => self.modules.push(None),
                ComponentTypeRef::Component(_) => self.components.push(None),
                _ => {}
            }
        }
        Some(())
    }

    /// Exports: kept by name, and each adds an index to its sort.
    fn export_section(&mut self, reader: ComponentExportSectionReader<'_>) -> Option<()> {
        for export in reader {
            let export = export.ok()?;
            self.exports
                .insert(export.name.name.to_string(), (export.kind, export.index));
            match export.kind {
                ComponentExternalKind::Func => self.funcs.push(Func::Alias(export.index)),
                ComponentExternalKind::Instance => {
                    self.instances.push(CompInstance::Alias(export.index));
                }
                ComponentExternalKind::Module => self.modules.push(None),
                ComponentExternalKind::Component => self.components.push(None),
                _ => {}
            }
        }
        Some(())
    }

    fn alias(&mut self, alias: ComponentAlias<'_>) {
        match alias {
            ComponentAlias::CoreInstanceExport {
                kind,
                instance_index,
                name,
            } => {
                let export = CoreExport {
                    instance: instance_index,
                    name: name.to_string(),
                };
                match kind {
                    ExternalKind::Func | ExternalKind::FuncExact => {
                        self.core_funcs.push(CoreFunc::Export(export));
                    }
                    ExternalKind::Memory => self.core_memories.push(Some(export)),
                    ExternalKind::Table => self.core_tables.push(Some(export)),
                    _ => {}
                }
            }
            ComponentAlias::InstanceExport {
                kind,
                instance_index,
                name,
            } => match kind {
                ComponentExternalKind::Func => self.funcs.push(Func::InstanceExport {
                    instance: instance_index,
                    name: name.to_string(),
                }),
                ComponentExternalKind::Instance => self.instances.push(CompInstance::Other),
                ComponentExternalKind::Module => self.modules.push(None),
                ComponentExternalKind::Component => self.components.push(None),
                _ => {}
            },
            ComponentAlias::Outer { kind, .. } => match kind {
                ComponentOuterAliasKind::CoreModule => self.modules.push(None),
                ComponentOuterAliasKind::Component => self.components.push(None),
                _ => {}
            },
        }
    }

    /// Component instance `inst` with aliases followed.
    fn instance(&self, mut inst: u32) -> Option<&CompInstance> {
        loop {
            match at(&self.instances, inst)? {
                CompInstance::Alias(i) => inst = *i,
                other => return Some(other),
            }
        }
    }

    /// Component function `func` with aliases followed.
    fn func(&self, mut func: u32) -> Option<&Func> {
        loop {
            match at(&self.funcs, func)? {
                Func::Alias(f) => func = *f,
                other => return Some(other),
            }
        }
    }

    /// The function `function` of the exported instance `interface`,
    /// resolved to the core export it lifts, with every canonical option
    /// read: strings in another encoding, or an option the direct path does
    /// not implement, decline.
    pub(crate) fn lifted(&self, interface: &str, function: &str) -> Checked<Lifted> {
        let what = format!("{interface}#{function}");
        let unresolved = |how: &str| Decline(format!("{what} {how}"));
        let (kind, inst) = *self
            .exports
            .get(interface)
            .ok_or_else(|| unresolved("is not exported at the top level"))?;
        if kind != ComponentExternalKind::Instance {
            return Err(unresolved("is not exported as an instance"));
        }
        let func = match self.instance(inst) {
            Some(CompInstance::Exports(e)) => e.get(function).copied(),
            Some(CompInstance::Instantiated { component, args }) => {
                at(&self.components, *component)
                    .and_then(|c| c.as_ref())
                    .and_then(|reexports| reexports.get(function))
                    .and_then(|import| args.get(import).copied())
            }
            _ => None,
        }
        .ok_or_else(|| {
            unresolved("comes from a nested component or an instance of another shape")
        })?;
        let Some(Func::Lift { core, options }) = self.func(func) else {
            return Err(unresolved("is not a lift of a core function"));
        };
        options.check(&format!("the lift of {what}"))?;
        let Some(CoreFunc::Export(CoreExport { instance, name })) = at(&self.core_funcs, *core)
        else {
            return Err(unresolved("is not lifted from a core instance's export"));
        };
        let Some(CoreInstance::Module { module, .. }) = at(&self.core_instances, *instance) else {
            return Err(unresolved("is not lifted from a module instance"));
        };
        let module = at(&self.modules, *module)
            .copied()
            .flatten()
            .ok_or_else(|| unresolved("is lifted from an imported module"))?;
        // Options must come from the same instance as the function.
        let same = |item: Option<&CoreExport>| match item {
            Some(CoreExport { instance: i, name }) if i == instance => Some(name.clone()),
            _ => None,
        };
        let option =
            |index: Option<u32>, items: &dyn Fn(u32) -> Option<CoreExport>, which| match index {
                None => Ok(None),
                Some(i) => same(items(i).as_ref()).map(Some).ok_or_else(|| {
                    Decline(format!("the {which} of {what} comes from another instance"))
                }),
            };
        let func_export = |i: u32| match at(&self.core_funcs, i) {
            Some(CoreFunc::Export(e)) => Some(e.clone()),
            _ => None,
        };
        let memory_export = |i: u32| at(&self.core_memories, i).cloned().flatten();
        Ok(Lifted {
            instance: *instance,
            module,
            name: name.clone(),
            realloc: option(options.realloc, &func_export, "realloc")?,
            post_return: option(options.post_return, &func_export, "post-return")?,
            memory: option(options.memory, &memory_export, "memory")?,
        })
    }
}
