//! The virtual clusters and their quotas, from the VCs ConfigMap: each key
//! a VC, each value its quota, one of
//! * `none` (or empty): no quota;
//! * a GPU count, `32`: GPUs of any type;
//! * quotas per GPU type in Kueue's shape, `A100=8+4,H100=2`: each type
//!   (a value of the GPU type label) with its nominal GPUs and, after a
//!   `+`, how many more of it the VC may borrow (`+0`: none, binding; no
//!   `+`: no limit). A type it does not name it may not use.
//!
//! A value that is none of these is a problem (named with its key) and the
//! VC has no quota, as before quotas per type. Type names are matched to
//! the cluster's when the quotas are applied ([`resolve`]).

use std::collections::BTreeMap;

use gangway_core::{Topology, TypeQuota, TypeQuotas};

use crate::objects;

/// A listed VC's quota.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum VcQuota {
    /// No quota.
    #[default]
    None,
    /// GPUs of any type.
    Pooled(u32),
    /// GPUs per type, by type name.
    Typed(BTreeMap<String, TypeQuota>),
}

impl VcQuota {
    /// The pooled quota (`None` for none, and for quotas per type).
    pub fn pooled(&self) -> Option<u32> {
        match self {
            VcQuota::Pooled(n) => Some(*n),
            _ => None,
        }
    }
}

/// The virtual clusters: `None` admits every VC without a quota;
/// otherwise each listed VC's quota.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VcTable {
    /// The listed VCs, if a list exists.
    pub listed: Option<BTreeMap<String, VcQuota>>,
    /// Where the list lives, for messages (`namespace/name`).
    pub source: String,
    /// What is wrong with the list, a sentence per value not taken.
    pub problems: Vec<String>,
}

impl VcTable {
    /// The quota of VC `name` (none if it is not listed).
    pub fn quota(&self, name: &str) -> &VcQuota {
        static NONE: VcQuota = VcQuota::None;
        self.listed
            .as_ref()
            .and_then(|l| l.get(name))
            .unwrap_or(&NONE)
    }
}

/// The table from a VCs ConfigMap's data (`None`: the ConfigMap does not
/// exist) at `source`. A value not taken is a problem and no quota.
pub fn table(data: Option<&BTreeMap<String, String>>, source: &str) -> VcTable {
    let mut problems = Vec::new();
    let listed = data.map(|data| {
        data.iter()
            .map(|(vc, value)| {
                let quota = parse_quota(value).unwrap_or_else(|why| {
                    problems.push(format!(
                        "{source}: key {vc:?}: {why}; the VC has no quota \
                         (a value is a GPU count, none, or TYPE=NOMINAL[+BORROWING],...)"
                    ));
                    VcQuota::None
                });
                (vc.clone(), quota)
            })
            .collect()
    });
    VcTable {
        listed,
        source: source.to_string(),
        problems,
    }
}

/// One ConfigMap value's quota, or what is wrong with it.
///
/// ```
/// use gangway_core::TypeQuota;
/// use gangway_k8s::vcs::{VcQuota, parse_quota};
/// assert_eq!(parse_quota("16"), Ok(VcQuota::Pooled(16)));
/// let VcQuota::Typed(q) = parse_quota("A100=8+4, H100=2").unwrap() else { panic!() };
/// assert_eq!(q["A100"], TypeQuota::new(8, Some(4)));
/// assert_eq!(q["H100"], TypeQuota::new(2, None));
/// assert!(parse_quota("A100=8+").is_err());
/// ```
pub fn parse_quota(value: &str) -> Result<VcQuota, String> {
    let v = value.trim();
    if v.is_empty() || v == "none" {
        return Ok(VcQuota::None);
    }
    if !v.contains('=') {
        return objects::parse_gpu_count(v)
            .map(VcQuota::Pooled)
            .ok_or_else(|| format!("{v:?} is not a GPU count"));
    }
    let mut quotas = BTreeMap::new();
    for entry in v.split(',').map(str::trim) {
        let (name, q) = parse_entry(entry)?;
        if quotas.insert(name.to_string(), q).is_some() {
            return Err(format!("GPU type {name:?} is named twice"));
        }
    }
    Ok(VcQuota::Typed(quotas))
}

/// One `TYPE=NOMINAL[+BORROWING]` entry.
fn parse_entry(entry: &str) -> Result<(&str, TypeQuota), String> {
    let Some((name, amounts)) = entry.split_once('=') else {
        return Err(format!("{entry:?} is not TYPE=NOMINAL[+BORROWING]"));
    };
    let name = name.trim();
    let label_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.is_empty() || !name.chars().all(label_char) {
        return Err(format!(
            "{entry:?}: {name:?} is not a GPU type (a value of the type label)"
        ));
    }
    let (nominal, borrowing) = match amounts.split_once('+') {
        Some((n, b)) => (n, Some(b)),
        None => (amounts, None),
    };
    let count = |what: &str, text: &str| {
        let t = text.trim();
        t.parse::<u32>()
            .ok()
            .filter(|_| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| format!("{entry:?}: the {what} {t:?} is not a GPU count"))
    };
    let nominal = count("nominal quota", nominal)?;
    let borrowing = borrowing.map(|b| count("borrowing limit", b)).transpose()?;
    Ok((name, TypeQuota::new(nominal, borrowing)))
}

/// Quotas per type by name, resolved against `topo`'s GPU types: the
/// quotas by type id, and the names the cluster does not have (ignored).
/// When no name is the cluster's, every type gets a quota of 0 (the VC
/// may use none: a type it does not name it may not use).
pub fn resolve(
    by_name: &BTreeMap<String, TypeQuota>,
    topo: &Topology,
) -> (TypeQuotas, Vec<String>) {
    let mut quotas = TypeQuotas::new();
    let mut unknown = Vec::new();
    for (name, q) in by_name {
        match topo.gpu_type_by_name(name) {
            Some(t) => {
                quotas.insert(t, *q);
            }
            None => unknown.push(name.clone()),
        }
    }
    if quotas.is_empty() {
        for t in 0..topo.gpu_types().len() {
            let id = gangway_core::GpuTypeId(u8::try_from(t).unwrap_or(u8::MAX));
            quotas.insert(id, TypeQuota::new(0, Some(0)));
        }
    }
    (quotas, unknown)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn typed(v: &str) -> BTreeMap<String, TypeQuota> {
        match parse_quota(v).unwrap() {
            VcQuota::Typed(q) => q,
            other => panic!("{v}: {other:?}"),
        }
    }

    #[test]
    fn counts_none_and_quotas_per_type_parse() {
        assert_eq!(parse_quota(" 32 "), Ok(VcQuota::Pooled(32)));
        assert_eq!(parse_quota("none"), Ok(VcQuota::None));
        assert_eq!(parse_quota(""), Ok(VcQuota::None));
        let q = typed("NVIDIA-A100-SXM4-80GB=8+4, h100=2 ,v100.x=0+0");
        assert_eq!(q.len(), 3);
        assert_eq!(q["NVIDIA-A100-SXM4-80GB"], TypeQuota::new(8, Some(4)));
        assert_eq!(q["h100"], TypeQuota::new(2, None));
        assert_eq!(q["v100.x"], TypeQuota::new(0, Some(0)));
        assert_eq!(typed("a = 8 + 0")["a"], TypeQuota::new(8, Some(0)));
    }

    #[test]
    fn malformed_values_say_what_is_wrong() {
        for (value, says) in [
            ("lots", "\"lots\" is not a GPU count"),
            ("a100=8,", "\"\" is not TYPE=NOMINAL"),
            ("a100=8+", "borrowing limit \"\""),
            ("a100=-1", "nominal quota \"-1\""),
            ("a100=8+x", "borrowing limit \"x\""),
            ("a100=8+4+2", "borrowing limit \"4+2\""),
            ("=8", "\"\" is not a GPU type"),
            ("a 100=8", "\"a 100\" is not a GPU type"),
            ("a100=8,a100=2", "\"a100\" is named twice"),
            ("a100=99999999999", "nominal quota"),
        ] {
            let why = parse_quota(value).unwrap_err();
            assert!(why.contains(says), "{value}: {why}");
        }
        let data: BTreeMap<String, String> = [
            ("team-a".to_string(), "a100=8+".to_string()),
            ("team-b".to_string(), "16".to_string()),
        ]
        .into();
        let t = table(Some(&data), "gangway-system/gangway-vcs");
        assert_eq!(*t.quota("team-a"), VcQuota::None);
        assert_eq!(t.quota("team-b").pooled(), Some(16));
        assert_eq!(t.problems.len(), 1);
        let p = &t.problems[0];
        assert!(
            p.contains("gangway-system/gangway-vcs") && p.contains("\"team-a\""),
            "{p}"
        );
        assert!(table(None, "x").listed.is_none());
    }

    #[test]
    fn types_the_cluster_lacks_are_left_out() {
        let mut b = gangway_core::TopologyBuilder::new();
        let a100 = b.add_gpu_type("A100", 80).unwrap();
        let v100 = b.add_gpu_type("V100", 16).unwrap();
        let r = b.add_domain(b.root(), "r").unwrap();
        b.add_server_of_type(r, "a", 8, a100).unwrap();
        b.add_server_of_type(r, "v", 8, v100).unwrap();
        let topo = b.build().unwrap();
        let (q, unknown) = resolve(&typed("A100=8+0,H100=4"), &topo);
        assert_eq!(q, [(a100, TypeQuota::new(8, Some(0)))].into());
        assert_eq!(unknown, ["H100"]);
        // None of its types: it may use no type.
        let (q, unknown) = resolve(&typed("H100=4"), &topo);
        assert_eq!(unknown, ["H100"]);
        let zero = TypeQuota::new(0, Some(0));
        assert_eq!(q, [(a100, zero), (v100, zero)].into());
    }
}
