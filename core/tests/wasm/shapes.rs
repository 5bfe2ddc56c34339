//! The direct call path runs exactly what a component says, or declines:
//! every guest of these tests, in the standard shape wit-component makes
//! and in other shapes the component model allows, gets the same answers,
//! errors and `log` messages through the direct path as through wasmtime's
//! component runtime, and the direct path takes exactly the shapes it can
//! prove it runs as written. (The built-in plugins are compared with their
//! native twins on both paths in `differential.rs`.)

use std::sync::{Arc, Mutex};

use gangway_core::policy::PolicyErrorKind;
use gangway_core::wasm::CallPath;
use gangway_plugin_sdk::{Fairness, FairnessDecision};
use tracing_subscriber::fmt::MakeWriter;

use crate::guests;
use crate::support::{empty_view, past_trigger};

/// A guest's core module, before it is made a component.
struct Guest {
    name: &'static str,
    wat: String,
}

/// A fairness guest that logs twice on real views (info, then warn) and
/// answers the empty decision.
fn logger() -> Guest {
    let body = "(call $log (i32.const 2) (i32.const 300) (i32.const 7))
                (call $log (i32.const 1) (i32.const 320) (i32.const 12))";
    let data = r#"(data (i32.const 300) "looking") (data (i32.const 320) "still unsure")"#;
    Guest {
        name: "logger",
        wat: guests::with_log(&guests::fairness_wat("2.0.0", 100, body, data)),
    }
}

/// A guest whose `_initialize` logs and marks it ready; its real calls
/// refuse ("uninitialized") unless `_initialize` ran.
fn initializer() -> Guest {
    let fields = r#"(global $ready (mut i32) (i32.const 0))
        (func (export "_initialize")
          (global.set $ready (i32.const 1))
          (call $log (i32.const 3) (i32.const 420) (i32.const 5)))
        (data (i32.const 400) "uninitialized")
        (data (i32.const 420) "ready")"#;
    let body = "(if (i32.eqz (global.get $ready))
                  (then
                    (i32.store8 (i32.const 16) (i32.const 1))
                    (i32.store (i32.const 20) (i32.const 400))
                    (i32.store (i32.const 24) (i32.const 13))
                    (return (i32.const 16))))";
    Guest {
        name: "initializer",
        wat: guests::with_log(&guests::fairness_wat("2.0.0", 100, body, fields)),
    }
}

/// A guest whose main module has a start function that logs: it runs when
/// the main module is instantiated, before the component wires `log`.
fn booter() -> Guest {
    let fields = r#"(func $boot (call $log (i32.const 2) (i32.const 440) (i32.const 4)))
        (start $boot)
        (data (i32.const 440) "boot")"#;
    Guest {
        name: "booter",
        wat: guests::with_log(&guests::fairness_wat("2.0.0", 100, "", fields)),
    }
}

/// Every hostile guest of these tests.
fn hostile() -> Vec<Guest> {
    guests::BEHAVIOURS
        .into_iter()
        .map(|name| Guest {
            name,
            wat: guests::hostile_wat(name),
        })
        .collect()
}

/// A shape of component, made from a guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// As wit-component makes it.
    Standard,
    /// The main module's memory exported as "heap", not "memory".
    MemoryRenamed,
    /// Strings lifted and lowered as UTF-16.
    Utf16,
    /// Strings lifted and lowered as latin1+UTF-16.
    Latin1Utf16,
    /// `log` lowered with UTF-16 strings, the slot functions lifted with
    /// UTF-8 ones.
    LogInUtf16,
    /// `log` lowered with another core instance's memory.
    LogFromAnotherMemory,
    /// The main module's `log` import wired to a function that traps.
    LogRewiredToATrap,
    /// The whole policy component nested in another that re-exports it.
    Nested,
    /// The main module's `_initialize` never called by the component.
    InitializeNotCalled,
}

impl Shape {
    const ALL: [Shape; 9] = [
        Shape::Standard,
        Shape::MemoryRenamed,
        Shape::Utf16,
        Shape::Latin1Utf16,
        Shape::LogInUtf16,
        Shape::LogFromAnotherMemory,
        Shape::LogRewiredToATrap,
        Shape::Nested,
        Shape::InitializeNotCalled,
    ];

    /// The path an engine set to the direct path takes for this shape.
    fn path(self) -> CallPath {
        match self {
            Shape::Standard | Shape::MemoryRenamed | Shape::InitializeNotCalled => CallPath::Direct,
            _ => CallPath::Component,
        }
    }
}

/// The component of `guest` in `shape`; `None` where the shape does not
/// apply (a `log` shape for a guest without `log`, no `_initialize` to
/// leave uncalled).
fn component(guest: &Guest, shape: Shape) -> Option<Vec<u8>> {
    let encoded = |encoding| {
        let core =
            guests::with_metadata_in(&guest.wat, &[], guests::WIT, "fairness-policy", encoding);
        wit_component::ComponentEncoder::default()
            .validate(true)
            .module(&core)
            .unwrap()
            .encode()
            .unwrap()
    };
    let standard = guests::componentize(&guest.wat, &[], guests::WIT, "fairness-policy");
    let text = wasmprinter::print_bytes(&standard).unwrap();
    let logs = text.contains("(canon lower (func $log) (memory $memory)");
    let edited = match shape {
        Shape::Standard => return Some(standard),
        Shape::Utf16 => return Some(encoded(wit_component::StringEncoding::UTF16)),
        Shape::Latin1Utf16 => return Some(encoded(wit_component::StringEncoding::CompactUTF16)),
        Shape::MemoryRenamed => {
            let renamed = text
                .replacen(
                    r#"(export "memory" (memory 0))"#,
                    r#"(export "heap" (memory 0))"#,
                    1,
                )
                .replacen(
                    r#"(alias core export $main "memory""#,
                    r#"(alias core export $main "heap""#,
                    1,
                );
            assert!(!renamed.contains(r#""memory""#), "{renamed}");
            renamed
        }
        Shape::LogInUtf16 if logs => text.replacen(
            "(canon lower (func $log) (memory $memory) string-encoding=utf8)",
            "(canon lower (func $log) (memory $memory) string-encoding=utf16)",
            1,
        ),
        Shape::LogFromAnotherMemory if logs => {
            // Another instance's memory, holding other bytes where the
            // guest's messages are.
            let other = r#"(core module $other
                (memory (export "memory") 1)
                (data (i32.const 300) "other bytes here"))
              (core instance $other-instance (instantiate $other))
              (alias core export $other-instance "memory" (core memory $other-memory))
              "#;
            let at = text.find("(core func $\"#core-func").unwrap();
            let text = format!("{}{other}{}", &text[..at], &text[at..]);
            text.replacen(
                "(canon lower (func $log) (memory $memory)",
                "(canon lower (func $log) (memory $other-memory)",
                1,
            )
        }
        Shape::LogRewiredToATrap if logs => {
            let trap = r#"(core module $trap
                (func (export "f") (param i32 i32 i32) unreachable))
              (core instance $trap-instance (instantiate $trap))
              (alias core export $trap-instance "f" (core func $trap-log))
              "#;
            let at = text.find("(core instance $fixup-args").unwrap();
            let text = format!("{}{trap}{}", &text[..at], &text[at..]);
            let lowered = "(export \"0\" (func $\"#core-func";
            let start = text.find(lowered).unwrap();
            let end = start + text[start..].find("))").unwrap() + 2;
            format!(
                "{}(export \"0\" (func $trap-log)){}",
                &text[..start],
                &text[end..]
            )
        }
        Shape::Nested => {
            // The outer component imports what the inner one does (its
            // `log` instance, with its type) and passes it on.
            let inner = text.strip_prefix("(component").unwrap();
            let (imports, with) = if logs {
                let start = text.find("(type $ty-gangway:policy/log").unwrap();
                let import = text.find("(import \"gangway:policy/log").unwrap();
                let end = import + text[import..].find('\n').unwrap();
                (
                    text[start..end].to_string(),
                    r#"(with "gangway:policy/log@2.0.0" (instance $gangway:policy/log@2.0.0))"#,
                )
            } else {
                (String::new(), "")
            };
            format!(
                r#"(component
                  {imports}
                  (component $inner {inner}
                  (instance $policy (instantiate $inner {with}))
                  (alias export $policy "gangway:policy/fairness@2.0.0" (instance $fairness))
                  (export "gangway:policy/fairness@2.0.0" (instance $fairness)))"#
            )
        }
        Shape::InitializeNotCalled if text.contains("(core instance $start-shim-instance") => {
            let start = text.find("(core instance $start-shim-instance").unwrap();
            let end = start + closing(&text[start..]);
            format!("{}{}", &text[..start], &text[end..])
        }
        _ => return None,
    };
    Some(wat::parse_str(&edited).unwrap_or_else(|e| panic!("{shape:?}: {e}\n{edited}")))
}

/// The length of the parenthesized form `text` starts with.
fn closing(text: &str) -> usize {
    let mut depth = 0i32;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced: {text}")
}

/// One call's answer, with the wording of ABI errors and traps (which
/// differs between the paths) left out.
#[derive(Debug, PartialEq)]
enum Answer {
    Decided(FairnessDecision),
    Failed(PolicyErrorKind),
    BrokeAbi,
    Trapped,
}

/// What a guest did on one path: load, backend and three calls (one below
/// its trigger, two past it), or the first error; and what it logged.
#[derive(Debug, PartialEq)]
struct Run {
    answers: Result<Vec<Answer>, String>,
    logs: String,
}

/// Log lines written while a closure runs.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Sink {
    type Writer = Sink;

    fn make_writer(&'a self) -> Sink {
        self.clone()
    }
}

/// Runs `f` with the guests' `log` messages captured.
fn logged<R>(f: impl FnOnce() -> R) -> (R, String) {
    logged_from("gangway_core::wasm::store=trace", f)
}

/// Runs `f` with the events `filter` selects captured.
fn logged_from<R>(filter: &str, f: impl FnOnce() -> R) -> (R, String) {
    let sink = Sink::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(sink.clone())
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_ansi(false)
        .without_time()
        .with_target(false)
        .finish();
    let result = tracing::subscriber::with_default(subscriber, f);
    let logs = String::from_utf8_lossy(&sink.0.lock().unwrap()).into_owned();
    (result, logs)
}

/// `bytes` run on an engine set to `path`: the path it took, and the run.
fn run_on(path: CallPath, name: &str, bytes: &[u8]) -> (Option<CallPath>, Run) {
    let ((taken, answers), logs) = logged(|| {
        let module = match guests::engine_on(path).load(name, bytes) {
            Ok(m) => m,
            Err(e) => return (None, Err(format!("load: {e}"))),
        };
        let taken = Some(module.call_path());
        let mut backend = match module.backend::<Fairness>(b"") {
            Ok(b) => b,
            Err(e) => return (taken, Err(format!("backend: {e}"))),
        };
        let answers = [empty_view(), past_trigger(), past_trigger()]
            .iter()
            .map(|view| match backend.decide(view) {
                Ok(d) => Answer::Decided(d),
                Err(e) => match e.kind {
                    PolicyErrorKind::Abi(_) => Answer::BrokeAbi,
                    PolicyErrorKind::Trap(_) => Answer::Trapped,
                    kind => Answer::Failed(kind),
                },
            })
            .collect();
        (taken, Ok(answers))
    });
    (taken, Run { answers, logs })
}

#[test]
fn every_guest_in_every_shape_runs_alike_on_both_paths() {
    let mut guests = vec![logger(), initializer()];
    guests.extend(hostile());
    let mut compared = 0;
    for guest in &guests {
        for shape in Shape::ALL {
            let Some(bytes) = component(guest, shape) else {
                continue;
            };
            let label = format!("{} as {shape:?}", guest.name);
            let (taken, direct) = run_on(CallPath::Direct, &label, &bytes);
            let (_, runtime) = run_on(CallPath::Component, &label, &bytes);
            assert_eq!(direct, runtime, "{label}");
            // (A guest that cannot start, e.g. one whose `_initialize` logs
            // through a trap, shows no path: it failed alike on both.)
            if let Some(taken) = taken {
                assert_eq!(taken, shape.path(), "{label}");
            }
            compared += 1;
        }
    }
    assert!(compared >= 40, "{compared}");
}

/// What the shapes above do, seen from outside: the standard logger logs
/// its two messages; with `log` lowered from another memory it logs that
/// memory's bytes; rewired to a trap it traps; `_initialize` runs (and
/// logs) only where the component calls it.
#[test]
fn the_shapes_behave_as_the_component_says() {
    let (_, standard) = run_on(
        CallPath::Direct,
        "logger",
        &component(&logger(), Shape::Standard).unwrap(),
    );
    assert!(
        standard.logs.contains("looking") && standard.logs.contains("still unsure"),
        "{}",
        standard.logs
    );

    let other = component(&logger(), Shape::LogFromAnotherMemory).unwrap();
    let (_, other) = run_on(CallPath::Direct, "other", &other);
    assert!(
        other.logs.contains("other b") && !other.logs.contains("looking"),
        "{}",
        other.logs
    );

    let trap = component(&logger(), Shape::LogRewiredToATrap).unwrap();
    let (_, trap) = run_on(CallPath::Direct, "trap", &trap);
    assert_eq!(
        trap.answers,
        Ok(vec![
            Answer::Decided(FairnessDecision::default()),
            Answer::Trapped,
            Answer::Trapped
        ])
    );
    assert!(trap.logs.is_empty(), "{}", trap.logs);

    let called = component(&initializer(), Shape::Standard).unwrap();
    let (_, called) = run_on(CallPath::Direct, "called", &called);
    assert!(called.logs.contains("ready"), "{}", called.logs);
    let uncalled = component(&initializer(), Shape::InitializeNotCalled).unwrap();
    let (_, uncalled) = run_on(CallPath::Direct, "uncalled", &uncalled);
    assert!(!uncalled.logs.contains("ready"), "{}", uncalled.logs);
    assert_eq!(
        uncalled.answers.unwrap()[1],
        Answer::Failed(PolicyErrorKind::Refused("uninitialized".into()))
    );
}

/// A main module with a start function that logs: the start function runs
/// before the component has wired `log`, so the component runtime traps
/// at instantiation; the direct path declines and fails the same way.
#[test]
fn a_main_module_start_function_runs_as_the_component_says() {
    let core = guests::componentize(&booter().wat, &[], guests::WIT, "fairness-policy");
    let (taken, direct) = run_on(CallPath::Direct, "booter", &core);
    let (_, runtime) = run_on(CallPath::Component, "booter", &core);
    assert_eq!(direct, runtime);
    assert_ne!(taken, Some(CallPath::Direct));
    assert!(direct.answers.is_err(), "{direct:?}");
}

/// A host says at info level (what `-v` shows) why the direct path
/// declined a component, and says nothing for one it runs directly.
#[test]
fn a_declined_component_is_reported_with_the_reason() {
    let load = |bytes: &[u8]| {
        logged_from("gangway_core=info", || {
            guests::engine_on(CallPath::Direct)
                .load("shaped", bytes)
                .unwrap()
                .call_path()
        })
    };
    let (path, said) = load(&component(&logger(), Shape::LogFromAnotherMemory).unwrap());
    assert_eq!(path, CallPath::Component);
    assert!(
        said.contains("INFO")
            && said.contains("the direct call path declines (core instance")
            && said.contains("runs a module other than"),
        "{said}"
    );
    let (path, said) = load(&component(&logger(), Shape::Standard).unwrap());
    assert_eq!(path, CallPath::Direct);
    assert!(!said.contains("declines"), "{said}");
}
