//! Just enough of PTX to read kernel signatures: the `.entry` directives and their `.param` lists.
//!
//! Bodies are skipped token by token; nothing here interprets instructions. What the parser refuses it
//! names (an aggregate parameter, a type a kernel parameter cannot have), so the `kernel!` error says why.

/// A PTX parameter's declared type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PtxType {
    /// `.u8` `.u16` `.u32` `.u64`
    U(u32),
    /// `.s8` `.s16` `.s32` `.s64`
    S(u32),
    /// `.f16` `.f32` `.f64` (`.f16` only in newer PTX; `.b16` is what compilers emit for halves)
    F(u32),
    /// `.b8` `.b16` `.b32` `.b64`: untyped bits of that many bytes
    B(u32),
}

impl PtxType {
    fn parse(directive: &str) -> Option<PtxType> {
        let (kind, bits) = directive.strip_prefix('.')?.split_at(1);
        let bytes = match bits {
            "8" => 1,
            "16" => 2,
            "32" => 4,
            "64" => 8,
            _ => return None,
        };
        match kind {
            "u" => Some(PtxType::U(bytes)),
            "s" => Some(PtxType::S(bytes)),
            "f" if bytes >= 2 => Some(PtxType::F(bytes)),
            "b" => Some(PtxType::B(bytes)),
            _ => None,
        }
    }

    /// Bytes (and natural alignment).
    pub fn size(self) -> u32 {
        match self {
            PtxType::U(n) | PtxType::S(n) | PtxType::F(n) | PtxType::B(n) => n,
        }
    }

    /// The PTX spelling, for messages.
    pub fn name(self) -> String {
        let (k, n) = match self {
            PtxType::U(n) => ('u', n),
            PtxType::S(n) => ('s', n),
            PtxType::F(n) => ('f', n),
            PtxType::B(n) => ('b', n),
        };
        format!(".{k}{}", n * 8)
    }
}

/// One `.param` of an entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtxParam {
    /// The name as written (compilers prefix it with the entry's name).
    pub name: String,
    /// Its type.
    pub ty: PtxType,
    /// Declared with `.ptr`: a pointer for certain.
    pub ptr: bool,
}

/// One `.entry`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtxEntry {
    /// The entry's name.
    pub name: String,
    /// Its parameters in signature order.
    pub params: Vec<PtxParam>,
}

impl PtxParam {
    /// The parameter's short name: the compiler's `<entry>_param_` prefix removed. `None` when what is
    /// left is only a position (`_Z..._param_3`), which says nothing a caller could check.
    pub fn short_name(&self, entry: &str) -> Option<&str> {
        let rest = self.name.strip_prefix(entry).and_then(|r| r.strip_prefix("_param_")).unwrap_or(&self.name);
        let rest = match rest.rfind("_param_") {
            Some(i) if rest[i + 7..].bytes().all(|b| b.is_ascii_digit()) => return None,
            _ => rest,
        };
        let ident = !rest.is_empty()
            && !rest.as_bytes()[0].is_ascii_digit()
            && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        ident.then_some(rest)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok<'a> {
    Word(&'a str),
    Punct(char),
}

/// Splits PTX into words (directives, identifiers, numbers) and punctuation, dropping comments and
/// string literals (`.file` lines carry paths).
fn tokens(src: &str) -> Vec<Tok<'_>> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if src[i..].starts_with("//") {
            i = src[i..].find('\n').map_or(b.len(), |n| i + n);
        } else if src[i..].starts_with("/*") {
            i = src[i + 2..].find("*/").map_or(b.len(), |n| i + 2 + n + 2);
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'$' | b'%') {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'.' | b'_' | b'$' | b'%')) {
                i += 1;
            }
            out.push(Tok::Word(&src[start..i]));
        } else {
            // PTX is ASCII; anything else is punctuation for our purposes.
            let ch = src[i..].chars().next().unwrap_or('?');
            out.push(Tok::Punct(ch));
            i += ch.len_utf8();
        }
    }
    out
}

/// Every `.entry` in `src`, in file order.
pub fn entries(src: &str) -> Result<Vec<PtxEntry>, String> {
    let toks = tokens(src);
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        if toks[i] != Tok::Word(".entry") {
            i += 1;
            continue;
        }
        let Some(Tok::Word(name)) = toks.get(i + 1) else {
            return Err("`.entry` without a name".into());
        };
        let name = name.to_string();
        i += 2;
        let mut params = Vec::new();
        if toks.get(i) == Some(&Tok::Punct('(')) {
            i += 1;
            loop {
                match toks.get(i) {
                    Some(Tok::Punct(')')) => {
                        i += 1;
                        break;
                    }
                    Some(Tok::Punct(',')) => i += 1,
                    Some(Tok::Word(".param")) => {
                        let (p, next) = param(&toks, i + 1, &name)?;
                        params.push(p);
                        i = next;
                    }
                    Some(t) => return Err(format!("entry `{name}`: unexpected `{}` in the parameter list", show(t))),
                    None => return Err(format!("entry `{name}`: the parameter list is not closed")),
                }
            }
        }
        out.push(PtxEntry { name, params });
    }
    Ok(out)
}

fn show(t: &Tok<'_>) -> String {
    match t {
        Tok::Word(w) => w.to_string(),
        Tok::Punct(c) => c.to_string(),
    }
}

/// Parses one parameter after `.param`: `.TYPE [.ptr [.SPACE] [.align N]] NAME [ '[' N ']' ]`; also
/// `.align N` before the type, as compilers write for aggregates.
fn param(toks: &[Tok<'_>], mut i: usize, entry: &str) -> Result<(PtxParam, usize), String> {
    let mut ty = None;
    let mut ptr = false;
    let name = loop {
        match toks.get(i) {
            Some(Tok::Word(".align")) => i += 2,
            Some(Tok::Word(".ptr")) => {
                ptr = true;
                i += 1;
            }
            Some(Tok::Word(".global" | ".const" | ".local" | ".shared")) => i += 1,
            Some(Tok::Word(w)) if w.starts_with('.') && ty.is_none() => {
                ty = Some(
                    PtxType::parse(w)
                        .ok_or_else(|| format!("entry `{entry}`: `{w}` is not a kernel parameter type"))?,
                );
                i += 1;
            }
            Some(Tok::Word(w)) if ty.is_some() => {
                i += 1;
                break w.to_string();
            }
            Some(t) => return Err(format!("entry `{entry}`: unexpected `{}` in a `.param`", show(t))),
            None => return Err(format!("entry `{entry}`: a `.param` is cut short")),
        }
    };
    let ty = ty.expect("the loop only breaks once a type was read");
    if toks.get(i) == Some(&Tok::Punct('[')) {
        return Err(format!(
            "entry `{entry}`: parameter `{name}` is an aggregate ({}[..]); pass structs by device pointer",
            ty.name()
        ));
    }
    Ok((PtxParam { name, ty, ptr }, i))
}

#[cfg(test)]
mod tests {
    use super::*;

    const VECTOR_ADD: &str = include_str!("../../kernels/vector_add.ptx");

    #[test]
    fn reads_the_repository_kernels_signatures() {
        let e = entries(VECTOR_ADD).unwrap();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].name, "vector_add");
        let tys: Vec<_> = e[0].params.iter().map(|p| p.ty).collect();
        assert_eq!(tys, [PtxType::U(8), PtxType::U(8), PtxType::U(8), PtxType::U(4)]);
        let names: Vec<_> = e[0].params.iter().map(|p| p.short_name("vector_add").unwrap()).collect();
        assert_eq!(names, ["a", "b", "c", "n"]);

        let scale = entries(include_str!("../../kernels/scale_copy.ptx")).unwrap();
        assert_eq!(scale[0].params[2].ty, PtxType::F(4));
        let empty = entries(include_str!("../../kernels/empty.ptx")).unwrap();
        assert_eq!(empty, [PtxEntry { name: "empty".into(), params: vec![] }]);
    }

    #[test]
    fn skips_comments_strings_and_functions_and_reads_ptr_annotations() {
        let src = r#"
            .file 1 "weird .entry name.cu"
            // .entry commented_out(.param .u32 x)
            /* .entry also_not(
            ) */
            .func helper(.param .u32 helper_p) { ret; }
            .weak .entry first(
                .param .u64 .ptr .global .align 4 first_param_out,
                .param .b16 first_param_h,
                .param .s32 first_param_k
            ) { ret; }
            .visible .entry second { ret; }
        "#;
        let e = entries(src).unwrap();
        let names: Vec<_> = e.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["first", "second"]);
        assert_eq!(
            e[0].params,
            [
                PtxParam { name: "first_param_out".into(), ty: PtxType::U(8), ptr: true },
                PtxParam { name: "first_param_h".into(), ty: PtxType::B(2), ptr: false },
                PtxParam { name: "first_param_k".into(), ty: PtxType::S(4), ptr: false },
            ]
        );
    }

    #[test]
    fn positional_and_mangled_names_have_no_short_name() {
        let p = |name: &str| PtxParam { name: name.into(), ty: PtxType::U(4), ptr: false };
        assert_eq!(p("_Z3addPfj_param_1").short_name("_Z3addPfj"), None);
        assert_eq!(p("k_param_0").short_name("k"), None);
        assert_eq!(p("k_param_n").short_name("k"), Some("n"));
        assert_eq!(p("plain").short_name("k"), Some("plain"));
        assert_eq!(p("%weird").short_name("k"), None);
    }

    #[test]
    fn refuses_aggregates_and_predicates_by_name() {
        let agg = entries(".entry k(.param .align 8 .b8 k_param_s[16]) {}").unwrap_err();
        assert!(agg.contains("`k_param_s` is an aggregate"), "{agg}");
        let pred = entries(".entry k(.param .pred k_param_p) {}").unwrap_err();
        assert!(pred.contains("`.pred` is not a kernel parameter type"), "{pred}");
        let open = entries(".entry k(.param .u32 x").unwrap_err();
        assert!(open.contains("not closed"), "{open}");
    }
}
