//! The configuration tree: a policy's TOML options as the host parsed them,
//! in postcard's layout, read by a policy straight into its options type
//! through serde's derive ([`read`]). A guest that reads its options this
//! way carries no TOML parser (about 36 KB of Wasm) and no float
//! formatting: the host parses the text once, with the line and column of
//! a syntax error, and every entry of a table keeps the line of its key,
//! so an unknown or mistyped option is still named by line.
//!
//! ```text
//! tree  = MAGIC value                      (the root value is a table)
//! value = 0 bool:u8 | 1 int:zigzag varint | 2 float:f64 little-endian
//!       | 3 string | 4 len:varint value*len
//!       | 5 len:varint (key:string line:varint value)*len
//! string = len:varint utf-8 bytes
//! ```
//!
//! That is what postcard writes for a serde enum of those six variants
//! (a table's entries in the order of the text; a datetime travels as its
//! text).

use std::fmt::{self, Display};

use serde::de::{self, DeserializeSeed, Expected, MapAccess, SeqAccess, Unexpected, Visitor};

/// The first bytes of a configuration tree. No text starts with a NUL
/// byte, so a policy tells a tree from text by its first byte.
pub(crate) const MAGIC: &[u8] = b"\0tree1";

/// The tree of an empty table (all defaults).
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
pub(crate) const EMPTY: &[u8] = b"\0tree1\x05\x00";

const BOOL: u8 = 0;
const INT: u8 = 1;
const FLOAT: u8 = 2;
const STR: u8 = 3;
const ARRAY: u8 = 4;
const TABLE: u8 = 5;

/// Writes a configuration tree (the host's side; see the module docs).
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
pub(crate) struct TreeWriter {
    out: Vec<u8>,
}

#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
impl TreeWriter {
    /// A tree with nothing written after its magic.
    pub(crate) fn new() -> TreeWriter {
        TreeWriter {
            out: MAGIC.to_vec(),
        }
    }

    /// The bytes written.
    pub(crate) fn finish(self) -> Vec<u8> {
        self.out
    }

    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.out.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.out.push(v as u8);
    }

    fn string(&mut self, s: &str) {
        self.varint(s.len() as u64);
        self.out.extend_from_slice(s.as_bytes());
    }

    /// A boolean.
    pub(crate) fn bool(&mut self, b: bool) {
        self.out.extend_from_slice(&[BOOL, u8::from(b)]);
    }

    /// An integer.
    pub(crate) fn int(&mut self, i: i64) {
        self.out.push(INT);
        self.varint(((i << 1) ^ (i >> 63)) as u64);
    }

    /// A float.
    pub(crate) fn float(&mut self, f: f64) {
        self.out.push(FLOAT);
        self.out.extend_from_slice(&f.to_le_bytes());
    }

    /// A string.
    pub(crate) fn str(&mut self, s: &str) {
        self.out.push(STR);
        self.string(s);
    }

    /// An array of `len` values (written next).
    pub(crate) fn array(&mut self, len: usize) {
        self.out.push(ARRAY);
        self.varint(len as u64);
    }

    /// A table of `len` entries (each written next with [`TreeWriter::key`]
    /// and its value).
    pub(crate) fn table(&mut self, len: usize) {
        self.out.push(TABLE);
        self.varint(len as u64);
    }

    /// A table entry's key, on `line` (1-based) of the text.
    pub(crate) fn key(&mut self, key: &str, line: u32) {
        self.string(key);
        self.varint(u64::from(line));
    }
}

/// An option that did not read: what is wrong, and the line of the key it
/// is under when known.
#[derive(Debug)]
pub(crate) struct TreeError {
    message: String,
    line: Option<u32>,
}

impl TreeError {
    /// The error, placed on `line` unless a nearer key placed it already.
    fn at(mut self, line: u32) -> TreeError {
        if self.line.is_none() && line > 0 {
            self.line = Some(line);
        }
        self
    }
}

impl Display for TreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{} at line {line}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for TreeError {}

impl de::Error for TreeError {
    fn custom<T: Display>(msg: T) -> Self {
        TreeError {
            message: msg.to_string(),
            line: None,
        }
    }

    // serde's own wording, but a float is not printed: a guest that prints
    // no float then links no float formatting.
    fn invalid_type(unexp: Unexpected<'_>, exp: &dyn Expected) -> Self {
        de::Error::custom(format_args!(
            "invalid type: {}, expected {exp}",
            Found(unexp)
        ))
    }

    fn invalid_value(unexp: Unexpected<'_>, exp: &dyn Expected) -> Self {
        de::Error::custom(format_args!(
            "invalid value: {}, expected {exp}",
            Found(unexp)
        ))
    }
}

/// An [`Unexpected`] as serde words it, a float without its value.
struct Found<'a>(Unexpected<'a>);

impl Display for Found<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Unexpected::Bool(b) => write!(f, "boolean `{b}`"),
            Unexpected::Unsigned(u) => write!(f, "integer `{u}`"),
            Unexpected::Signed(i) => write!(f, "integer `{i}`"),
            Unexpected::Float(_) => f.write_str("floating point number"),
            Unexpected::Char(c) => write!(f, "character `{c}`"),
            Unexpected::Str(s) => write!(f, "string \"{s}\""),
            Unexpected::Bytes(_) => f.write_str("byte array"),
            Unexpected::Unit => f.write_str("unit value"),
            Unexpected::Option => f.write_str("Option value"),
            Unexpected::NewtypeStruct => f.write_str("newtype struct"),
            Unexpected::Seq => f.write_str("sequence"),
            Unexpected::Map => f.write_str("map"),
            Unexpected::Enum => f.write_str("enum"),
            Unexpected::UnitVariant => f.write_str("unit variant"),
            Unexpected::NewtypeVariant => f.write_str("newtype variant"),
            Unexpected::TupleVariant => f.write_str("tuple variant"),
            Unexpected::StructVariant => f.write_str("struct variant"),
            Unexpected::Other(other) => f.write_str(other),
        }
    }
}

/// Reads `T` from a configuration tree (`bytes` start with [`MAGIC`]).
pub(crate) fn read<'de, T: de::Deserialize<'de>>(bytes: &'de [u8]) -> Result<T, TreeError> {
    let mut tree = Tree {
        bytes: bytes.get(MAGIC.len()..).unwrap_or_default(),
        at: 0,
        line: 0,
    };
    let value = T::deserialize(&mut tree)?;
    if tree.at != tree.bytes.len() {
        return Err(de::Error::custom(
            "the configuration tree has trailing bytes",
        ));
    }
    Ok(value)
}

/// The tree being read: its bytes, a cursor, and the line of the key last
/// read.
struct Tree<'de> {
    bytes: &'de [u8],
    at: usize,
    line: u32,
}

impl<'de> Tree<'de> {
    fn broken() -> TreeError {
        de::Error::custom("the configuration tree is cut short or malformed")
    }

    fn take(&mut self, n: usize) -> Result<&'de [u8], TreeError> {
        let end = self.at.checked_add(n).ok_or_else(Self::broken)?;
        let bytes = self.bytes.get(self.at..end).ok_or_else(Self::broken)?;
        self.at = end;
        Ok(bytes)
    }

    fn byte(&mut self) -> Result<u8, TreeError> {
        Ok(self.take(1)?[0])
    }

    fn varint(&mut self) -> Result<u64, TreeError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(Self::broken())
    }

    /// A length of entries of at least one byte each.
    fn len(&mut self) -> Result<usize, TreeError> {
        let n = usize::try_from(self.varint()?).map_err(|_| Self::broken())?;
        if n > self.bytes.len() - self.at {
            return Err(Self::broken());
        }
        Ok(n)
    }

    fn str(&mut self) -> Result<&'de str, TreeError> {
        let n = self.len()?;
        std::str::from_utf8(self.take(n)?).map_err(|_| Self::broken())
    }
}

impl<'de> de::Deserializer<'de> for &mut Tree<'de> {
    type Error = TreeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TreeError> {
        match self.byte()? {
            BOOL => visitor.visit_bool(self.byte()? != 0),
            INT => {
                let z = self.varint()?;
                visitor.visit_i64(((z >> 1) as i64) ^ -((z & 1) as i64))
            }
            FLOAT => {
                let mut le = [0; 8];
                le.copy_from_slice(self.take(8)?);
                visitor.visit_f64(f64::from_le_bytes(le))
            }
            STR => visitor.visit_borrowed_str(self.str()?),
            ARRAY => {
                let left = self.len()?;
                visitor.visit_seq(Items { tree: self, left })
            }
            TABLE => {
                let left = self.len()?;
                visitor.visit_map(Entries { tree: self, left })
            }
            _ => Err(Tree::broken()),
        }
    }

    /// TOML has no null: a key that is there is `Some`.
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TreeError> {
        visitor.visit_some(self)
    }

    /// A unit variant, written as its name (`unquoted = "unlimited"`).
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, TreeError> {
        match self.bytes.get(self.at) {
            Some(&STR) => {
                self.at += 1;
                visitor.visit_enum(de::value::BorrowedStrDeserializer::new(self.str()?))
            }
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, TreeError> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct
        identifier ignored_any
    }
}

/// An array's values.
struct Items<'a, 'de> {
    tree: &'a mut Tree<'de>,
    left: usize,
}

impl<'de> SeqAccess<'de> for Items<'_, 'de> {
    type Error = TreeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, TreeError> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.tree).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

/// A table's entries; an error under a key is placed on the key's line.
struct Entries<'a, 'de> {
    tree: &'a mut Tree<'de>,
    left: usize,
}

impl<'de> MapAccess<'de> for Entries<'_, 'de> {
    type Error = TreeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, TreeError> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        let key = self.tree.str()?;
        let line = u32::try_from(self.tree.varint()?).map_err(|_| Tree::broken())?;
        self.tree.line = line;
        seed.deserialize(de::value::BorrowedStrDeserializer::<TreeError>::new(key))
            .map(Some)
            .map_err(|e| e.at(line))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, TreeError> {
        let line = self.tree.line;
        seed.deserialize(&mut *self.tree).map_err(|e| e.at(line))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::config::config_tree;
    use serde::Deserialize;
    use std::collections::BTreeMap;

    #[derive(Debug, Default, PartialEq, Deserialize)]
    #[serde(rename_all = "kebab-case")]
    enum Mode {
        #[default]
        DemandShare,
        Unlimited,
    }

    #[derive(Debug, Default, PartialEq, Deserialize)]
    #[serde(default, deny_unknown_fields)]
    struct Inner {
        weight: u32,
    }

    #[derive(Debug, Default, PartialEq, Deserialize)]
    #[serde(default, deny_unknown_fields)]
    struct Options {
        spread: f64,
        factors: Vec<u32>,
        after_s: Option<u64>,
        mode: Mode,
        name: String,
        vcs: BTreeMap<String, Inner>,
    }

    fn read_text(text: &str) -> Result<Options, String> {
        let tree = config_tree(text.as_bytes()).map_err(|e| e.0)?;
        read(&tree).map_err(|e| e.to_string())
    }

    #[test]
    fn the_empty_tree_is_an_empty_table() {
        let mut w = TreeWriter::new();
        w.table(0);
        assert_eq!(w.finish(), EMPTY);
        assert_eq!(config_tree(b"").unwrap(), EMPTY);
        assert_eq!(read::<Options>(EMPTY).unwrap(), Options::default());
    }

    #[test]
    fn every_kind_of_value_reads() {
        let o = read_text(
            "spread = 1\nfactors = [1, 2]\nafter_s = 60\nmode = \"unlimited\"\n\
             name = \"x\"\n[vcs.a]\nweight = 3\n",
        )
        .unwrap();
        assert_eq!(o.spread, 1.0);
        assert_eq!(o.factors, [1, 2]);
        assert_eq!(o.after_s, Some(60));
        assert_eq!(o.mode, Mode::Unlimited);
        assert_eq!(o.name, "x");
        assert_eq!(o.vcs["a"], Inner { weight: 3 });
        assert_eq!(read_text("spread = -0.25").unwrap().spread, -0.25);
    }

    #[test]
    fn errors_name_the_line_of_the_nearest_key() {
        let e = read_text("name = \"x\"\n\n[vcs.a]\nweight = 3\nwait = 1").unwrap_err();
        assert_eq!(e, "unknown field `wait`, expected `weight` at line 5");
        let e = read_text("factors = [1,\n -2]").unwrap_err();
        assert_eq!(e, "invalid value: integer `-2`, expected u32 at line 1");
        let e = read_text("mode = \"some\"").unwrap_err();
        assert!(e.starts_with("unknown variant `some`"), "{e}");
        assert!(e.ends_with("at line 1"), "{e}");
        let e = read_text("\nafter_s = 2.5").unwrap_err();
        assert_eq!(
            e,
            "invalid type: floating point number, expected u64 at line 2"
        );
        let e = read_text("a = 99999999999999999999").unwrap_err();
        assert!(e.contains("at line 1"), "{e}");
    }

    #[test]
    fn a_broken_tree_is_an_error_not_a_panic() {
        let tree = config_tree(b"factors = [1, 2, 3]\nname = \"abc\"").unwrap();
        for cut in 0..tree.len() {
            let mut bad = tree[..cut].to_vec();
            bad.resize(MAGIC.len().max(cut), 0);
            assert!(read::<Options>(&bad).is_err() || cut <= MAGIC.len());
        }
        let mut bad = tree.clone();
        bad.push(0);
        assert!(read::<Options>(&bad).is_err());
        assert!(read::<Options>(b"\0tree1\x07").is_err());
    }
}
