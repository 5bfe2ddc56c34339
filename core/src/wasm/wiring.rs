//! How a component wires its exported slot functions to core code: for the
//! direct call path, which core module instance each lifted function comes
//! from, under which core export name, with which realloc, post-return and
//! memory. Read from the component's own sections by following its index
//! spaces, so the direct path runs exactly the code the component runtime
//! would, or declines.

use std::collections::HashMap;

use wasmparser::{
    CanonicalFunction, CanonicalOption, ComponentAlias, ComponentExternalKind, ComponentInstance,
    ComponentOuterAliasKind, ComponentTypeRef, ExternalKind, Instance, Parser, Payload,
};

/// A core item as the component's index spaces define it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum CoreItem {
    /// Export `name` of core instance `instance`.
    Export { instance: u32, name: String },
    /// Anything else (a lowered import, a builtin, ...).
    Other,
}

/// A core instance.
#[derive(Clone, Debug)]
enum CoreInstance {
    /// An instantiation of top-level module `module`.
    Module(u32),
    /// Anything else.
    Other,
}

/// A component function.
#[derive(Clone, Debug)]
enum Func {
    /// A lift of core function `core` with its canonical options.
    Lift {
        core: u32,
        realloc: Option<u32>,
        post_return: Option<u32>,
        memory: Option<u32>,
        /// Whether its strings are UTF-8 (the default), the only encoding
        /// the direct path reads.
        utf8: bool,
    },
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
    /// Another instance index this one re-exports.
    Alias(u32),
    /// Anything else.
    Other,
}

/// One lifted export function, resolved to core code (lifted with UTF-8
/// strings: a lift in another encoding is not resolved, and the component
/// takes the component runtime's path).
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
    core_funcs: Vec<CoreItem>,
    core_memories: Vec<CoreItem>,
    funcs: Vec<Func>,
    instances: Vec<CompInstance>,
    /// Top-level exports: name -> (kind, index).
    exports: HashMap<String, (ComponentExternalKind, u32)>,
    /// Nested components (their function exports, as the names of the
    /// function imports they re-export); `None` for any other shape.
    components: Vec<Option<HashMap<String, String>>>,
}

/// What a nested component re-exports: for each exported function, the
/// name of the imported function it is (wit-component nests such
/// components to give exported instances their types). `None` for any
/// other shape.
fn reexports(bytes: &[u8]) -> Option<HashMap<String, String>> {
    let mut funcs: Vec<Option<String>> = Vec::new();
    let mut out = HashMap::new();
    let mut depth = 0u32;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.ok()? {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) if depth > 0 => depth -= 1,
            _ if depth > 0 => {}
            Payload::ComponentImportSection(reader) => {
                for import in reader {
                    let import = import.ok()?;
                    if let ComponentTypeRef::Func(_) = import.ty {
                        funcs.push(Some(import.name.name.to_string()));
                    }
                }
            }
            Payload::ComponentAliasSection(reader) => {
                for alias in reader {
                    if let ComponentAlias::InstanceExport {
                        kind: ComponentExternalKind::Func,
                        ..
                    } = alias.ok()?
                    {
                        funcs.push(None);
                    }
                }
            }
            Payload::ComponentCanonicalSection(reader) => {
                for canon in reader {
                    if let CanonicalFunction::Lift { .. } = canon.ok()? {
                        funcs.push(None);
                    }
                }
            }
            Payload::ComponentExportSection(reader) => {
                for export in reader {
                    let export = export.ok()?;
                    if export.kind == ComponentExternalKind::Func {
                        let import = funcs.get(export.index as usize).cloned().flatten();
                        funcs.push(import.clone());
                        if let Some(import) = import {
                            out.insert(export.name.name.to_string(), import);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    Some(out)
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
                    w.defined_modules += 1;
                    depth += 1;
                }
                Payload::ComponentSection {
                    unchecked_range, ..
                } if depth == 0 => {
                    w.components
                        .push(component.get(unchecked_range).and_then(reexports));
                    depth += 1;
                }
                Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
                Payload::End(_) if depth > 0 => depth -= 1,
                _ if depth > 0 => {}
                Payload::InstanceSection(reader) => {
                    for inst in reader {
                        w.core_instances.push(match inst.ok()? {
                            Instance::Instantiate { module_index, .. } => {
                                CoreInstance::Module(module_index)
                            }
                            Instance::FromExports(_) => CoreInstance::Other,
                        });
                    }
                }
                Payload::ComponentInstanceSection(reader) => {
                    for inst in reader {
                        w.instances.push(match inst.ok()? {
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
                }
                Payload::ComponentAliasSection(reader) => {
                    for alias in reader {
                        w.alias(alias.ok()?);
                    }
                }
                Payload::ComponentCanonicalSection(reader) => {
                    for canon in reader {
                        match canon.ok()? {
                            CanonicalFunction::Lift {
                                core_func_index,
                                options,
                                ..
                            } => {
                                let pick = |f: fn(&CanonicalOption) -> Option<u32>| {
                                    options.iter().find_map(f)
                                };
                                w.funcs.push(Func::Lift {
                                    core: core_func_index,
                                    realloc: pick(|o| match o {
                                        CanonicalOption::Realloc(i) => Some(*i),
                                        _ => None,
                                    }),
                                    post_return: pick(|o| match o {
                                        CanonicalOption::PostReturn(i) => Some(*i),
                                        _ => None,
                                    }),
                                    memory: pick(|o| match o {
                                        CanonicalOption::Memory(i) => Some(*i),
                                        _ => None,
                                    }),
                                    utf8: !options.iter().any(|o| {
                                        matches!(
                                            o,
                                            CanonicalOption::UTF16 | CanonicalOption::CompactUTF16
                                        )
                                    }),
                                });
                            }
                            _ => w.core_funcs.push(CoreItem::Other),
                        }
                    }
                }
                Payload::ComponentImportSection(reader) => {
                    for import in reader {
                        match import.ok()?.ty {
                            ComponentTypeRef::Func(_) => w.funcs.push(Func::Other),
                            ComponentTypeRef::Instance(_) => w.instances.push(CompInstance::Other),
                            ComponentTypeRef::Module(_) => w.modules.push(None),
                            ComponentTypeRef::Component(_) => w.components.push(None),
                            _ => {}
                        }
                    }
                }
                Payload::ComponentExportSection(reader) => {
                    for export in reader {
                        let export = export.ok()?;
                        w.exports
                            .insert(export.name.name.to_string(), (export.kind, export.index));
                        // An export adds an index to its sort.
                        match export.kind {
                            ComponentExternalKind::Func => w.funcs.push(Func::Alias(export.index)),
                            ComponentExternalKind::Instance => {
                                w.instances.push(CompInstance::Alias(export.index));
                            }
                            ComponentExternalKind::Module => w.modules.push(None),
                            ComponentExternalKind::Component => w.components.push(None),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        Some(w)
    }

    fn alias(&mut self, alias: ComponentAlias<'_>) {
        match alias {
            ComponentAlias::CoreInstanceExport {
                kind,
                instance_index,
                name,
            } => {
                let item = CoreItem::Export {
                    instance: instance_index,
                    name: name.to_string(),
                };
                match kind {
                    ExternalKind::Func => self.core_funcs.push(item),
                    ExternalKind::Memory => self.core_memories.push(item),
                    _ => {}
                }
            }
            ComponentAlias::InstanceExport { kind, .. } => match kind {
                ComponentExternalKind::Func => self.funcs.push(Func::Other),
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

    /// The function `function` of the exported instance `interface`,
    /// resolved to the core export it lifts.
    pub(crate) fn lifted(&self, interface: &str, function: &str) -> Option<Lifted> {
        let (kind, mut inst) = *self.exports.get(interface)?;
        if kind != ComponentExternalKind::Instance {
            return None;
        }
        let mut func = loop {
            match self.instances.get(inst as usize)? {
                CompInstance::Alias(i) => inst = *i,
                CompInstance::Exports(e) => break *e.get(function)?,
                CompInstance::Instantiated { component, args } => {
                    let reexports = self.components.get(*component as usize)?.as_ref()?;
                    break *args.get(reexports.get(function)?)?;
                }
                CompInstance::Other => return None,
            }
        };
        let (core, realloc, post_return, memory) = loop {
            match self.funcs.get(func as usize)? {
                Func::Alias(f) => func = *f,
                // Strings in another encoding: the component runtime reads them.
                Func::Lift { utf8: false, .. } => return None,
                Func::Lift {
                    core,
                    realloc,
                    post_return,
                    memory,
                    utf8: true,
                } => break (*core, *realloc, *post_return, *memory),
                Func::Other => return None,
            }
        };
        let CoreItem::Export { instance, name } = self.core_funcs.get(core as usize)? else {
            return None;
        };
        let CoreInstance::Module(module) = self.core_instances.get(*instance as usize)? else {
            return None;
        };
        let module = (*self.modules.get(*module as usize)?)?;
        // Options must come from the same instance as the function.
        let same = |item: Option<&CoreItem>| match item {
            Some(CoreItem::Export { instance: i, name }) if i == instance => Some(name.clone()),
            _ => None,
        };
        let option = |index: Option<u32>, items: &[CoreItem]| match index {
            None => Some(None),
            Some(i) => same(items.get(i as usize)).map(Some),
        };
        Some(Lifted {
            instance: *instance,
            module,
            name: name.clone(),
            realloc: option(realloc, &self.core_funcs)?,
            post_return: option(post_return, &self.core_funcs)?,
            memory: option(memory, &self.core_memories)?,
        })
    }
}
