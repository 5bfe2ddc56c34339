//! What a small core module inside a component is: wit-component's shim
//! (a table and functions that call through it), its fixup (fills that
//! table from its imports), its start shim (calls the main module's
//! `_initialize` at instantiation), or something else. Read with
//! wasmparser, instruction by instruction where it matters, so a module
//! that only looks like one of them is "something else".

use std::collections::BTreeMap;

use super::at;

use wasmparser::{
    ElementItems, ElementKind, ElementSectionReader, ExternalKind, ImportSectionReader, Operator,
    Parser, Payload, TableSectionReader, TypeRef,
};
use wasmparser::{RefType, ValType};

/// A core function type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Signature {
    pub(super) params: Vec<ValType>,
    pub(super) results: Vec<ValType>,
}

impl Signature {
    /// `(i32, i32, i32) -> ()`: `log(level, message)` lowered.
    pub(super) fn is_log(&self) -> bool {
        self.params == [ValType::I32; 3] && self.results.is_empty()
    }
}

/// An import.
#[derive(Clone, Debug)]
pub(super) struct Import {
    pub(super) module: String,
    pub(super) name: String,
    pub(super) kind: ImportKind,
}

/// What an import is.
#[derive(Clone, Debug)]
pub(super) enum ImportKind {
    /// A function of this type index.
    Func(u32),
    /// A table.
    Table,
    /// Anything else.
    Other,
}

/// A function whose whole body is `local.get 0 .. local.get n-1; i32.const
/// slot; call_indirect (type ty) (table 0); end` with no locals: it calls
/// table 0's entry `slot` with its own arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Trampoline {
    params: u32,
    slot: u32,
    ty: u32,
}

/// An active element segment: functions placed in a table from an offset.
#[derive(Clone, Debug)]
struct Placement {
    table: u32,
    offset: Option<u32>,
    funcs: Vec<u32>,
}

/// Everything the shapes below are told apart by.
#[derive(Default)]
pub(super) struct ModuleShape {
    types: Vec<Option<Signature>>,
    pub(super) imports: Vec<Import>,
    /// The type index of each defined function.
    funcs: Vec<u32>,
    /// The minimum size of each defined table (funcref tables only; any
    /// other table makes the module another shape).
    tables: Vec<u64>,
    other_tables: bool,
    memories: u32,
    globals: u32,
    data: u32,
    tags: u32,
    pub(super) start: Option<u32>,
    exports: Vec<(String, ExternalKind, u32)>,
    placements: Vec<Placement>,
    /// Element segments that are not a plain list of functions placed at
    /// a constant offset in a table.
    other_elements: bool,
    bodies: Vec<Option<Trampoline>>,
}

/// wit-component's shim: a table and the trampolines that call through it.
pub(super) struct Shim {
    /// The name the table is exported under.
    pub(super) table: String,
    /// The table's size.
    pub(super) size: u64,
    /// Exported trampolines: name -> (table slot, the type it calls).
    trampolines: BTreeMap<String, (u32, Signature)>,
}

impl Shim {
    /// The table slot export `name` calls, and the type it calls it with.
    pub(super) fn trampoline(&self, name: &str) -> Option<&(u32, Signature)> {
        self.trampolines.get(name)
    }
}

/// wit-component's fixup: fills an imported table with imported functions.
pub(super) struct Fixup {
    /// The table import (module, name).
    pub(super) table: (String, String),
    /// What ends up in each slot: the function import (module, name).
    slots: BTreeMap<u64, (String, String)>,
}

impl Fixup {
    /// The function import placed in `slot` by the last segment writing it.
    pub(super) fn slot(&self, slot: u32) -> Option<&(String, String)> {
        self.slots.get(&u64::from(slot))
    }

    /// The highest slot written, if any.
    pub(super) fn last_slot(&self) -> Option<u64> {
        self.slots.keys().next_back().copied()
    }
}

/// wit-component's start shim: calls its one imported function at
/// instantiation.
pub(super) struct StartShim {
    /// The imported function it calls (module, name).
    pub(super) calls: (String, String),
}

impl ModuleShape {
    /// Reads `bytes`; `None` if they do not parse or use GC types.
    pub(super) fn read(bytes: &[u8]) -> Option<ModuleShape> {
        let mut m = ModuleShape::default();
        for payload in Parser::new(0).parse_all(bytes) {
            match payload.ok()? {
                Payload::TypeSection(reader) => {
                    for ty in reader.into_iter_err_on_gc_types() {
                        let ty = ty.ok()?;
                        m.types.push(Some(Signature {
                            params: ty.params().to_vec(),
                            results: ty.results().to_vec(),
                        }));
                    }
                }
                Payload::ImportSection(reader) => m.import_section(reader)?,
                Payload::FunctionSection(reader) => {
                    for ty in reader {
                        m.funcs.push(ty.ok()?);
                    }
                }
                Payload::TableSection(reader) => m.table_section(reader)?,
                Payload::MemorySection(reader) => {
                    m.memories = m.memories.saturating_add(reader.count())
                }
                Payload::GlobalSection(reader) => {
                    m.globals = m.globals.saturating_add(reader.count())
                }
                Payload::TagSection(reader) => m.tags = m.tags.saturating_add(reader.count()),
                Payload::DataSection(reader) => m.data = m.data.saturating_add(reader.count()),
                Payload::StartSection { func, .. } => m.start = Some(func),
                Payload::ExportSection(reader) => {
                    for export in reader {
                        let export = export.ok()?;
                        m.exports
                            .push((export.name.to_string(), export.kind, export.index));
                    }
                }
                Payload::ElementSection(reader) => m.element_section(reader)?,
                Payload::CodeSectionEntry(body) => m.bodies.push(trampoline(&body)),
                _ => {}
            }
        }
        Some(m)
    }

    /// Imports: functions (with their type), tables, anything else.
    fn import_section(&mut self, reader: ImportSectionReader<'_>) -> Option<()> {
        for import in reader.into_imports() {
            let import = import.ok()?;
            self.imports.push(Import {
                module: import.module.to_string(),
                name: import.name.to_string(),
                kind: match import.ty {
                    TypeRef::Func(t) | TypeRef::FuncExact(t) => ImportKind::Func(t),
                    TypeRef::Table(_) => ImportKind::Table,
                    _ => ImportKind::Other,
                },
            });
        }
        Some(())
    }

    /// Defined tables: the size of each 32-bit funcref table; any other
    /// table is noted.
    fn table_section(&mut self, reader: TableSectionReader<'_>) -> Option<()> {
        for table in reader {
            let table = table.ok()?;
            if table.ty.element_type == RefType::FUNCREF && !table.ty.table64 {
                self.tables.push(table.ty.initial);
            } else {
                self.other_tables = true;
            }
        }
        Some(())
    }

    /// Element segments: functions placed in a table at a constant offset,
    /// declared segments (nothing at run time), or something else (noted).
    fn element_section(&mut self, reader: ElementSectionReader<'_>) -> Option<()> {
        for element in reader {
            let element = element.ok()?;
            match (element.kind, element.items) {
                (
                    ElementKind::Active {
                        table_index,
                        offset_expr,
                    },
                    ElementItems::Functions(funcs),
                ) => {
                    let mut ops = offset_expr.get_operators_reader();
                    let offset = match (ops.read().ok(), ops.read().ok()) {
                        (Some(Operator::I32Const { value }), Some(Operator::End)) => {
                            u32::try_from(value).ok()
                        }
                        _ => None,
                    };
                    self.placements.push(Placement {
                        table: table_index.unwrap_or(0),
                        offset,
                        funcs: funcs.into_iter().collect::<Result<_, _>>().ok()?,
                    });
                }
                (ElementKind::Declared, _) => {}
                _ => self.other_elements = true,
            }
        }
        Some(())
    }

    /// The signature of type `ty`.
    fn signature(&self, ty: u32) -> Option<&Signature> {
        at(&self.types, ty)?.as_ref()
    }

    /// Whether the module defines no memory, global, data or tag, exactly
    /// `tables` funcref tables, and functions only if `funcs`.
    fn defines_only(&self, funcs: bool, tables: usize) -> bool {
        (funcs || self.funcs.is_empty())
            && self.tables.len() == tables
            && !self.other_tables
            && self.memories == 0
            && self.globals == 0
            && self.data == 0
            && self.tags == 0
    }

    /// The module as wit-component's shim, if it is one: no imports, one
    /// funcref table it exports and never fills itself, and only exported
    /// trampolines through that table.
    pub(super) fn as_shim(&self) -> Option<Shim> {
        if !self.imports.is_empty()
            || !self.defines_only(true, 1)
            || self.start.is_some()
            || !self.placements.is_empty()
            || self.other_elements
        {
            return None;
        }
        let mut table = None;
        let mut trampolines = BTreeMap::new();
        for (name, kind, index) in &self.exports {
            match kind {
                ExternalKind::Table if *index == 0 && table.is_none() => table = Some(name.clone()),
                ExternalKind::Func | ExternalKind::FuncExact => {
                    let own = at(&self.funcs, *index)?;
                    let t = at(&self.bodies, *index)?.as_ref()?;
                    let called = self.signature(t.ty)?;
                    let sig = self.signature(*own)?;
                    if usize::try_from(t.params).ok() != Some(sig.params.len()) || called != sig {
                        return None;
                    }
                    trampolines.insert(name.clone(), (t.slot, called.clone()));
                }
                _ => return None,
            }
        }
        Some(Shim {
            table: table?,
            size: *self.tables.first()?,
            trampolines,
        })
    }

    /// The module as wit-component's fixup, if it is one: it imports one
    /// table (its only table) and functions, defines nothing, and places
    /// imported functions in that table at constant offsets.
    pub(super) fn as_fixup(&self) -> Option<Fixup> {
        if !self.defines_only(false, 0)
            || self.start.is_some()
            || self.other_elements
            || !self.exports.is_empty()
        {
            return None;
        }
        let mut table = None;
        let mut funcs = Vec::new();
        for import in &self.imports {
            let name = (import.module.clone(), import.name.clone());
            match import.kind {
                ImportKind::Table if table.is_none() => table = Some(name),
                ImportKind::Func(_) => funcs.push(name),
                _ => return None,
            }
        }
        let mut slots = BTreeMap::new();
        for placement in &self.placements {
            if placement.table != 0 {
                return None;
            }
            let offset = u64::from(placement.offset?);
            for (i, func) in (0u64..).zip(&placement.funcs) {
                slots.insert(offset.checked_add(i)?, at(&funcs, *func)?.clone());
            }
        }
        Some(Fixup {
            table: table?,
            slots,
        })
    }

    /// The module as wit-component's start shim, if it is one: it imports
    /// one function of type `() -> ()`, defines nothing, and starts with it.
    pub(super) fn as_start(&self) -> Option<StartShim> {
        let [import] = self.imports.as_slice() else {
            return None;
        };
        let ImportKind::Func(ty) = import.kind else {
            return None;
        };
        let sig = self.signature(ty)?;
        (self.defines_only(false, 0)
            && self.placements.is_empty()
            && !self.other_elements
            && self.exports.is_empty()
            && self.start == Some(0)
            && sig.params.is_empty()
            && sig.results.is_empty())
        .then(|| StartShim {
            calls: (import.module.clone(), import.name.clone()),
        })
    }
}

/// `body` as a [`Trampoline`], if it is exactly one.
fn trampoline(body: &wasmparser::FunctionBody<'_>) -> Option<Trampoline> {
    if body.get_locals_reader().ok()?.get_count() != 0 {
        return None;
    }
    let mut ops = body.get_operators_reader().ok()?;
    let mut params = 0u32;
    loop {
        match ops.read().ok()? {
            Operator::LocalGet { local_index } if local_index == params => {
                params = params.checked_add(1)?;
            }
            Operator::I32Const { value } => {
                let slot = u32::try_from(value).ok()?;
                let Operator::CallIndirect {
                    type_index,
                    table_index: 0,
                } = ops.read().ok()?
                else {
                    return None;
                };
                let Operator::End = ops.read().ok()? else {
                    return None;
                };
                return ops.eof().then_some(Trampoline {
                    params,
                    slot,
                    ty: type_index,
                });
            }
            _ => return None,
        }
    }
}
