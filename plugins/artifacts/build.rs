//! Finds the policy crates under `plugins/` (every crate that declares its
//! policies in its `Cargo.toml`), builds them for `wasm32-unknown-unknown`
//! with a nested `cargo build --release`, turns each core module into a
//! component in-process with wit-component and writes
//! `$OUT_DIR/artifacts.rs`, which embeds them, and `$OUT_DIR/policies.rs`,
//! the list of built-in policies by slot that the catalog is made from:
//!
//! ```toml
//! [package.metadata.gangway]
//! policies = [{ name = "las", slot = "fairness", type = "Las" }]
//! ```
//!
//! The nested build uses its own target directory (`<target>/plugins-wasm`),
//! so it never waits on the lock the outer build holds, and it inherits the
//! outer build's jobserver, so it does not oversubscribe the machine.

use std::collections::{BTreeMap, BTreeSet};
use std::error::Error;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

type Result<T> = std::result::Result<T, Box<dyn Error>>;

use gangway_plugin_sdk::{Slot, with_slot};

const TARGET: &str = "wasm32-unknown-unknown";

/// A policy crate found under `plugins/`.
struct Plugin {
    /// Directory name, the module's name (`fifo`).
    name: String,
    /// Cargo package name (`gangway-policy-fifo`).
    package: String,
    /// The policies it declares.
    policies: Vec<Declared>,
}

/// One policy a crate declares: its name, its slot and its Rust type.
struct Declared {
    name: String,
    slot: Slot,
    ty: String,
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: building the Wasm policy plugins failed: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let plugins_dir = manifest_dir
        .parent()
        .ok_or("plugins/artifacts has no parent directory")?
        .to_path_buf();
    let root = plugins_dir
        .parent()
        .ok_or("plugins/ has no parent directory")?
        .to_path_buf();
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);

    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed={}", plugins_dir.display());
    println!(
        "cargo::rerun-if-changed={}",
        root.join("Cargo.lock").display()
    );
    println!(
        "cargo::rerun-if-changed={}",
        root.join("Cargo.toml").display()
    );

    let plugins = find_plugins(&plugins_dir)?;
    let target_dir = outer_target_dir(&out_dir, &root).join("plugins-wasm");
    if !plugins.is_empty() {
        ensure_wasm_target()?;
        nested_build(&root, &target_dir, &plugins)?;
    }

    let mut deps = BTreeSet::new();
    let mut code = String::from(
        "/// Every policy module: (name, component path, component bytes, core\n\
         /// module path), sorted by name.\n\
         static ALL: &[(&str, &str, &[u8], &str)] = &[\n",
    );
    for p in &plugins {
        let core = target_dir
            .join(TARGET)
            .join("release")
            .join(format!("{}.wasm", p.package.replace('-', "_")));
        read_deps(&core.with_extension("d"), &mut deps);
        let module = std::fs::read(&core).map_err(|e| {
            format!(
                "{}: no Wasm output at {} ({e}); is its crate-type [\"cdylib\", \"rlib\"]?",
                p.package,
                core.display()
            )
        })?;
        let component = wit_component::ComponentEncoder::default()
            .validate(true)
            .module(&module)
            .and_then(|mut enc| enc.encode())
            .map_err(|e| format!("{}: cannot make a component: {e:#}", p.package))?;
        let file = out_dir.join(format!("{}.wasm", p.name));
        std::fs::write(&file, component)?;
        let file = file.to_str().ok_or("OUT_DIR is not UTF-8")?;
        let core = core.to_str().ok_or("the target directory is not UTF-8")?;
        code.push_str(&format!(
            "    ({:?}, {file:?}, include_bytes!({file:?}), {core:?}),\n",
            p.name
        ));
    }
    code.push_str("];\n");
    for d in deps {
        println!("cargo::rerun-if-changed={d}");
    }
    std::fs::write(out_dir.join("artifacts.rs"), code)?;
    std::fs::write(out_dir.join("policies.rs"), policies_macro(&plugins)?)?;
    Ok(())
}

/// The `builtin_policies!` macro: it hands the macro it is given every slot
/// (by its marker type's name) with the slot's built-in policies as
/// `name in module => type`, slots in their declaration order, so that the
/// catalog builds its registry from the same discovery as the modules.
fn policies_macro(plugins: &[Plugin]) -> Result<String> {
    let mut by_slot: BTreeMap<Slot, Vec<String>> = BTreeMap::new();
    for p in plugins {
        let krate = p.package.replace('-', "_");
        for d in &p.policies {
            let list = by_slot.entry(d.slot).or_default();
            let entry = format!("{:?} in {:?} => {krate}::{}", d.name, p.name, d.ty);
            if list
                .iter()
                .any(|e| e.starts_with(&format!("{:?} in", d.name)))
                || d.name == "none"
            {
                return Err(format!(
                    "plugins/{}: the {} policy name {:?} is taken",
                    p.name, d.slot, d.name
                )
                .into());
            }
            list.push(entry);
        }
    }
    let mut body = String::new();
    for slot in Slot::DECLARED {
        let marker = with_slot!(slot, |S| std::any::type_name::<S>())
            .rsplit("::")
            .next()
            .unwrap_or_default()
            .to_string();
        let list = by_slot.remove(&slot).unwrap_or_default();
        writeln!(body, "            {marker} [{}]", list.join(", "))?;
    }
    Ok(format!(
        "/// Calls `$m!` with every slot's built-in policies (generated by\n\
         /// plugins/artifacts/build.rs from the policy crates' `Cargo.toml`):\n\
         /// `Marker [\"name\" in \"module\" => crate::Type, ...]` per slot. The\n\
         /// caller must depend on every policy crate it names.\n\
         #[macro_export]\n\
         macro_rules! builtin_policies {{\n    ($m:ident) => {{\n        $m! {{\n{body}        }}\n    }};\n}}\n"
    ))
}

/// Every crate under `plugins/` that declares policies, sorted by name.
fn find_plugins(plugins_dir: &Path) -> Result<Vec<Plugin>> {
    let mut plugins = Vec::new();
    for entry in std::fs::read_dir(plugins_dir)? {
        let dir = entry?.path();
        let Some(name) = dir.file_name().and_then(|n| n.to_str()).map(str::to_string) else {
            continue;
        };
        let manifest = dir.join("Cargo.toml");
        if !manifest.is_file() {
            continue;
        }
        println!("cargo::rerun-if-changed={}", manifest.display());
        let text = std::fs::read_to_string(&manifest)?;
        let doc: toml::Table =
            toml::from_str(&text).map_err(|e| format!("{}: {e}", manifest.display()))?;
        let package = doc.get("package");
        let Some(policies) = package
            .and_then(|p| p.get("metadata"))
            .and_then(|m| m.get("gangway"))
            .and_then(|g| g.get("policies"))
        else {
            // Not a policy crate (this one, the catalog).
            continue;
        };
        let package = package
            .and_then(|p| p.get("name"))
            .and_then(|n| n.as_str())
            .ok_or_else(|| format!("{}: no package.name", manifest.display()))?
            .to_string();
        let policies = declared(policies, &manifest)?;
        plugins.push(Plugin {
            name,
            package,
            policies,
        });
    }
    plugins.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(plugins)
}

/// The policies of `[package.metadata.gangway] policies = [{ name, slot,
/// type }, ...]` in `manifest`.
fn declared(policies: &toml::Value, manifest: &Path) -> Result<Vec<Declared>> {
    let shape = || {
        format!(
            "{}: [package.metadata.gangway] policies must be [{{ name, slot, type }}, ...]",
            manifest.display()
        )
    };
    let mut out = Vec::new();
    for p in policies.as_array().ok_or_else(shape)? {
        let field = |key: &str| {
            p.get(key)
                .and_then(|v| v.as_str())
                .ok_or_else(|| format!("{}: a policy without a string `{key}`", manifest.display()))
        };
        let (name, slot, ty) = (field("name")?, field("slot")?, field("type")?);
        let Some(slot) = Slot::from_name(slot) else {
            return Err(format!(
                "{}: policy {name:?} names unknown slot {slot:?}",
                manifest.display()
            )
            .into());
        };
        out.push(Declared {
            name: name.to_string(),
            slot,
            ty: ty.to_string(),
        });
    }
    Ok(out)
}

/// The outer build's target directory: `CARGO_TARGET_DIR`, else the nearest
/// ancestor of `OUT_DIR` holding cargo's `CACHEDIR.TAG`, else `<root>/target`.
fn outer_target_dir(out_dir: &Path, root: &Path) -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        let dir = PathBuf::from(dir);
        return if dir.is_absolute() {
            dir
        } else {
            root.join(dir)
        };
    }
    out_dir
        .ancestors()
        .find(|a| a.join("CACHEDIR.TAG").is_file())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| root.join("target"))
}

/// Makes sure the toolchain building us has the `wasm32-unknown-unknown`
/// standard library. rustup installs a pinned toolchain's targets only when it
/// installs the toolchain itself, so a machine that already had Rust 1.95 has
/// the toolchain without the target: when rustup manages the toolchain we add
/// the target through it, otherwise we say exactly what to install.
fn ensure_wasm_target() -> Result<()> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| {
            format!(
                "cannot run {} --print sysroot: {e}",
                rustc.to_string_lossy()
            )
        })?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let std_dir = sysroot.join("lib").join("rustlib").join(TARGET).join("lib");
    if std_dir.is_dir() {
        return Ok(());
    }
    let Some(toolchain) = std::env::var_os("RUSTUP_TOOLCHAIN") else {
        return Err(format!(
            "the Rust toolchain at {} has no {TARGET} standard library, which the policy \
             plugins compile to, and rustup does not manage it: install that target for this \
             toolchain (with rustup: `rustup target add {TARGET}`; from a distribution: its \
             rust-std package for {TARGET})",
            sysroot.display()
        )
        .into());
    };
    let toolchain = toolchain.to_string_lossy().into_owned();
    println!(
        "cargo::warning=installing the {TARGET} target for toolchain {toolchain} with rustup \
         (the policy plugins compile to it)"
    );
    let add = |rustup: &std::ffi::OsStr| {
        Command::new(rustup)
            .args(["target", "add", "--toolchain", &toolchain, TARGET])
            .status()
    };
    // rustup is on PATH wherever it installed cargo, else in CARGO_HOME/bin.
    let status = add("rustup".as_ref()).or_else(|e| match std::env::var_os("CARGO_HOME") {
        Some(home) => add(Path::new(&home).join("bin").join("rustup").as_os_str()),
        None => Err(e),
    });
    match status {
        Ok(s) if s.success() && std_dir.is_dir() => Ok(()),
        Ok(s) => Err(format!(
            "`rustup target add --toolchain {toolchain} {TARGET}` failed ({s}); run it by hand, \
             then build again"
        )
        .into()),
        Err(e) => Err(format!(
            "toolchain {toolchain} lacks the {TARGET} target and rustup could not be run ({e}): \
             run `rustup target add --toolchain {toolchain} {TARGET}`, then build again"
        )
        .into()),
    }
}

fn nested_build(root: &Path, target_dir: &Path, plugins: &[Plugin]) -> Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .arg("build")
        .arg("--release")
        .arg("--target")
        .arg(TARGET)
        .arg("--target-dir")
        .arg(target_dir)
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"));
    for p in plugins {
        cmd.arg("-p").arg(&p.package);
    }
    // Small modules, quick to compile when a host loads them, and fast:
    // whole-program optimization at opt-level 3, no debug info, symbols or
    // panic unwinding. (opt-level "s" makes them a further 15% smaller but
    // the default replay's policies 23% slower: docs/performance.md.)
    cmd.env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "3")
        .env("CARGO_PROFILE_RELEASE_STRIP", "symbols")
        .env("CARGO_PROFILE_RELEASE_LTO", "true")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1")
        .env("CARGO_PROFILE_RELEASE_PANIC", "abort");
    // Settings meant for the outer (host) build only.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "CLIPPY_ARGS",
        "CARGO_PRIMARY_PACKAGE",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run cargo for the nested plugin build: {e}"))?;
    if !status.success() {
        return Err(format!(
            "nested `cargo build --release --target {TARGET}` of the plugins failed ({status}); \
             is the {TARGET} target installed (`rustup target add {TARGET}`)?"
        )
        .into());
    }
    Ok(())
}

/// Adds the source files listed in a Cargo dep-info file to `deps`.
fn read_deps(dep_file: &Path, deps: &mut BTreeSet<String>) {
    let Ok(text) = std::fs::read_to_string(dep_file) else {
        return;
    };
    for line in text.lines() {
        let Some((_, files)) = line.split_once(": ") else {
            continue;
        };
        let mut parts = files.split_whitespace();
        while let Some(part) = parts.next() {
            let mut file = part.to_string();
            while file.ends_with('\\') {
                file.pop();
                file.push(' ');
                file.push_str(parts.next().unwrap_or_default());
            }
            deps.insert(file);
        }
    }
}
