//! The direct call path: running a component's main core module with the
//! canonical ABI of the contract's few signatures, done by hand.
//!
//! A policy built the standard way (wit-bindgen in the guest, wit-component
//! to wrap it) is a thin component around one core module that exports each
//! slot function under its canonical name (`gangway:policy/fairness@2.0.0#order`),
//! `cabi_realloc`, the `cabi_post_*` functions and its memory, and imports at
//! most `gangway:policy/log@2.x`'s `log`. The component adds helper modules
//! (a shim and fixup that wire `log` to the main module's memory, a start
//! shim that calls `_initialize`) and type information, nothing else that
//! runs. Which core module and instance each slot function really comes
//! from, with which canonical options (string encoding, realloc,
//! post-return, memory), how the main module's `log` import is wired and
//! what the helpers do are read from the component's own wiring
//! ([`super::wiring`]), so the path runs exactly what the component runtime
//! would run. Entering the core module directly skips the component runtime's
//! per-call bookkeeping: on wasmtime 48 a whole empty slot call (encoding,
//! the guest's work and decoding included) takes 471 ns through the
//! component runtime and 229 ns this way (`cargo bench --bench wasm_round`,
//! `empty_slot_call`), which makes the RFold replay's Wasm loop 10 % faster.
//!
//! The sandbox is the same wasmtime store, memory cap and budget. The ABI
//! checks the component runtime makes on the way in and out are made here
//! too, with the same outcome: a pointer out of bounds or misaligned, a bad
//! result discriminant, a string that is not UTF-8, a `log` level out of
//! range, a `log` from inside `cabi_realloc` or a post-return function all
//! fail the call (and discard the instance), as a lift or lower error or a
//! trap would. A refusal's text and a log message are charged to the call's
//! fuel (one unit a byte) before the host reads them, then checked whole,
//! only their first bytes copied out; a `log` costs fuel for the host's
//! work besides, as it does through the component runtime.
//!
//! Only a component of exactly this shape takes the path; anything else
//! (strings in UTF-16, `log` lowered with another memory or wired to
//! another function, a nested policy component, any other core instance,
//! ...) is declined with the reason, said at info level (`-v` in the hosts), and runs through
//! the component runtime, as on any engine configured with
//! [`super::CallPath::Component`].

// Numbers here come from the guest or its component: no wrapping
// arithmetic, no `as` casts.
#![warn(clippy::arithmetic_side_effects, clippy::as_conversions)]

use std::cell::Cell;
use std::ops::Range;

use gangway_plugin_sdk::Slot;
use wasmparser::{Chunk, Parser, Payload};
use wasmtime::{
    Caller, Engine, ExternType, FuncType, InstancePre, Linker, Memory, Module, Store, Trap,
    TypedFunc, ValType,
};
use wit_component::DecodedWasm;
use wit_parser::{Function, Resolve, Type, TypeDefKind, WorldItem};

use super::contract::{bounded_utf8, check_version, is_log, parse_name};
use super::disk_cache::DiskCache;
use super::store::{HostState, charge_log, charge_read, record_log, take_log_slot};
use super::wiring::{Checked, Decline, Lifted, Wiring};

/// A slot's core exports.
pub(crate) struct DirectSlot {
    pub(crate) slot: Slot,
    init: String,
    call: String,
    post_init: Option<String>,
    post_call: Option<String>,
    /// The slot's `-buffered` functions (`view-buffer`, `call`), if the
    /// component exports them (contract 2.1).
    buffered: Option<(String, String)>,
}

/// A component's main core module, compiled and linked, ready to instantiate.
pub(crate) struct DirectCode {
    pre: InstancePre<HostState>,
    realloc: String,
    memory: String,
    /// The export the component calls once at instantiation, if any.
    initialize: Option<String>,
    slots: Vec<DirectSlot>,
}

impl DirectCode {
    /// Finds the core module `component` (whose top level is `top`) lifts
    /// its slot functions from and prepares it to serve `slots` (each with
    /// its exported interface name, e.g. `gangway:policy/fairness@2.0.0`).
    /// Declines, with the reason, if the component is not of the standard
    /// shape: every slot function and `init` lifted from one instance of one
    /// top-level module under its canonical name, with one realloc and one
    /// memory and UTF-8 strings, and that instance's `log` import served by
    /// the imported `log` lowered with the same memory; the caller then
    /// uses the component runtime, which gives the authoritative answer.
    /// With `buffered_calls`, a 2.1 slot is entered through its `-buffered`
    /// functions when the module has them with the contract's signatures.
    pub(crate) fn prepare(
        engine: &Engine,
        disk: &DiskCache,
        deadline: std::time::Instant,
        component: &[u8],
        top: &TopLevel<'_>,
        slots: &[(Slot, &str)],
        buffered_calls: bool,
    ) -> Checked<DirectCode> {
        if !contract_types(component, slots) {
            return Err(Decline(
                "the component's types are not exactly the contract's".into(),
            ));
        }
        let wiring = Wiring::read(component)
            .ok_or_else(|| Decline("the component does not parse".into()))?;
        let (main, mut direct) = lifted_slots(&wiring, slots)?;
        let modules: Vec<&[u8]> = top
            .modules
            .iter()
            .map(|range| component.get(range.clone()).unwrap_or_default())
            .collect();
        let plan = wiring.core_plan(&main, &modules)?;
        let (Some(realloc), Some(memory)) = (main.realloc.clone(), main.memory.clone()) else {
            return Err(Decline(
                "the slot functions have no realloc or memory".into(),
            ));
        };
        let bytes = modules
            .get(usize::try_from(main.module).unwrap_or(usize::MAX))
            .ok_or_else(|| Decline("the main module is missing".into()))?;
        let module = disk
            .module(engine, bytes, deadline)
            .map_err(|e| Decline(format!("the main module does not compile: {e}")))?;
        let linker = core_linker(engine, &module, &memory)?;
        check_signatures(
            &module,
            &realloc,
            &memory,
            plan.initialize.as_deref(),
            &direct,
        )?;
        // A slot whose `-buffered` functions have other core signatures
        // than the contract's (or an engine that does not use them) is
        // called the 2.0 way.
        for s in &mut direct {
            s.buffered = s.buffered.take().filter(|(view_buffer, call)| {
                buffered_calls
                    && has_signature(&module, view_buffer, &[ValType::I32], &[ValType::I32])
                    && has_signature(&module, call, &[ValType::I32], &[ValType::I64])
            });
        }
        let pre = linker
            .instantiate_pre(&module)
            .map_err(|e| Decline(format!("the main module does not link: {e}")))?;
        Ok(DirectCode {
            pre,
            realloc,
            memory,
            initialize: plan.initialize,
            slots: direct,
        })
    }

    /// The slots whose calls go through their `-buffered` functions.
    pub(crate) fn buffered_slots(&self) -> Vec<Slot> {
        self.slots
            .iter()
            .filter(|s| s.buffered.is_some())
            .map(|s| s.slot)
            .collect()
    }

    /// Instantiates the module in `store` for `slot`, entered through the
    /// slot's `-buffered` twins if it has them and `twins`, else through
    /// the slot's own functions.
    pub(crate) fn instantiate(
        &self,
        store: &mut Store<HostState>,
        slot: Slot,
        twins: bool,
    ) -> wasmtime::Result<DirectInstance> {
        let names = self
            .slots
            .iter()
            .find(|s| s.slot == slot)
            .ok_or_else(|| wasmtime::Error::msg(format!("the {slot} slot is not exported")))?;
        let instance = self.pre.instantiate(&mut *store)?;
        if let Some(initialize) = &self.initialize {
            instance
                .get_typed_func::<(), ()>(&mut *store, initialize)?
                .call(&mut *store, ())?;
        }
        let post = |store: &mut Store<HostState>, name: &Option<String>| {
            name.as_deref()
                .map(|n| instance.get_typed_func::<i32, ()>(&mut *store, n))
                .transpose()
        };
        let buffered = match &names.buffered {
            Some((view_buffer, call)) if twins => Some(Buffered {
                view_buffer: instance.get_typed_func(&mut *store, view_buffer)?,
                call: instance.get_typed_func(&mut *store, call)?,
                buffer: Cell::new(None),
            }),
            _ => None,
        };
        Ok(DirectInstance {
            memory: instance
                .get_memory(&mut *store, &self.memory)
                .ok_or_else(|| wasmtime::Error::msg("no memory export"))?,
            realloc: instance.get_typed_func(&mut *store, &self.realloc)?,
            init: instance.get_typed_func(&mut *store, &names.init)?,
            call: instance.get_typed_func(&mut *store, &names.call)?,
            post_init: post(store, &names.post_init)?,
            post_call: post(store, &names.post_call)?,
            buffered,
        })
    }
}

/// Each slot's `init` and call, lifted from one core instance under their
/// canonical names with one realloc and one memory: the main instance
/// (the first slot function's) and each slot's core exports.
fn lifted_slots(wiring: &Wiring, slots: &[(Slot, &str)]) -> Checked<(Lifted, Vec<DirectSlot>)> {
    let mut main: Option<Lifted> = None;
    let mut direct = Vec::new();
    for (slot, interface) in slots {
        let mut names = Vec::new();
        for function in ["init", slot.call()] {
            let lifted = wiring.lifted(interface, function)?;
            let first = main.get_or_insert_with(|| lifted.clone());
            if (first.instance, first.module) != (lifted.instance, lifted.module) {
                return Err(Decline(format!(
                    "{interface}#{function} is lifted from another core instance than the other slot functions"
                )));
            }
            if lifted.name != format!("{interface}#{function}") {
                return Err(Decline(format!(
                    "{interface}#{function} is lifted from the core export {}, not its canonical name",
                    lifted.name
                )));
            }
            if lifted.realloc.is_none()
                || lifted.memory.is_none()
                || first.realloc != lifted.realloc
                || first.memory != lifted.memory
            {
                return Err(Decline(format!(
                    "{interface}#{function} is lifted without the realloc and memory the other slot functions use"
                )));
            }
            names.push((lifted.name, lifted.post_return));
        }
        let (call, post_call) = names.pop().ok_or_else(|| Decline("no call".into()))?;
        let (init, post_init) = names.pop().ok_or_else(|| Decline("no init".into()))?;
        direct.push(DirectSlot {
            slot: *slot,
            init,
            call,
            post_init,
            post_call,
            buffered: main
                .as_ref()
                .and_then(|m| buffered_functions(wiring, interface, m)),
        });
    }
    let main = main.ok_or_else(|| Decline("no slot functions".into()))?;
    Ok((main, direct))
}

/// The main module's realloc, memory, start shim and slot functions have
/// the core signatures the canonical ABI gives them.
fn check_signatures(
    module: &Module,
    realloc: &str,
    memory: &str,
    initialize: Option<&str>,
    direct: &[DirectSlot],
) -> Checked<()> {
    if !has_func(module, realloc, 4, 1) {
        return Err(Decline(format!(
            "the realloc {realloc} has another signature"
        )));
    }
    if !matches!(
        module.get_export(memory),
        Some(ExternType::Memory(m)) if !m.is_64() && !m.is_shared()
    ) {
        return Err(Decline(format!(
            "the memory {memory} is not an unshared 32-bit memory"
        )));
    }
    if let Some(initialize) = initialize
        && !has_func(module, initialize, 0, 0)
    {
        return Err(Decline(format!(
            "the start shim calls {initialize}, which is not a function of no arguments"
        )));
    }
    for s in direct {
        let post_ok =
            |name: &Option<String>| name.as_deref().is_none_or(|n| has_func(module, n, 1, 0));
        if !has_func(module, &s.init, 2, 1)
            || !has_func(module, &s.call, 2, 1)
            || !post_ok(&s.post_init)
            || !post_ok(&s.post_call)
        {
            return Err(Decline(format!(
                "the {} slot's core functions have other signatures than the contract's",
                s.slot
            )));
        }
    }
    Ok(())
}

/// A live instance of the main core module, entered directly.
pub(crate) struct DirectInstance {
    memory: Memory,
    realloc: TypedFunc<(i32, i32, i32, i32), i32>,
    init: TypedFunc<(i32, i32), i32>,
    call: TypedFunc<(i32, i32), i32>,
    post_init: Option<TypedFunc<i32, ()>>,
    post_call: Option<TypedFunc<i32, ()>>,
    /// The slot's call entered once (contract 2.1), if the module has it.
    buffered: Option<Buffered>,
}

/// A slot's `-buffered` functions and the view buffer the guest gave.
struct Buffered {
    view_buffer: TypedFunc<i32, i32>,
    call: TypedFunc<i32, i64>,
    /// The buffer's address and the length asked for, once asked.
    buffer: Cell<Option<(u32, usize)>>,
}

impl DirectInstance {
    /// `init(config) -> result<list<u8>, string>`: the manifest's bytes
    /// (at most `max` + 1 of them are copied out; a longer manifest is
    /// refused by its decoder).
    pub(crate) fn init(
        &self,
        store: &mut Store<HostState>,
        config: &[u8],
        max: usize,
    ) -> wasmtime::Result<Result<Vec<u8>, String>> {
        self.invoke(
            store,
            &self.init,
            self.post_init.as_ref(),
            config,
            |memory, payload| {
                let bytes = bytes(memory, payload)?;
                Ok(bytes[..bytes.len().min(max.saturating_add(1))].to_vec())
            },
        )
    }

    /// The slot call, `f(view) -> result<list<u8>, string>`: `read` sees the
    /// reply bytes in the guest's memory (before post-return frees them).
    pub(crate) fn call<R>(
        &self,
        store: &mut Store<HostState>,
        view: &[u8],
        read: impl FnOnce(&[u8]) -> R,
    ) -> wasmtime::Result<Result<R, String>> {
        if let Some(buffered) = &self.buffered {
            return self.call_buffered(buffered, store, view, read);
        }
        self.invoke(
            store,
            &self.call,
            self.post_call.as_ref(),
            view,
            |memory, payload| Ok(read(bytes(memory, payload)?)),
        )
    }

    /// The slot call through its `-buffered` functions: the view written
    /// into the buffer the guest keeps (asked for again only when a view is
    /// longer than the last one asked for), one entry into the guest, the
    /// reply read where the answer points.
    fn call_buffered<R>(
        &self,
        buffered: &Buffered,
        store: &mut Store<HostState>,
        view: &[u8],
        read: impl FnOnce(&[u8]) -> R,
    ) -> wasmtime::Result<Result<R, String>> {
        let len = i32::try_from(view.len())
            .map_err(|_| wasmtime::Error::msg("view too long for a 32-bit guest"))?;
        let ptr = match buffered.buffer.get() {
            Some((ptr, asked)) if asked >= view.len() => ptr,
            _ => {
                // An ordinary export: the guest may `log` in it, as the
                // contract allows everywhere but in `cabi_realloc` and
                // post-return (and the component runtime lets it).
                let ptr = buffered.view_buffer.call(&mut *store, len)?.cast_unsigned();
                buffered.buffer.set(Some((ptr, view.len())));
                ptr
            }
        };
        let memory = self.memory.data_mut(&mut *store);
        let target = span(ptr, view.len())
            .and_then(|r| memory.get_mut(r))
            .ok_or_else(|| wasmtime::Error::msg("view buffer: beyond end of memory"))?;
        target.copy_from_slice(view);
        let answer = buffered.call.call(&mut *store, len)?.cast_unsigned();
        // address << 32 | error << 31 | length
        // (Both fit: the shift leaves 32 bits, the mask 31.)
        let address = u32::try_from(answer >> 32).unwrap_or(u32::MAX);
        let length = u32::try_from(answer & 0x7fff_ffff).unwrap_or(u32::MAX);
        let payload = (address, length);
        if answer & (1 << 31) == 0 {
            let memory = self.memory.data(&*store);
            Ok(Ok(read(bytes(memory, payload)?)))
        } else {
            Ok(Err(self.refusal(store, payload)?))
        }
    }

    /// A refusal's text at `payload`: its bytes charged to the call's fuel
    /// before they are read, then checked whole as UTF-8, at most
    /// `log_bytes` (the configured log message length) kept.
    fn refusal(
        &self,
        store: &mut Store<HostState>,
        payload: (u32, u32),
    ) -> wasmtime::Result<String> {
        let len = bytes(self.memory.data(&*store), payload)?.len();
        charge_read(&mut *store, len)?;
        let memory = self.memory.data(&*store);
        refusal(memory, payload, store.data().log_bytes)
    }

    /// Calls `entry` with `arg` as a `list<u8>` and lifts its
    /// `result<_, string>`: `ok` lifts the ok case from the payload words,
    /// the error case is a string. Post-return runs after both.
    fn invoke<R>(
        &self,
        store: &mut Store<HostState>,
        entry: &TypedFunc<(i32, i32), i32>,
        post: Option<&TypedFunc<i32, ()>>,
        arg: &[u8],
        ok: impl FnOnce(&[u8], (u32, u32)) -> wasmtime::Result<R>,
    ) -> wasmtime::Result<Result<R, String>> {
        let args = self.lower_list(store, arg)?;
        let ret = entry.call(&mut *store, args)?;
        // The guest's memory, looked up once for the whole reply.
        let memory = self.memory.data(&*store);
        let (tag, payload) = result_area(memory, ret)?;
        let answer = match tag {
            0 => Ok(ok(memory, payload)?),
            _ => Err(self.refusal(store, payload)?),
        };
        if let Some(post) = post {
            forbid_leaving(store, |store| post.call(&mut *store, ret))?;
        }
        Ok(answer)
    }

    /// Copies `bytes` into memory the guest's realloc gave: the `(ptr, len)`
    /// arguments of a `list<u8>`.
    fn lower_list(
        &self,
        store: &mut Store<HostState>,
        bytes: &[u8],
    ) -> wasmtime::Result<(i32, i32)> {
        let len = i32::try_from(bytes.len())
            .map_err(|_| wasmtime::Error::msg("list too long for a 32-bit guest"))?;
        let ptr = forbid_leaving(store, |store| {
            self.realloc.call(&mut *store, (0, 0, 1, len))
        })?;
        let memory = self.memory.data_mut(&mut *store);
        let target = span(ptr.cast_unsigned(), bytes.len())
            .and_then(|r| memory.get_mut(r))
            .ok_or_else(|| wasmtime::Error::msg("realloc return: beyond end of memory"))?;
        target.copy_from_slice(bytes);
        Ok((ptr, len))
    }
}

/// The discriminant and the two payload words (a pointer and a length,
/// unchecked) of a `result` in the return area at `ret` of `memory`.
fn result_area(memory: &[u8], ret: i32) -> wasmtime::Result<(u8, (u32, u32))> {
    let ret = ret.cast_unsigned();
    if !ret.is_multiple_of(4) {
        return Err(wasmtime::Error::msg("return pointer not aligned"));
    }
    let area = span(ret, 12)
        .and_then(|r| memory.get(r))
        .ok_or_else(|| wasmtime::Error::msg("pointer out of bounds of memory"))?;
    let word = |w: &[u8]| u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
    match area[0] {
        tag @ (0 | 1) => Ok((tag, (word(&area[4..8]), word(&area[8..12])))),
        tag => Err(wasmtime::Error::msg(format!(
            "unexpected discriminant: {tag}"
        ))),
    }
}

/// The `len` bytes at `ptr` in `memory`.
fn bytes(memory: &[u8], (ptr, len): (u32, u32)) -> wasmtime::Result<&[u8]> {
    span(ptr, usize::try_from(len).unwrap_or(usize::MAX))
        .and_then(|r| memory.get(r))
        .ok_or_else(|| wasmtime::Error::msg("list pointer/length out of bounds of memory"))
}

/// A refusal's text (already charged): checked whole, at most
/// `log_bytes` (the configured log message length) kept.
fn refusal(memory: &[u8], payload: (u32, u32), log_bytes: usize) -> wasmtime::Result<String> {
    let bytes = bytes(memory, payload)?;
    std::str::from_utf8(bytes)
        .map_err(|e| wasmtime::Error::msg(format!("invalid utf-8 in a string: {e}")))?;
    bounded_utf8(bytes, log_bytes)
        .map_err(|e| wasmtime::Error::msg(format!("invalid utf-8 in a string: {e}")))
}

fn forbid_leaving<R>(
    store: &mut Store<HostState>,
    f: impl FnOnce(&mut Store<HostState>) -> wasmtime::Result<R>,
) -> wasmtime::Result<R> {
    store.data_mut().may_leave = false;
    let result = f(store);
    store.data_mut().may_leave = true;
    result
}

/// `[start, start + len)` if it does not overflow.
fn span(start: u32, len: usize) -> Option<Range<usize>> {
    let start = usize::try_from(start).ok()?;
    Some(start..start.checked_add(len)?)
}

/// Whether `module` exports a function `name` of `params` i32s to
/// `results` i32s (every signature of the contract's core ABI is all i32).
fn has_func(module: &Module, name: &str, params: usize, results: usize) -> bool {
    let Some(ExternType::Func(ty)) = module.get_export(name) else {
        return false;
    };
    i32_signature(&ty, params, results)
}

fn i32_signature(ty: &FuncType, params: usize, results: usize) -> bool {
    ty.params().len() == params
        && ty.results().len() == results
        && ty
            .params()
            .chain(ty.results())
            .all(|t| matches!(t, ValType::I32))
}

/// Whether the component-level types are the contract's: each slot's `init`
/// and bulk call, and `log` if it is imported. (The core signatures alone do
/// not say: `order(view: string)` lowers to the same two i32s as
/// `order(view: list<u8>)`.)
fn contract_types(component: &[u8], slots: &[(Slot, &str)]) -> bool {
    let Ok(DecodedWasm::Component(resolve, world)) = wit_component::decode(component) else {
        return false;
    };
    let world = &resolve.worlds[world];
    let named = |items: &mut dyn Iterator<Item = &WorldItem>, name: &dyn Fn(&str) -> bool| {
        items
            .filter_map(|item| match item {
                WorldItem::Interface { id, .. } => Some(*id),
                _ => None,
            })
            .find(|id| resolve.id_of(*id).is_some_and(|n| name(&n)))
    };
    let types = Types(&resolve);
    let slots_ok = slots.iter().all(|(slot, interface)| {
        let Some(id) = named(&mut world.exports.values(), &|n| n == *interface) else {
            return false;
        };
        let functions = &resolve.interfaces[id].functions;
        let takes_bytes = |f: &Function| f.params.len() == 1 && types.is_bytes(&f.params[0].ty);
        let gives_bytes = |f: &Function| {
            f.result.is_some_and(|r| {
                types.is_result_or_string(&r, |ok| ok.is_some_and(|t| types.is_bytes(&t)))
            })
        };
        let init_ok = functions
            .get("init")
            .is_some_and(|f| takes_bytes(f) && gives_bytes(f));
        let call_ok = functions
            .get(slot.call())
            .is_some_and(|f| takes_bytes(f) && gives_bytes(f));
        init_ok && call_ok
    });
    let log = named(&mut world.imports.values(), &|n| is_log(n));
    let log_ok = log.is_none_or(|id| {
        resolve.interfaces[id]
            .functions
            .get("log")
            .is_some_and(|f| {
                f.result.is_none()
                    && f.params.len() == 2
                    && types.is_level_enum(&f.params[0].ty)
                    && types.is_string(&f.params[1].ty)
            })
    });
    slots_ok && log_ok
}

/// Structural checks on WIT types.
struct Types<'r>(&'r Resolve);

impl Types<'_> {
    /// `t` with type aliases followed.
    fn resolved(&self, mut t: Type) -> Type {
        while let Type::Id(id) = t
            && let TypeDefKind::Type(inner) = self.0.types[id].kind
        {
            t = inner;
        }
        t
    }

    fn kind(&self, t: &Type) -> Option<&TypeDefKind> {
        match self.resolved(*t) {
            Type::Id(id) => Some(&self.0.types[id].kind),
            _ => None,
        }
    }

    fn is_string(&self, t: &Type) -> bool {
        matches!(self.resolved(*t), Type::String)
    }

    /// `list<u8>`.
    fn is_bytes(&self, t: &Type) -> bool {
        matches!(self.kind(t), Some(TypeDefKind::List(e)) if matches!(self.resolved(*e), Type::U8))
    }

    /// `result<T, string>` where `ok(T)` holds.
    fn is_result_or_string(&self, t: &Type, ok: impl Fn(Option<Type>) -> bool) -> bool {
        matches!(self.kind(t), Some(TypeDefKind::Result(r))
            if ok(r.ok) && r.err.is_some_and(|e| self.is_string(&e)))
    }

    /// The `log.level` enum: `error`, `warn`, `info`, `debug` in that order.
    fn is_level_enum(&self, t: &Type) -> bool {
        matches!(self.kind(t), Some(TypeDefKind::Enum(e))
            if e.cases.iter().map(|c| c.name.as_str()).eq(["error", "warn", "info", "debug"]))
    }
}

/// What sits directly inside a component: its core modules (byte ranges)
/// and the names it imports and exports.
pub(crate) struct TopLevel<'a> {
    modules: Vec<Range<usize>>,
    /// The names of the component's imports.
    pub(crate) imports: Vec<&'a str>,
    /// The names of the component's exports.
    pub(crate) exports: Vec<&'a str>,
}

impl<'a> TopLevel<'a> {
    /// Reads `component`'s top level; `None` if it does not parse.
    pub(crate) fn read(component: &'a [u8]) -> Option<TopLevel<'a>> {
        let mut parser = Parser::new(0);
        let mut rest = component;
        let mut top = TopLevel {
            modules: Vec::new(),
            imports: Vec::new(),
            exports: Vec::new(),
        };
        loop {
            let (payload, consumed) = match parser.parse(rest, true).ok()? {
                Chunk::Parsed { consumed, payload } => (payload, consumed),
                Chunk::NeedMoreData(_) => return None,
            };
            rest = rest.get(consumed..)?;
            match payload {
                Payload::ModuleSection {
                    unchecked_range, ..
                } => {
                    // The outer parser goes on after the nested bytes.
                    rest = rest.get(unchecked_range.len()..)?;
                    top.modules.push(unchecked_range);
                }
                Payload::ComponentSection {
                    unchecked_range, ..
                } => {
                    rest = rest.get(unchecked_range.len()..)?;
                }
                Payload::ComponentImportSection(reader) => {
                    for import in reader {
                        top.imports.push(import.ok()?.name.name);
                    }
                }
                Payload::ComponentExportSection(reader) => {
                    for export in reader {
                        top.exports.push(export.ok()?.name.name);
                    }
                }
                Payload::End(_) => return Some(top),
                _ => {}
            }
        }
    }
}

/// A linker that gives `module` its one allowed import, `log` of
/// `gangway:policy/log@2.x`, reading messages from the memory exported as
/// `memory`; declines if it imports anything else.
fn core_linker(engine: &Engine, module: &Module, memory: &str) -> Checked<Linker<HostState>> {
    let mut linker = Linker::new(engine);
    for import in module.imports() {
        let interface = import.module();
        let compatible = parse_name(interface)
            .is_some_and(|(iface, v)| iface == "log" && check_version(interface, v).is_ok());
        let is_log_func = matches!(import.ty(), ExternType::Func(ty) if i32_signature(&ty, 3, 0));
        if !compatible || import.name() != "log" || !is_log_func {
            return Err(Decline(format!(
                "the main module imports {interface}.{}, not the contract's log",
                import.name()
            )));
        }
        let memory = memory.to_string();
        linker
            .func_wrap(
                interface,
                "log",
                move |caller: Caller<'_, HostState>, level: i32, ptr: i32, len: i32| {
                    core_log(caller, &memory, level, ptr, len)
                },
            )
            .map_err(|e| Decline(format!("log does not link: {e}")))?;
    }
    Ok(linker)
}

/// `log(level, message)` lowered to `(i32, ptr, len)`: checked as the
/// component runtime checks it, charged to the call's fuel, and past the
/// per-call limit dropped after the checks.
fn core_log(
    mut caller: Caller<'_, HostState>,
    memory: &str,
    level: i32,
    ptr: i32,
    len: i32,
) -> wasmtime::Result<()> {
    if !caller.data().may_leave {
        return Err(Trap::CannotLeaveComponent.into());
    }
    let level = match level {
        0 => "error",
        1 => "warn",
        2 => "info",
        3 => "debug",
        other => {
            return Err(wasmtime::Error::msg(format!(
                "unexpected discriminant: {other}"
            )));
        }
    };
    let Some(wasmtime::Extern::Memory(memory)) = caller.get_export(memory) else {
        return Err(wasmtime::Error::msg("no memory export"));
    };
    let len = usize::try_from(len.cast_unsigned()).unwrap_or(usize::MAX);
    let range = span(ptr.cast_unsigned(), len)
        .filter(|r| r.end <= memory.data_size(&caller))
        .ok_or_else(|| wasmtime::Error::msg("string pointer/length out of bounds of memory"))?;
    charge_log(&mut caller, len)?;
    let keep = take_log_slot(caller.data_mut(), len);
    let message = &memory.data(&caller)[range];
    std::str::from_utf8(message)
        .map_err(|e| wasmtime::Error::msg(format!("invalid utf-8 in a string: {e}")))?;
    if keep {
        let text = bounded_utf8(message, caller.data().log_bytes)
            .map_err(|e| wasmtime::Error::msg(format!("invalid utf-8 in a string: {e}")))?
            .to_string();
        record_log(caller.data_mut(), level, &text);
    }
    Ok(())
}

/// The core export names of `interface`'s `-buffered` functions
/// (`view-buffer`, `call`; contract 2.1), if the component lifts both
/// under their canonical names from `main`'s instance.
fn buffered_functions(wiring: &Wiring, interface: &str, main: &Lifted) -> Option<(String, String)> {
    let (name, version) = interface.rsplit_once('@')?;
    let buffered = format!("{name}-buffered@{version}");
    let mut names = ["view-buffer", "call"].into_iter().map(|function| {
        wiring
            .lifted(&buffered, function)
            .ok()
            .filter(|l| {
                (l.instance, l.module) == (main.instance, main.module)
                    && l.name == format!("{buffered}#{function}")
            })
            .map(|l| l.name)
    });
    Some((names.next()??, names.next()??))
}

/// Whether `module` exports a function `name` of exactly these parameter
/// and result types.
fn has_signature(module: &Module, name: &str, params: &[ValType], results: &[ValType]) -> bool {
    let Some(ExternType::Func(ty)) = module.get_export(name) else {
        return false;
    };
    let same = |a: &mut dyn ExactSizeIterator<Item = ValType>, b: &[ValType]| {
        a.len() == b.len() && a.zip(b).all(|(x, y)| ValType::eq(&x, y))
    };
    same(&mut ty.params(), params) && same(&mut ty.results(), results)
}
