#!/usr/bin/env python3
"""The runtime API check: the manifest against the C headers and the document.

    runtime_api.py check --include DIR --doc FILE --manifest FILE [--cc CC]
    runtime_api.py bless --include DIR --doc FILE --manifest FILE [--cc CC]

check fails (exit 1) unless:
  - every manifest function is declared in its header, with exactly the manifest's types;
  - every manifest struct is defined in its header with the manifest's fields and field types, and a
    compiled probe finds the manifest's size and field offsets;
  - every manifest constant is a macro of its header and the probe finds the manifest's value;
  - every manifest type is a typedef of its header that names the manifest's type;
  - the version macros (omega_runtime_api.h), the manifest's `version` line, the document's first
    line and `API_VERSION` in the crate root (--lib) agree, and OMEGA_RUNTIME_API_VERSION encodes them;
  - every STABLE entry has a #### section in the document that names it, and every EXPERIMENTAL one is
    named somewhere in the document;
  - every function, struct, type and constant the headers define is in the manifest or in the document's
    INTERNAL list;
  - every C declaration quoted in the document (a function declaration: a line ending in `);` in a
    code span or block; a typedef: `typedef ...;` in a code span or block, over as many lines of the block
    as it takes) is, whitespace aside, a whole declaration of some header.
bless rewrites the manifest's signatures, fields, sizes and values from the headers and the probe,
keeping each line's kind, name, tier and header, and dropping entries no header has any more. It never
adds an entry (that takes a decision on the tier) and never changes the version.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

TIERS = ("STABLE", "EXPERIMENTAL")
VERSION_HEADER = "omega_runtime_api.h"
VERSION_MACROS = ("OMEGA_RUNTIME_API_VERSION_MAJOR", "OMEGA_RUNTIME_API_VERSION_MINOR")
DOC_VERSION = re.compile(r"^Omega Runtime API version: (\d+)\.(\d+)\s*$")
LIB_VERSION = re.compile(r"pub const API_VERSION: \(u32, u32\) = \((\d+), (\d+)\);")
ENCODED_VERSION = "OMEGA_RUNTIME_API_VERSION"

C_TO_RUST = {
    "void": "c_void",
    "char": "c_char",
    "bool": "bool",
    "int": "i32",
    "unsigned int": "u32",
    "int8_t": "i8",
    "int16_t": "i16",
    "int32_t": "i32",
    "int64_t": "i64",
    "uint8_t": "u8",
    "uint16_t": "u16",
    "uint32_t": "u32",
    "uint64_t": "u64",
    "size_t": "usize",
    "ptrdiff_t": "isize",
    "intptr_t": "isize",
    "uintptr_t": "usize",
    "float": "f32",
    "double": "f64",
}
STATEMENT_WORDS = {"return", "else", "case", "goto", "sizeof", "if", "while", "for", "switch", "do"}


class Failures:
    def __init__(self):
        self.items = []

    def add(self, msg):
        self.items.append(msg)


# ----- the manifest -------------------------------------------------------------------------------------

MANIFEST_LINE = re.compile(r"^(fn|struct|const|type)\s+(\w+)\s+(\w+)\s+(\S+\.h)(?:\s+(.*))?$")


def parse_manifest(path, fail):
    m = {"version": None, "entries": [], "lines": []}
    with open(path) as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            m["lines"].append(line)
            s = line.strip()
            if not s or s.startswith("#"):
                continue
            if s.startswith("version "):
                v = re.match(r"^version (\d+)\.(\d+)$", s)
                if not v:
                    fail.add(f"manifest:{n}: bad version line `{s}`")
                else:
                    m["version"] = (int(v.group(1)), int(v.group(2)))
                continue
            e = MANIFEST_LINE.match(s)
            if not e:
                fail.add(f"manifest:{n}: cannot read `{s}`")
                continue
            kind, name, tier, header, rest = e.groups()
            if tier not in TIERS:
                fail.add(f"manifest:{n}: {name}: tier `{tier}` is not STABLE or EXPERIMENTAL")
            entry = {"kind": kind, "name": name, "tier": tier, "header": header, "rest": rest or "", "line": n}
            if kind == "struct" and rest:
                sm = re.match(r"^size=(\d+)\s*\{(.*)\}$", rest)
                if not sm:
                    fail.add(f"manifest:{n}: {name}: expected `size=N {{ field: offset type, ... }}`")
                else:
                    entry["size"] = int(sm.group(1))
                    fields = []
                    # A field type may hold an array (`[c_char; 64]`) or a function pointer whose parameter
                    # list has commas of its own (`fn(*mut c_void, u32) -> i32`): split outside parentheses.
                    for part in split_top(sm.group(2), ","):
                        fm = re.match(r"^(\w+):\s*(\d+)\s+(.+)$", part)
                        if not fm:
                            fail.add(f"manifest:{n}: {name}: cannot read field `{part}`")
                            continue
                        fields.append((fm.group(1), int(fm.group(2)), fm.group(3).strip()))
                    entry["fields"] = fields
            if kind == "type" and rest:
                tm = re.match(r"^=\s*(.+)$", rest)
                if not tm:
                    fail.add(f"manifest:{n}: {name}: expected `= TYPE`")
                else:
                    entry["target"] = tm.group(1).strip()
            if kind == "const" and rest:
                cm = re.match(r"^=\s*(-?\d+)$", rest)
                if not cm:
                    fail.add(f"manifest:{n}: {name}: expected `= VALUE`")
                else:
                    entry["value"] = int(cm.group(1))
            m["entries"].append(entry)
    if m["version"] is None:
        fail.add("manifest: no `version MAJOR.MINOR` line")
    return m


# ----- the headers --------------------------------------------------------------------------------------


def strip_comments(text):
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            out.append(" ")
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def preprocess(text):
    """Comment-free text with preprocessor lines removed and `#ifdef __cplusplus` blocks dropped, plus
    the object-like macros it defines."""
    lines = strip_comments(text).split("\n")
    joined = []
    buf = ""
    for ln in lines:
        if ln.endswith("\\"):
            buf += ln[:-1] + " "
            continue
        joined.append(buf + ln)
        buf = ""
    body, macros, stack = [], {}, []
    for ln in joined:
        s = ln.strip()
        if s.startswith("#"):
            d = s[1:].strip()
            if d.startswith("ifdef") or d.startswith("ifndef") or d.startswith("if"):
                cpp = d.startswith("ifdef") and d.split()[1:2] == ["__cplusplus"]
                cpp = cpp or re.match(r"^if\s+defined\s*\(?\s*__cplusplus", d) is not None
                stack.append(cpp)
            elif d.startswith("endif"):
                if stack:
                    stack.pop()
            elif d.startswith("define") and not any(stack):
                dm = re.match(r"^define\s+(\w+)(?!\()\s*(.*)$", d)
                if dm:
                    macros[dm.group(1)] = dm.group(2).strip()
            continue
        if not any(stack):
            body.append(ln)
    return " ".join(body), macros


def norm(s):
    s = re.sub(r"\s+", " ", s).strip()
    s = re.sub(r"\{\s*", "{ ", s)  # `{uint32_t x;` and `{  uint32_t x;` -> `{ uint32_t x;`
    s = re.sub(r";?\s*\}", "; }", s)  # `x; }`, `x;}` and `x }` -> `x; }`
    s = re.sub(r"\{ ; \}", "{ }", s)
    s = re.sub(r"\s*\*\s*", lambda mm: " *", s)  # `T* x`, `T *x`, `T * x` -> `T *x`
    s = re.sub(r"\* (?=[\w*])", "*", s)
    s = re.sub(r"\(\s+", "(", s)
    s = re.sub(r"\s+\)", ")", s)
    s = re.sub(r"\s*,\s*", ", ", s)
    return s


def split_top(text, sep=";"):
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "{(":
            depth += 1
        elif ch in "})":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


FUNC = re.compile(r"^(.*?)\b(\w+)\s*\((.*)\)$")


def parse_header(path):
    text = open(path).read()
    body, macros = preprocess(text)
    h = {"functions": {}, "structs": {}, "types": {}, "macros": macros, "decls": []}
    for decl in split_top(body):
        d = norm(decl)
        if d.startswith("typedef"):
            # Every typedef is a declaration the document may quote: structs and aliases alike.
            h["decls"].append(d)
        if d.startswith("typedef struct") or d.startswith("struct"):
            sm = re.match(r"^typedef struct(?:\s+\w+)?\s*\{(.*)\}\s*(\w+)$", d)
            if sm:
                fields = []
                for fdecl in split_top(sm.group(1)):
                    fields.append(parse_field(norm(fdecl), macros))
                h["structs"][sm.group(2)] = fields
            continue
        if d.startswith("typedef"):
            # An alias of a scalar or pointer type, `typedef uint64_t OmegaGpuVa` (an opaque struct's
            # `typedef struct X X` declares no alias of its own).
            am = re.match(r"^typedef (?!struct\b)(.*?)\s*\b(\w+)$", d)
            if am and "(" not in d:
                h["types"][am.group(2)] = rust_type(am.group(1))
            continue
        fm = FUNC.match(d)
        if fm and fm.group(2) and not fm.group(1).strip().startswith("typedef"):
            h["decls"].append(d)
            h["functions"][fm.group(2)] = {"ret": fm.group(1).strip(), "params": fm.group(3).strip(), "decl": d}
    return h


def parse_field(fdecl, macros=None):
    # A function pointer, `RET (*name)(PARAMS)`: spelled as the function's own signature.
    pm = re.match(r"^(.*?)\(\s*\*\s*(\w+)\s*\)\s*\((.*)\)$", fdecl)
    if pm:
        return (pm.group(2), rust_signature({"ret": pm.group(1).strip(), "params": pm.group(3).strip()}))
    # An array whose length is a number or an object-like macro of the same header (its value).
    am = re.match(r"^(.*?)\s*\b(\w+)\s*\[(\w+)\]$", fdecl)
    if am:
        n = am.group(3)
        if not n.isdigit() and re.fullmatch(r"\d+", (macros or {}).get(n, "")):
            n = (macros or {})[n]
        return (am.group(2), f"[{rust_type(am.group(1))}; {n}]")
    fm = re.match(r"^(.*?)\s*\b(\w+)$", fdecl)
    if not fm:
        return (fdecl, "?")
    return (fm.group(2), rust_type(fm.group(1)))


def rust_type(c):
    """The manifest's Rust spelling of C type `c` (`const OmegaGpuMem *` -> `*const OmegaGpuMem`)."""
    c = norm(c.replace("struct ", ""))
    stars = []
    # Peel pointers from the right: `const char *const *` and the like.
    while c.endswith("*") or c.endswith("*const") or re.search(r"\*\s*const$", c):
        if re.search(r"\*\s*const$", c):
            c = re.sub(r"\*\s*const$", "", c).strip()
        else:
            c = c[:-1].strip()
        stars.append(None)
    const = False
    words = c.split()
    if "const" in words:
        const = True
        words = [w for w in words if w != "const"]
    base = " ".join(words)
    r = C_TO_RUST.get(base, base)
    if not stars:
        return r
    out = r
    for i in range(len(stars)):
        # Only the innermost pointer carries the pointee's const.
        out = ("*const " if (i == 0 and const) else "*mut ") + out
    return out


def param_type(p):
    p = norm(p)
    if p in ("void", ""):
        return None
    fp = re.match(r"^(.*?)\(\s*\*\s*\w*\s*\)\s*\((.*)\)$", p)
    if fp:
        # A function pointer parameter, spelled as the function's own signature.
        return rust_signature({"ret": fp.group(1).strip(), "params": fp.group(2).strip()})
    am = re.match(r"^(.*?)\s*\b(\w+)\s*\[(\d*)\]$", p)
    if am:
        return "*mut " + rust_type(am.group(1))
    fm = re.match(r"^(.*?[\w*])\s*\b(\w+)$", p)
    if fm and fm.group(1).strip() not in ("", "const", "struct"):
        return rust_type(fm.group(1))
    return rust_type(p)


def rust_signature(f):
    params = [] if f["params"] in ("void", "") else split_top(f["params"], ",")
    types = [param_type(p) for p in params]
    ret = rust_type(f["ret"])
    ret = "()" if ret == "c_void" else ret
    return f"fn({', '.join(t for t in types if t)}) -> {ret}"


def load_headers(include_dir):
    headers = {}
    for name in sorted(os.listdir(include_dir)):
        if name.endswith(".h"):
            headers[name] = parse_header(os.path.join(include_dir, name))
    return headers


# ----- the probe ----------------------------------------------------------------------------------------


def run_probe(include_dir, headers_used, structs, consts, macros_wanted, cc, fail):
    """Compiles and runs a C program that prints sizes, offsets and macro values; returns what it printed."""
    src = ["#include <stddef.h>", "#include <stdio.h>"]
    src += [f'#include "{h}"' for h in sorted(headers_used)]
    src.append("int main(void) {")
    for s in structs:
        src.append(f'    printf("size {s["name"]} %zu\\n", sizeof({s["name"]}));')
        for fname, _, _ in s.get("fields", []):
            src.append(f'    printf("offset {s["name"]}.{fname} %zu\\n", offsetof({s["name"]}, {fname}));')
    for c in consts + macros_wanted:
        src.append(f'    printf("const {c} %lld\\n", (long long)({c}));')
    src += ["    return 0;", "}", ""]
    with tempfile.TemporaryDirectory(prefix="omega-probe-") as tmp:
        c_path = os.path.join(tmp, "probe.c")
        exe = os.path.join(tmp, "probe")
        with open(c_path, "w") as f:
            f.write("\n".join(src))
        r = subprocess.run(
            [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-I", include_dir, c_path, "-o", exe],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            fail.add("the probe did not compile:\n" + r.stderr.strip())
            return {}
        r = subprocess.run([exe], capture_output=True, text=True)
        if r.returncode != 0:
            fail.add(f"the probe failed: {r.stderr.strip()}")
            return {}
    out = {}
    for line in r.stdout.splitlines():
        kind, key, val = line.split()
        out[(kind, key)] = int(val)
    return out


# ----- the document -------------------------------------------------------------------------------------


def doc_sections(doc_lines):
    """(level, heading text, body lines) for each Markdown heading."""
    secs, cur = [], None
    fence = False
    for ln in doc_lines:
        if ln.startswith("```"):
            fence = not fence
        hm = None if fence else re.match(r"^(#{1,6})\s+(.*)$", ln)
        if hm:
            cur = [len(hm.group(1)), hm.group(2).strip(), []]
            secs.append(cur)
        elif cur is not None:
            cur[2].append(ln)
    return secs


def internal_names(doc_lines):
    """Names listed in the document's INTERNAL section(s): backticked words, `PREFIX_*` allowed."""
    names = []
    secs = doc_sections(doc_lines)
    for i, (lvl, title, body) in enumerate(secs):
        if "INTERNAL" not in title:
            continue
        text = list(body)
        for lvl2, title2, body2 in secs[i + 1 :]:
            if lvl2 <= lvl:
                break
            text += [title2] + body2
        for ln in text:
            names += re.findall(r"`([A-Za-z_][\w*]*)`", ln)
    return names


def typedef_ends(text):
    """True when `text`, the start of a quoted typedef, is a whole one: its braces closed, then `;`."""
    return text.endswith(";") and text.count("{") == text.count("}")


def quoted_declarations(doc_lines):
    """Candidate C declarations quoted in the document: function declarations (lines ending in `);` in
    fenced blocks, and code spans ending in `);`) and typedefs (a fenced `typedef ...;`, one line or
    several up to the line that ends it, and code spans `typedef ...;`)."""
    out = []
    fence = False
    typedef = None  # (first line, text so far) of a fenced typedef that spans lines
    for n, ln in enumerate(doc_lines, 1):
        if ln.startswith("```"):
            fence = not fence
            if typedef:
                out.append(typedef)  # a typedef the fence cut off: checked as it stands, so it fails
                typedef = None
            continue
        if fence:
            s = ln.strip()
            if typedef:
                typedef = (typedef[0], typedef[1] + " " + s)
                if typedef_ends(typedef[1]):
                    out.append(typedef)
                    typedef = None
            elif s.startswith("typedef "):
                if typedef_ends(s):
                    out.append((n, s))
                else:
                    typedef = (n, s)
            elif s.endswith(");"):
                out.append((n, s))
            continue
        for span in re.findall(r"`([^`]+)`", ln):
            span = span.strip()
            if span.endswith(");") or (span.startswith("typedef ") and span.endswith(";")):
                out.append((n, span))
    decls = []
    for n, text in out:
        if text.startswith("typedef "):
            decls.append((n, text))
            continue
        head = text.split("(", 1)[0].strip()
        if "=" in text.split("(", 1)[0]:
            continue
        words = re.findall(r"[A-Za-z_]\w*", head)
        if len(words) < 2 or words[0] in STATEMENT_WORDS:
            continue
        if not re.match(r"^(?:[A-Za-z_]\w*\s*\**\s*)+$", head):
            continue
        decls.append((n, text))
    return decls


# ----- the check ----------------------------------------------------------------------------------------


def check(args, bless=False):
    fail = Failures()
    manifest = parse_manifest(args.manifest, fail)
    headers = load_headers(args.include)
    doc_lines = open(args.doc).read().split("\n")

    structs, consts, macros_wanted = [], [], []
    results = {}
    for e in manifest["entries"]:
        h = headers.get(e["header"])
        if h is None:
            fail.add(f"{e['name']}: header {e['header']} does not exist")
            continue
        if e["kind"] == "fn":
            f = h["functions"].get(e["name"])
            if f is None:
                fail.add(f"{e['name']}: function missing from {e['header']}")
                continue
            sig = rust_signature(f)
            results[e["name"]] = sig
            if not bless and e["rest"] != sig:
                fail.add(f"{e['name']}: {e['header']} declares `{sig}`, the manifest says `{e['rest']}`")
        elif e["kind"] == "struct":
            fields = h["structs"].get(e["name"])
            if fields is None:
                fail.add(f"{e['name']}: struct missing from {e['header']}")
                continue
            e["header_fields"] = fields
            if not bless:
                want = [(n, t) for n, _, t in e.get("fields", [])]
                if want != fields:
                    fail.add(
                        f"{e['name']}: {e['header']} has fields "
                        f"{', '.join(f'{n}: {t}' for n, t in fields)}; the manifest says "
                        f"{', '.join(f'{n}: {t}' for n, t in want)}"
                    )
            structs.append({"name": e["name"], "fields": [(n, 0, t) for n, t in fields]})
        elif e["kind"] == "type":
            target = h["types"].get(e["name"])
            if target is None:
                fail.add(f"{e['name']}: type missing from {e['header']}")
                continue
            results[e["name"]] = target
            if not bless and e.get("target") != target:
                fail.add(f"{e['name']}: {e['header']} makes it `{target}`, the manifest says `{e.get('target')}`")
        else:
            if e["name"] not in h["macros"]:
                fail.add(f"{e['name']}: constant missing from {e['header']}")
                continue
            consts.append(e["name"])

    vh = headers.get(VERSION_HEADER, {"macros": {}})
    for mname in VERSION_MACROS:
        if mname not in vh["macros"]:
            fail.add(f"version: macro {mname} missing from {VERSION_HEADER}")
        else:
            macros_wanted.append(mname)

    used = {e["header"] for e in manifest["entries"] if e["header"] in headers}
    if VERSION_HEADER in headers:
        used.add(VERSION_HEADER)
    probe = run_probe(args.include, used, structs, consts, macros_wanted, args.cc, fail)

    for e in manifest["entries"]:
        if e["kind"] == "struct" and "header_fields" in e and probe:
            size = probe.get(("size", e["name"]))
            offs = [(n, probe.get(("offset", f"{e['name']}.{n}")), t) for n, t in e["header_fields"]]
            results[e["name"]] = (size, offs)
            if not bless:
                if size != e.get("size"):
                    fail.add(f"{e['name']}: size is {size}, the manifest says {e.get('size')}")
                for (n, off, _), (mn, moff, _) in zip(offs, e.get("fields", [])):
                    if n == mn and off != moff:
                        fail.add(f"{e['name']}.{n}: offset is {off}, the manifest says {moff}")
        if e["kind"] == "const" and ("const", e["name"]) in probe:
            v = probe[("const", e["name"])]
            results[e["name"]] = v
            if not bless and v != e.get("value"):
                fail.add(f"{e['name']}: value is {v}, the manifest says {e.get('value')}")

    # The version, three ways.
    mv = manifest["version"]
    hv = tuple(probe.get(("const", m)) for m in VERSION_MACROS) if probe else (None, None)
    dv = None
    first = doc_lines[0] if doc_lines else ""
    dm = DOC_VERSION.match(first)
    if not dm:
        fail.add(f"document: the first line must be `Omega Runtime API version: MAJOR.MINOR`, not `{first}`")
    else:
        dv = (int(dm.group(1)), int(dm.group(2)))
    if None not in hv and mv is not None and hv != mv:
        fail.add(f"version: {VERSION_HEADER} says {hv[0]}.{hv[1]}, the manifest says {mv[0]}.{mv[1]}")
    if None not in hv and dv is not None and hv != dv:
        fail.add(f"version: {VERSION_HEADER} says {hv[0]}.{hv[1]}, the document says {dv[0]}.{dv[1]}")
    if mv is not None and dv is not None and mv != dv:
        fail.add(f"version: the manifest says {mv[0]}.{mv[1]}, the document says {dv[0]}.{dv[1]}")
    lm = LIB_VERSION.search(open(args.lib).read()) if os.path.exists(args.lib) else None
    if not lm:
        fail.add(f"version: {args.lib} has no `pub const API_VERSION: (u32, u32) = (MAJOR, MINOR);`")
    else:
        lv = (int(lm.group(1)), int(lm.group(2)))
        if None not in hv and hv != lv:
            fail.add(f"version: {VERSION_HEADER} says {hv[0]}.{hv[1]}, API_VERSION in {args.lib} says {lv[0]}.{lv[1]}")
    enc = probe.get(("const", ENCODED_VERSION)) if probe else None
    if None not in hv and enc is not None and enc != (hv[0] << 16) | hv[1]:
        fail.add(f"version: {ENCODED_VERSION} is {enc:#x}, not (MAJOR << 16) | MINOR of {hv[0]}.{hv[1]}")

    # The document: sections, names, quoted declarations.
    secs = doc_sections(doc_lines)
    h4 = [title for lvl, title, _ in secs if lvl == 4]
    doc_text = "\n".join(doc_lines)
    for e in manifest["entries"]:
        word = re.compile(r"(?<![\w])" + re.escape(e["name"]) + r"(?![\w])")
        if e["tier"] == "STABLE" and not any(word.search(t) for t in h4):
            fail.add(f"{e['name']}: STABLE, but no #### section of the document names it")
        if e["tier"] == "EXPERIMENTAL" and not word.search(doc_text):
            fail.add(f"{e['name']}: EXPERIMENTAL, but the document does not name it")

    internal = internal_names(doc_lines)

    def is_internal(name):
        return any(name == p or (p.endswith("*") and name.startswith(p[:-1])) for p in internal)

    listed = {e["name"] for e in manifest["entries"]}
    for hname, h in headers.items():
        kinds = (("function", h["functions"]), ("struct", h["structs"]), ("type", h["types"]), ("constant", h["macros"]))
        for kind, names in kinds:
            for name in names:
                if kind == "constant" and (name == hname.upper().replace(".", "_") or name in VERSION_MACROS):
                    continue
                if name not in listed and not is_internal(name):
                    fail.add(
                        f"{name}: {kind} of {hname} is neither in the manifest nor in the document's INTERNAL list"
                    )

    all_decls = set()
    for h in headers.values():
        all_decls.update(h["decls"])
    for n, text in quoted_declarations(doc_lines):
        d = norm(text.rstrip(";").strip())
        if d not in all_decls:
            inside = [x for x in all_decls if d in x]
            why = f" (it is only part of `{inside[0]};`)" if inside else ""
            fail.add(f"document:{n}: quoted declaration `{text}` is not a declaration of any header{why}")

    if bless:
        return fail, manifest, results
    return fail, manifest, None


def bless(args):
    fail, manifest, results = check(args, bless=True)
    hard = [f for f in fail.items if "missing from" in f or "did not compile" in f or "does not exist" in f]
    out = []
    for line in manifest["lines"]:
        s = line.strip()
        e = MANIFEST_LINE.match(s)
        if not e:
            out.append(line)
            continue
        kind, name, tier, header, _ = e.groups()
        if name not in results:
            print(f"bless: dropping {kind} {name} (no header has it)")
            continue
        r = results[name]
        if kind == "fn":
            out.append(f"fn {name} {tier} {header} {r}")
        elif kind == "type":
            out.append(f"type {name} {tier} {header} = {r}")
        elif kind == "struct":
            size, offs = r
            fields = ", ".join(f"{n}: {o} {t}" for n, o, t in offs)
            out.append(f"struct {name} {tier} {header} size={size} {{ {fields} }}")
        else:
            out.append(f"const {name} {tier} {header} = {r}")
    with open(args.manifest, "w") as f:
        f.write("\n".join(out).rstrip("\n") + "\n")
    for h in hard:
        print("bless: " + h)
    print(f"bless: refreshed {args.manifest}; review the diff (git diff) before committing it")
    return 1 if any("did not compile" in h for h in hard) else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["check", "bless"])
    ap.add_argument("--include", required=True)
    ap.add_argument("--doc", required=True)
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--lib", required=True, help="the Rust crate root holding API_VERSION (src/lib.rs)")
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    args = ap.parse_args()
    if args.mode == "bless":
        sys.exit(bless(args))
    fail, manifest, _ = check(args)
    n = len(manifest["entries"])
    if fail.items:
        for f in fail.items:
            print("runtime_api_check: FAIL: " + f)
        print(f"runtime_api_check: {len(fail.items)} problem(s) in {n} manifest entries")
        sys.exit(1)
    print(f"runtime_api_check: {n} manifest entries match the headers, the probe and the document")


if __name__ == "__main__":
    main()
