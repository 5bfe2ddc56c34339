//! Writes `$OUT_DIR/generate.rs`: a macro that runs wit-bindgen on this
//! crate's `wit/` folder by absolute path. The export macros expand it in the
//! *policy's* crate, where a relative path would resolve against the wrong
//! manifest directory.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let wit = manifest.join("wit");
    println!("cargo::rerun-if-changed=wit");
    println!("cargo::rerun-if-changed=build.rs");
    let wit = wit
        .to_str()
        .ok_or("the path of plugin-sdk/wit is not UTF-8")?
        .to_string();
    let code = format!(
        r#"/// Runs wit-bindgen for one world of `gangway:policy` (internal to the
/// `export!` macro).
#[doc(hidden)]
#[macro_export]
macro_rules! __gangway_generate {{
    ($world:tt) => {{
        $crate::guest::wit_bindgen::generate!({{
            path: {wit:?},
            world: $world,
            runtime_path: "gangway_plugin_sdk::guest::wit_bindgen::rt",
        }});
    }};
}}
"#
    );
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("generate.rs");
    std::fs::write(out, code)?;
    Ok(())
}
