//! Phase 1b: the CUDA C side of `#[kernel]`. Reads just enough C to find the
//! `extern "C" __global__` function of a name and the types of its parameters: a lexer
//! that drops comments, preprocessor lines and literals, and a scan for the declaration.

/// A value type a kernel may take, named by its C spelling and its Rust type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CScalar {
    F32,
    F64,
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    Usize,
    Isize,
    Bool,
}

impl CScalar {
    /// The Rust type a value of this C type is passed as.
    pub fn rust(self) -> &'static str {
        match self {
            CScalar::F32 => "f32",
            CScalar::F64 => "f64",
            CScalar::I8 => "i8",
            CScalar::U8 => "u8",
            CScalar::I16 => "i16",
            CScalar::U16 => "u16",
            CScalar::I32 => "i32",
            CScalar::U32 => "u32",
            CScalar::I64 => "i64",
            CScalar::U64 => "u64",
            CScalar::Usize => "usize",
            CScalar::Isize => "isize",
            CScalar::Bool => "bool",
        }
    }

    /// Whether a locus tensor can hold elements of this type (`Element`).
    pub fn is_element(self) -> bool {
        matches!(self, CScalar::F32 | CScalar::F64 | CScalar::I32 | CScalar::U8)
    }
}

/// A parameter's type, as far as locus can pass it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CType {
    /// `T*` (`is_const`: `const T*`, which the kernel only reads).
    Pointer { elem: Option<CScalar>, is_const: bool },
    /// `T`, by value.
    Value(CScalar),
    /// Anything else (a struct, `half`, a pointer to a pointer, a reference).
    Unsupported,
}

/// One parameter: its text as written (for messages) and its type.
#[derive(Clone, Debug)]
pub struct CParam {
    pub text: String,
    pub ty: CType,
}

/// The kernel found in the source.
#[derive(Debug)]
pub struct CKernel {
    pub params: Vec<CParam>,
    /// Line of the name, from 1.
    pub line: usize,
    /// The declaration up to the closing parenthesis, for messages.
    pub decl: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Punct(char),
    Str(String),
    Other,
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    line: usize,
}

/// The tokens of `src`, without comments and preprocessor lines.
fn lex(src: &str) -> Vec<Token> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line, mut line_start) = (0, 1, true);
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            line_start = true;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '#' && line_start {
            // A preprocessor line, continued by a backslash at its end.
            while i < chars.len() && chars[i] != '\n' {
                if chars[i] == '\\' && chars.get(i + 1) == Some(&'\n') {
                    line += 1;
                    i += 1;
                }
                i += 1;
            }
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                if chars[i] == '\n' {
                    line += 1;
                }
                i += 1;
            }
            i += 2;
        } else if c == '"' || c == '\'' {
            let start = i + 1;
            i += 1;
            while i < chars.len() && chars[i] != c && chars[i] != '\n' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            let end = i.min(chars.len());
            let tok = if c == '"' { Tok::Str(chars[start..end].iter().collect()) } else { Tok::Other };
            out.push(Token { tok, line });
            line_start = false;
            i += 1;
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token { tok: Tok::Ident(chars[start..i].iter().collect()), line });
            line_start = false;
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '.') {
                i += 1;
            }
            out.push(Token { tok: Tok::Other, line });
            line_start = false;
        } else {
            out.push(Token { tok: Tok::Punct(c), line });
            line_start = false;
            i += 1;
        }
    }
    out
}

fn is_ident(t: &Token, name: &str) -> bool {
    matches!(&t.tok, Tok::Ident(s) if s == name)
}

/// Words that attribute a declaration rather than name a function.
const NOT_NAMES: [&str; 5] = ["__launch_bounds__", "__attribute__", "__declspec", "alignas", "__align__"];

/// Tokens as C text: identifiers spaced, `*` and punctuation attached.
fn render(toks: &[Token]) -> String {
    let mut out = String::new();
    for t in toks {
        match &t.tok {
            Tok::Ident(s) => {
                if !out.is_empty() && !out.ends_with('(') {
                    out.push(' ');
                }
                out.push_str(s);
            }
            Tok::Str(s) => {
                if !out.is_empty() {
                    out.push(' ');
                }
                out.push('"');
                out.push_str(s);
                out.push('"');
            }
            Tok::Punct(',') => out.push(','),
            Tok::Punct(c) => out.push(*c),
            Tok::Other => out.push_str(" …"),
        }
    }
    out
}

/// Where line `line` of `origin` is, for messages: `kernels/saxpy.cu:3`, or `line 3 of
/// the inline source`.
pub fn at(origin: &str, line: usize) -> String {
    match origin {
        INLINE => format!("line {line} of {INLINE}"),
        file => format!("{file}:{line}"),
    }
}

/// What messages call a source given inline.
pub const INLINE: &str = "the inline source";

/// The `extern "C" __global__` function `name` of `src`; else why not, as a sentence
/// (`origin` names the source in it: a file, or [`INLINE`]).
pub fn find(src: &str, name: &str, origin: &str) -> Result<CKernel, String> {
    let toks = lex(src);
    // Whether each `{` opened an `extern "C" { .. }` block.
    let mut blocks: Vec<bool> = Vec::new();
    let mut kernels: Vec<String> = Vec::new();
    for i in 0..toks.len() {
        match &toks[i].tok {
            Tok::Punct('{') => {
                let extern_c = i >= 2 && is_ident(&toks[i - 2], "extern") && toks[i - 1].tok == Tok::Str("C".into());
                blocks.push(extern_c);
            }
            Tok::Punct('}') => {
                blocks.pop();
            }
            Tok::Ident(found) if toks.get(i + 1).is_some_and(|t| t.tok == Tok::Punct('(')) => {
                let start =
                    (0..i).rev().find(|&j| matches!(toks[j].tok, Tok::Punct(';' | '{' | '}'))).map_or(0, |j| j + 1);
                let prefix = &toks[start..i];
                if !prefix.iter().any(|t| is_ident(t, "__global__")) || NOT_NAMES.contains(&found.as_str()) {
                    continue;
                }
                if found != name {
                    if !kernels.contains(found) {
                        kernels.push(found.clone());
                    }
                    continue;
                }
                let line = toks[i].line;
                let here = at(origin, line);
                let extern_c = blocks.iter().any(|b| *b)
                    || prefix.windows(2).any(|w| is_ident(&w[0], "extern") && w[1].tok == Tok::Str("C".into()));
                if prefix.iter().any(|t| is_ident(t, "template")) {
                    return Err(format!(
                        "`{name}` at {here} is a template: its instances have C++-mangled names; \
                         declare an `extern \"C\" __global__` function for the instance to launch"
                    ));
                }
                if !extern_c {
                    return Err(format!(
                        "`{name}` at {here} is not `extern \"C\"`, so C++ mangles its name and it cannot \
                         be found at run time; declare it `extern \"C\" __global__ void {name}(..)`"
                    ));
                }
                let close = matching_paren(&toks, i + 1)
                    .ok_or_else(|| format!("the parameter list of `{name}` at {here} is not closed"))?;
                let params = split_params(&toks[i + 2..close]).iter().map(|p| param(p)).collect();
                let decl = render(&toks[start..=close]);
                return Ok(CKernel { params, line, decl });
            }
            _ => {}
        }
    }
    let seen = match kernels.as_slice() {
        [] => "it declares no `__global__` function".to_string(),
        names => format!(
            "its `__global__` functions are {}; name the one to launch with `name = \"..\"`",
            names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
        ),
    };
    Err(format!("no `extern \"C\" __global__` function `{name}` in {origin}: {seen}"))
}

/// The index of the `)` closing the `(` at `open`.
fn matching_paren(toks: &[Token], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (j, t) in toks.iter().enumerate().skip(open) {
        match t.tok {
            Tok::Punct('(') => depth += 1,
            Tok::Punct(')') => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

/// The parameters' tokens, split at top-level commas; `(void)` and `()` have none.
fn split_params(toks: &[Token]) -> Vec<Vec<Token>> {
    if toks.is_empty() || (toks.len() == 1 && is_ident(&toks[0], "void")) {
        return Vec::new();
    }
    let mut out = vec![Vec::new()];
    let mut depth = 0i32;
    for t in toks {
        match t.tok {
            Tok::Punct('(' | '<' | '[') => depth += 1,
            Tok::Punct(')' | '>' | ']') => depth -= 1,
            Tok::Punct(',') if depth == 0 => {
                out.push(Vec::new());
                continue;
            }
            _ => {}
        }
        if let Some(last) = out.last_mut() {
            last.push(t.clone());
        }
    }
    out
}

/// Qualifiers that do not change what locus passes.
const QUALIFIERS: [&str; 5] = ["volatile", "__restrict__", "__restrict", "restrict", "register"];

/// Words that are (parts of) type names, never a parameter's name.
const TYPE_WORDS: [&str; 9] = ["void", "float", "double", "char", "short", "int", "long", "unsigned", "signed"];

fn param(toks: &[Token]) -> CParam {
    let text = render(toks);
    let unsupported = CParam { text: text.clone(), ty: CType::Unsupported };
    let mut words: Vec<&str> = Vec::new();
    let (mut stars, mut const_before_star) = (0, false);
    for t in toks {
        match &t.tok {
            Tok::Ident(w) if w == "const" => const_before_star |= stars == 0,
            Tok::Ident(w) if QUALIFIERS.contains(&w.as_str()) => {}
            Tok::Ident(w) => words.push(w),
            Tok::Punct('*') => stars += 1,
            _ => return unsupported,
        }
    }
    // The last word names the parameter unless it is part of the type (`const float*`).
    if words.len() > 1 && !TYPE_WORDS.contains(words.last().unwrap_or(&"")) {
        words.pop();
    }
    let Some(scalar) = scalar(&words) else { return unsupported };
    let ty = match stars {
        0 => CType::Value(scalar),
        1 => CType::Pointer { elem: scalar.is_element().then_some(scalar), is_const: const_before_star },
        _ => CType::Unsupported,
    };
    CParam { text, ty }
}

/// The scalar a C type name spells (`long` is 64 bits, as on the LP64 hosts NVRTC
/// compiles for).
fn scalar(words: &[&str]) -> Option<CScalar> {
    if let [one] = words {
        let named = match *one {
            "float" => Some(CScalar::F32),
            "double" => Some(CScalar::F64),
            "size_t" => Some(CScalar::Usize),
            "ptrdiff_t" => Some(CScalar::Isize),
            "bool" => Some(CScalar::Bool),
            "int8_t" => Some(CScalar::I8),
            "uint8_t" => Some(CScalar::U8),
            "int16_t" => Some(CScalar::I16),
            "uint16_t" => Some(CScalar::U16),
            "int32_t" => Some(CScalar::I32),
            "uint32_t" => Some(CScalar::U32),
            "int64_t" => Some(CScalar::I64),
            "uint64_t" => Some(CScalar::U64),
            _ => None,
        };
        if named.is_some() {
            return named;
        }
    }
    if words.is_empty() || !words.iter().all(|w| ["unsigned", "signed", "long", "short", "char", "int"].contains(w)) {
        return None;
    }
    let unsigned = words.contains(&"unsigned");
    let longs = words.iter().filter(|w| **w == "long").count();
    Some(match (words.contains(&"char"), words.contains(&"short"), longs, unsigned) {
        (true, false, 0, true) => CScalar::U8,
        (true, false, 0, false) => CScalar::I8,
        (false, true, 0, true) => CScalar::U16,
        (false, true, 0, false) => CScalar::I16,
        (false, false, 0, true) => CScalar::U32,
        (false, false, 0, false) => CScalar::I32,
        (false, false, 1 | 2, true) => CScalar::U64,
        (false, false, 1 | 2, false) => CScalar::I64,
        _ => return None,
    })
}
