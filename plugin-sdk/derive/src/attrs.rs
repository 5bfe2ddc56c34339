//! The `#[wire(...)]` attributes of a type and its fields, read and
//! checked once.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{Attribute, Data, DeriveInput, Fields, Ident, Member, Type};

/// What the type's attributes say about it.
#[derive(Default)]
pub(crate) struct TypeAttrs {
    /// `entry`: an entry of a list that travels as runs.
    pub(crate) entry: bool,
    /// `tracked = jobs | vcs`: the host's change log names it.
    pub(crate) tracked: Option<Ident>,
    /// `view`: a view.
    pub(crate) view: bool,
    /// `answers = View`: a decision answering `View`.
    pub(crate) answers: Option<Type>,
}

/// One field of a struct, with what its attributes say.
pub(crate) struct Field {
    /// How the field is named in `self.<member>`.
    pub(crate) member: Member,
    /// Its type.
    pub(crate) ty: Type,
    /// Where it is, for errors.
    pub(crate) span: Span,
    /// `key`.
    pub(crate) key: bool,
    /// `clock` (`Some(None)`) or `clock = field` (`Some(Some(field))`).
    pub(crate) clock: Option<Option<Ident>>,
    /// `entry`: itself an entry.
    pub(crate) entry: bool,
    /// `now`: a view's clock.
    pub(crate) now: bool,
    /// `runs`: a view's list as runs, or a decision's as runs of values.
    pub(crate) runs: bool,
    /// `pairs_with = list`.
    pub(crate) pairs_with: Option<Ident>,
    /// `max = list`: bounded by the view's `list`.
    pub(crate) max: Option<Ident>,
    /// `positions`: a decision's list as runs of view positions.
    pub(crate) positions: bool,
    /// `flag`: a positioned entry's flag.
    pub(crate) flag: bool,
    /// `trailing`: added after the struct's layout shipped, so written only
    /// when not its default and read only when bytes are left.
    pub(crate) trailing: bool,
}

/// A type as the derive sees it: its attributes, and its fields if it is
/// a struct.
pub(crate) struct Shape {
    /// The type's attributes.
    pub(crate) ty: TypeAttrs,
    /// The struct's fields (none for an enum).
    pub(crate) fields: Vec<Field>,
}

impl Shape {
    /// Reads the attributes of `input` and its fields.
    pub(crate) fn of(input: &DeriveInput) -> syn::Result<Shape> {
        let ty = type_attrs(&input.attrs)?;
        let fields = match &input.data {
            Data::Struct(s) => fields(&s.fields)?,
            Data::Enum(e) => {
                for v in &e.variants {
                    for f in &v.fields {
                        if f.attrs.iter().any(|a| a.path().is_ident("wire")) {
                            return Err(syn::Error::new(
                                f.span(),
                                "#[wire(...)] on an enum's fields means nothing",
                            ));
                        }
                    }
                }
                Vec::new()
            }
            Data::Union(u) => {
                return Err(syn::Error::new(
                    u.union_token.span,
                    "#[derive(Wire)] is for structs and enums",
                ));
            }
        };
        let shape = Shape { ty, fields };
        shape.check(input)?;
        Ok(shape)
    }

    /// The field named `name`.
    pub(crate) fn field(&self, name: &Ident) -> syn::Result<&Field> {
        self.fields
            .iter()
            .find(|f| matches!(&f.member, Member::Named(n) if n == name))
            .ok_or_else(|| syn::Error::new(name.span(), format!("no field `{name}`")))
    }

    /// Refuses attributes that do not fit the type.
    fn check(&self, input: &DeriveInput) -> syn::Result<()> {
        let is_enum = matches!(input.data, Data::Enum(_));
        let t = &self.ty;
        if is_enum && (t.entry || t.view || t.answers.is_some()) {
            return Err(syn::Error::new(
                input.ident.span(),
                "entries, views and decisions are structs",
            ));
        }
        if t.tracked.is_some() && !t.entry {
            return Err(syn::Error::new(
                input.ident.span(),
                "`tracked` is for an `entry`",
            ));
        }
        for f in &self.fields {
            let only = |flag: bool, what: &str| {
                if flag {
                    Err(syn::Error::new(f.span, what))
                } else {
                    Ok(())
                }
            };
            only(
                !t.entry && (f.clock.is_some() || f.entry),
                "clock and entry fields belong to an `entry` struct",
            )?;
            only(
                !t.view && (f.now || f.pairs_with.is_some()),
                "now and pairs_with fields belong to a `view` struct",
            )?;
            only(
                t.answers.is_none() && (f.max.is_some() || f.positions),
                "max and positions fields belong to a decision (`answers = View`)",
            )?;
            only(
                (f.runs || f.positions) && t.answers.is_some() && f.max.is_none(),
                "a decision's runs need `max = list`: the view's list they cover",
            )?;
            only(
                f.runs && !t.view && t.answers.is_none(),
                "runs fields belong to a view or a decision",
            )?;
            only(
                f.trailing && (t.entry || t.view || t.answers.is_some()),
                "trailing fields belong to a plain struct (not an entry, view or decision)",
            )?;
        }
        let first_trailing = self.fields.iter().position(|f| f.trailing);
        if let Some(at) = first_trailing
            && let Some(f) = self.fields.iter().skip(at).find(|f| !f.trailing)
        {
            return Err(syn::Error::new(
                f.span,
                "a field after a trailing field must be trailing too",
            ));
        }
        Ok(())
    }
}

/// The type-level attributes.
fn type_attrs(attrs: &[Attribute]) -> syn::Result<TypeAttrs> {
    let mut t = TypeAttrs::default();
    for attr in attrs.iter().filter(|a| a.path().is_ident("wire")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("entry") {
                t.entry = true;
            } else if meta.path.is_ident("view") {
                t.view = true;
            } else if meta.path.is_ident("tracked") {
                let kind: Ident = meta.value()?.parse()?;
                if kind != "jobs" && kind != "vcs" {
                    return Err(meta.error("tracked = jobs or tracked = vcs"));
                }
                t.tracked = Some(kind);
            } else if meta.path.is_ident("answers") {
                t.answers = Some(meta.value()?.parse()?);
            } else {
                return Err(meta.error("expected entry, tracked, view or answers"));
            }
            Ok(())
        })?;
    }
    Ok(t)
}

/// The fields and their attributes.
fn fields(fields: &Fields) -> syn::Result<Vec<Field>> {
    fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let member = match &f.ident {
                Some(name) => Member::Named(name.clone()),
                None => Member::Unnamed(i.into()),
            };
            let mut field = Field {
                member,
                ty: f.ty.clone(),
                span: f.span(),
                key: false,
                clock: None,
                entry: false,
                now: false,
                runs: false,
                pairs_with: None,
                max: None,
                positions: false,
                flag: false,
                trailing: false,
            };
            for attr in f.attrs.iter().filter(|a| a.path().is_ident("wire")) {
                field_attr(attr, &mut field)?;
            }
            Ok(field)
        })
        .collect()
}

/// One `#[wire(...)]` of a field.
fn field_attr(attr: &Attribute, f: &mut Field) -> syn::Result<()> {
    attr.parse_nested_meta(|meta| {
        let p = &meta.path;
        if p.is_ident("key") {
            f.key = true;
        } else if p.is_ident("clock") {
            f.clock = Some(if meta.input.peek(syn::Token![=]) {
                Some(meta.value()?.parse()?)
            } else {
                None
            });
        } else if p.is_ident("entry") {
            f.entry = true;
        } else if p.is_ident("now") {
            f.now = true;
        } else if p.is_ident("runs") {
            f.runs = true;
        } else if p.is_ident("pairs_with") {
            f.pairs_with = Some(meta.value()?.parse()?);
        } else if p.is_ident("max") {
            f.max = Some(meta.value()?.parse()?);
        } else if p.is_ident("positions") {
            f.positions = true;
        } else if p.is_ident("flag") {
            f.flag = true;
        } else if p.is_ident("trailing") {
            f.trailing = true;
        } else {
            return Err(meta.error(
                "expected key, clock, entry, now, runs, pairs_with, max, positions, flag or trailing",
            ));
        }
        Ok(())
    })
}
