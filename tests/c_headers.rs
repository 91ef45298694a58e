//! What the generated C headers promise a C caller in their `# Safety` sections: every pointer a function
//! dereferences has its alignment stated, and every callback (a function pointer argument, or a table of
//! them) its rules, including that it returns normally. The headers are generated from `src/ffi/`, so this
//! reads the committed headers, which CI checks are current.

use std::path::Path;

/// One prototype and the comment above it.
struct Prototype {
    name: String,
    /// Parameters as written, e.g. `const OmegaGpuMem *m`.
    params: Vec<String>,
    /// The `# Safety` bullets, each joined into one line.
    safety: Vec<String>,
}

fn headers() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .expect("include/")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "h"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap()))
        .collect();
    out.sort();
    out
}

fn prototypes(text: &str) -> Vec<Prototype> {
    let mut out = Vec::new();
    let mut comment: Vec<String> = Vec::new();
    let mut decl = String::new();
    let mut depth = 0i32;
    for line in text.lines() {
        let t = line.trim();
        if depth == 0 && decl.is_empty() {
            if let Some(c) = t.strip_prefix("//") {
                comment.push(c.strip_prefix(' ').unwrap_or(c).to_owned());
                continue;
            }
            // The C++ guard's braces are not a declaration.
            if t.is_empty() || t.starts_with('#') || t.starts_with("extern \"C\"") || t.starts_with("}  // extern") {
                comment.clear();
                continue;
            }
        }
        depth += line.matches('{').count() as i32 - line.matches('}').count() as i32;
        decl.push_str(t);
        decl.push(' ');
        if depth == 0 && t.ends_with(';') {
            if !decl.starts_with("typedef") && decl.contains('(') {
                let open = decl.find('(').unwrap();
                let name = decl[..open].split_whitespace().last().unwrap().trim_start_matches('*').to_owned();
                let inner = &decl[open + 1..decl.rfind(')').unwrap()];
                out.push(Prototype { name, params: split_params(inner), safety: safety_bullets(&comment) });
            }
            decl.clear();
            comment.clear();
        }
    }
    out
}

/// Top-level comma-separated parameters (a function pointer's own parameters stay inside it).
fn split_params(inner: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0);
    for c in inner.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(cur.trim().to_owned());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() && cur.trim() != "void" {
        out.push(cur.trim().to_owned());
    }
    out
}

fn safety_bullets(comment: &[String]) -> Vec<String> {
    let Some(start) = comment.iter().position(|l| l.trim() == "# Safety") else { return Vec::new() };
    let mut bullets: Vec<String> = Vec::new();
    for l in &comment[start + 1..] {
        if let Some(b) = l.strip_prefix("- ") {
            bullets.push(b.to_owned());
        } else if let Some(last) = bullets.last_mut() {
            last.push(' ');
            last.push_str(l.trim());
        }
    }
    bullets
}

/// The parameter's name and whether it is a function pointer, a data pointer the library reads or writes,
/// or neither.
fn classify(param: &str, tables: &[String]) -> (String, Kind) {
    if let Some(i) = param.find("(*") {
        let name = param[i + 2..].split(')').next().unwrap().trim().to_owned();
        return (name, Kind::Callback);
    }
    let name = param.rsplit(|c: char| c == '*' || c.is_whitespace()).next().unwrap().to_owned();
    let ty = param[..param.len() - name.len()].trim();
    let kind = if !ty.ends_with('*') {
        Kind::Value
    } else if ty.contains("OmegaGpuCmdList ")
        || ty.contains("OmegaGpuTensor ")
        || ty.contains("char *")
        || ty == "void *"
    {
        // A command-list or tensor key (never dereferenced), a NUL-terminated string, or a context passed
        // through.
        Kind::Opaque
    } else if tables.iter().any(|t| ty.contains(t.as_str())) {
        Kind::Table
    } else {
        Kind::Data
    };
    (name, kind)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Value,
    Opaque,
    Data,
    Callback,
    Table,
}

/// Struct typedefs with a function-pointer field: tables of callbacks.
fn callback_tables(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for chunk in text.split("typedef struct").skip(1) {
        let Some(end) = chunk.find('}') else { continue };
        let name = chunk[end + 1..].split(';').next().unwrap().trim().to_owned();
        if chunk[..end].contains("(*") {
            out.push(format!("{name} "));
        }
    }
    out
}

#[test]
fn every_pointer_and_callback_argument_has_its_rules_in_the_safety_section() {
    let headers = headers();
    let all: String = headers.iter().map(|(_, t)| t.as_str()).collect();
    let tables = callback_tables(&all);
    assert!(tables.iter().any(|t| t == "OmegaGpuBackend "), "{tables:?}");
    let mut missing = Vec::new();
    let mut checked = 0;
    for (file, text) in &headers {
        for p in prototypes(text) {
            for param in &p.params {
                let (name, kind) = classify(param, &tables);
                let needs: &[&str] = match kind {
                    Kind::Value | Kind::Opaque => continue,
                    Kind::Data => &["aligned"],
                    Kind::Callback => &["returns normally"],
                    Kind::Table => &["aligned", "returns normally"],
                };
                checked += 1;
                let tick = format!("`{name}`");
                let bullets: Vec<&String> = p
                    .safety
                    .iter()
                    .filter(|b| b.contains(&tick) || kind == Kind::Table || kind == Kind::Callback)
                    .collect();
                for need in needs {
                    if !bullets.iter().any(|b| b.contains(need) && (b.contains(&tick) || *need == "returns normally")) {
                        missing
                            .push(format!("{file}: {}({param}): no Safety bullet on `{name}` says \"{need}\"", p.name));
                    }
                }
            }
        }
    }
    assert!(checked > 20, "only {checked} pointer arguments found: is the parser reading the headers?");
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn the_clock_and_close_hook_callbacks_state_their_threads_and_what_they_must_not_call() {
    let all: Vec<Prototype> = headers().iter().flat_map(|(_, t)| prototypes(t)).collect();
    let find = |name: &str| all.iter().find(|p| p.name == name).unwrap_or_else(|| panic!("{name} in the headers"));
    let clock = find("omega_gpu_engine_set_clock").safety.join(" ");
    for part in ["from any thread", "returns normally", "does not call `omega_gpu_execute`"] {
        assert!(clock.contains(part), "set_clock's Safety lacks `{part}`: {clock}");
    }
    let hook = find("omega_gpu_session_on_close").safety.join(" ");
    for part in ["from any thread", "under the session lock", "returns normally", "`ctx`"] {
        assert!(hook.contains(part), "on_close's Safety lacks `{part}`: {hook}");
    }
}
