//! The layering of `src/`, checked: every `use crate::` / `super::` / child-module path in a source
//! file is an edge from that file to the file that defines the module it names, and
//!
//! - an edge between top-level modules must be allowed by [`ALLOWED`] (the table in `src/lib.rs`'s
//!   docs: `log` <- `read_path` <- `protocol` <- `broker`, `client` on `protocol` and `log::batch`,
//!   `metrics` used by `broker` and `bench` only, `machine` on `read_path`, `bench` on all);
//! - the file graph has no cycle: no two files import each other, directly or through others.
//!
//! A failure names the offending file and line. The checker is a small lexer, not a Rust parser:
//! comments and string literals are blanked first, `use` trees are expanded, and a path resolves to
//! the deepest module that is a file (`a/b.rs` or `a/b/mod.rs`); `mod x { .. }` blocks inside a
//! file are tracked so their `super::` means the file itself. `mod x;` declarations are not edges.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Which top-level modules each top-level module of `src/` may use (besides itself). `main` is the
/// binary (`src/main.rs`), which reaches the library as `fetchbench::`. An entry `a::b` allows
/// only that module of `a` (and its children). `lib` (`src/lib.rs`) only declares the top-level
/// modules: nothing may be imported from it or re-exported through it.
const ALLOWED: &[(&str, &[&str])] = &[
    ("lib", &[]),
    ("metrics", &[]),
    ("log", &[]),
    ("read_path", &["log"]),
    ("machine", &["read_path"]),
    ("protocol", &["read_path", "log"]),
    ("broker", &["protocol", "read_path", "log", "metrics", "machine"]),
    ("client", &["protocol", "log::batch"]),
    ("bench", &["client", "broker", "protocol", "read_path", "log", "metrics", "machine"]),
    ("main", &["bench", "client", "broker", "protocol", "read_path", "log", "metrics", "machine"]),
];

/// One reference from a source file to a module of the crate.
#[derive(Debug, Clone)]
struct Edge {
    from: PathBuf,
    line: usize,
    to: PathBuf,
    /// The path as written, for the message.
    path: String,
}

/// A file of the crate: its module path (`["log", "batch"]` for `src/log/batch/mod.rs`).
struct SourceFile {
    rel: PathBuf,
    module: Vec<String>,
    text: String,
}

/// Reads every `.rs` file under `src`, with its module path.
fn source_files(src: &Path) -> Vec<SourceFile> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap().to_path_buf();
            let mut module: Vec<String> =
                rel.with_extension("").components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                module.pop();
            }
            if module == ["main"] {
                module = vec!["<main>".into()];
            }
            let text = std::fs::read_to_string(&path).unwrap();
            out.push(SourceFile { rel, module, text });
        }
    }
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    out
}

/// Blanks comments, string and char literals (keeping newlines), so only code is scanned.
fn blank_non_code(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && (i == 0 || !is_ident(b[i - 1]) || (matches!(b[i - 1], 'b' | 'c') && (i == 1 || !is_ident(b[i - 2]))))
        {
            // Raw string r"..." / r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            for &ch in &b[i..j.min(b.len())] {
                out.push(blank(ch));
            }
            i = j;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < b.len() {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                let mut j = i + 2;
                while j < b.len() && b[j] != '\'' {
                    j += 1;
                }
                for _ in i..=j.min(b.len() - 1) {
                    out.push(' ');
                }
                i = j + 1;
            } else if b.get(i + 2) == Some(&'\'') {
                out.push_str("   ");
                i += 3;
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Expands a `use` tree (`a::{b, c::{d as e, *}}`) into its paths.
fn expand_use_tree(tree: &str) -> Vec<Vec<String>> {
    fn parse(s: &[char], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let mut path = prefix.to_vec();
        loop {
            skip_ws(s, i);
            if *i >= s.len() {
                break;
            }
            if s[*i] == '{' {
                *i += 1;
                loop {
                    skip_ws(s, i);
                    if *i < s.len() && s[*i] == '}' {
                        *i += 1;
                        break;
                    }
                    parse(s, i, &path, out);
                    skip_ws(s, i);
                    if *i < s.len() && s[*i] == ',' {
                        *i += 1;
                    }
                    if *i >= s.len() {
                        break;
                    }
                }
                return;
            }
            let start = *i;
            while *i < s.len() && (is_ident(s[*i]) || s[*i] == '*') {
                *i += 1;
            }
            let seg: String = s[start..*i].iter().collect();
            if !seg.is_empty() && seg != "self" && seg != "*" {
                path.push(seg);
            }
            skip_ws(s, i);
            if *i + 1 < s.len() && s[*i] == ':' && s[*i + 1] == ':' {
                *i += 2;
                continue;
            }
            // `as name`, then the end of this branch.
            while *i < s.len() && s[*i] != ',' && s[*i] != '}' {
                *i += 1;
            }
            out.push(path);
            return;
        }
        out.push(path);
    }
    fn skip_ws(s: &[char], i: &mut usize) {
        while *i < s.len() && s[*i].is_whitespace() {
            *i += 1;
        }
    }
    let chars: Vec<char> = tree.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    parse(&chars, &mut i, &[], &mut out);
    out
}

/// The inline `mod name { .. }` blocks of a file, as (start, end, name) byte ranges of `code`.
fn inline_modules(code: &str) -> Vec<(usize, usize, String)> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut search = 0;
    while let Some(found) = code[search..].find("mod ") {
        let at = search + found;
        search = at + 4;
        if at > 0 && is_ident(bytes[at - 1] as char) {
            continue;
        }
        let rest = &code[at + 4..];
        let name: String = rest.trim_start().chars().take_while(|c| is_ident(*c)).collect();
        let after = rest.trim_start()[name.len()..].trim_start();
        if name.is_empty() || !after.starts_with('{') {
            continue;
        }
        let open = code.len() - after.len();
        let mut depth = 0;
        let mut end = code.len();
        for (k, ch) in code[open..].char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + k;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push((open, end, name));
    }
    out
}

/// The module a position of a file is in: the file's module plus the inline modules around it.
fn module_at(file_module: &[String], inline: &[(usize, usize, String)], pos: usize) -> Vec<String> {
    let mut m = file_module.to_vec();
    for (start, end, name) in inline {
        if *start < pos && pos < *end {
            m.push(name.clone());
        }
    }
    m
}

/// Resolves a path used in a file to the file that defines the deepest module it names, or `None`
/// for paths outside the crate.
fn resolve(
    files: &BTreeMap<Vec<String>, PathBuf>,
    file_module: &[String],
    here: &[String],
    path: &[String],
) -> Option<PathBuf> {
    let (mut base, rest): (Vec<String>, &[String]) = match path.first().map(String::as_str) {
        Some("crate") | Some("fetchbench") => (Vec::new(), &path[1..]),
        Some("super") => {
            let mut b = here.to_vec();
            let mut k = 0;
            while path.get(k).map(String::as_str) == Some("super") {
                b.pop();
                k += 1;
            }
            (b, &path[k..])
        }
        Some("self") => (here.to_vec(), &path[1..]),
        Some(first) => {
            // A child module of the current one (2018-edition relative path).
            let mut child = here.to_vec();
            child.push(first.to_string());
            if !files.contains_key(&child) {
                return None;
            }
            (here.to_vec(), path)
        }
        None => return None,
    };
    if file_module == ["<main>"] && path.first().map(String::as_str) != Some("fetchbench") {
        return None;
    }
    // The deepest module on the path that is a file; inline modules live in their file.
    let mut deepest = None;
    let mut probe = base.clone();
    if let Some(f) = files.get(&probe) {
        deepest = Some(f.clone());
    } else if probe.len() >= file_module.len() && probe.starts_with(file_module) {
        deepest = files.get(file_module).cloned();
    }
    for seg in rest {
        probe.push(seg.clone());
        match files.get(&probe) {
            Some(f) => {
                deepest = Some(f.clone());
                base = probe.clone();
            }
            None => break,
        }
    }
    let _ = base;
    deepest
}

/// Every edge of the crate under `src`.
fn edges(src: &Path) -> Vec<Edge> {
    let files_list = source_files(src);
    let files: BTreeMap<Vec<String>, PathBuf> = files_list.iter().map(|f| (f.module.clone(), f.rel.clone())).collect();
    let mut out = Vec::new();
    for f in &files_list {
        let code = blank_non_code(&f.text);
        let inline = inline_modules(&code);
        let line_of = |pos: usize| code[..pos].matches('\n').count() + 1;
        let mut push = |pos: usize, path: Vec<String>| {
            let here = module_at(&f.module, &inline, pos);
            if let Some(to) = resolve(&files, &f.module, &here, &path) {
                if to != f.rel {
                    out.push(Edge { from: f.rel.clone(), line: line_of(pos), to, path: path.join("::") });
                }
            }
        };
        // `use` declarations (any visibility).
        let mut use_ranges = Vec::new();
        let mut search = 0;
        while let Some(found) = code[search..].find("use") {
            let at = search + found;
            search = at + 3;
            let prev = code[..at].chars().next_back();
            let next = code[at + 3..].chars().next();
            if prev.is_some_and(is_ident) || !next.is_some_and(char::is_whitespace) {
                continue;
            }
            let Some(semi) = code[at..].find(';') else { break };
            let tree = &code[at + 3..at + semi];
            for path in expand_use_tree(tree) {
                push(at, path);
            }
            use_ranges.push((at, at + semi));
        }
        // Paths in code: `crate::a::b`, `super::x`, `child::y`, `fetchbench::z` (main).
        let chars: Vec<(usize, char)> = code.char_indices().collect();
        let mut k = 0;
        while k < chars.len() {
            let (pos, c) = chars[k];
            if !(c.is_ascii_alphabetic() || c == '_') || (k > 0 && (is_ident(chars[k - 1].1) || chars[k - 1].1 == ':'))
            {
                k += 1;
                continue;
            }
            if use_ranges.iter().any(|(s, e)| *s <= pos && pos < *e) {
                k += 1;
                continue;
            }
            let mut path = Vec::new();
            let mut j = k;
            loop {
                let start = j;
                while j < chars.len() && is_ident(chars[j].1) {
                    j += 1;
                }
                path.push(chars[start..j].iter().map(|(_, ch)| *ch).collect::<String>());
                if j + 2 < chars.len() && chars[j].1 == ':' && chars[j + 1].1 == ':' && is_ident(chars[j + 2].1) {
                    j += 2;
                } else {
                    break;
                }
            }
            if path.len() >= 2 {
                push(pos, path);
            }
            k = j.max(k + 1);
        }
    }
    out
}

/// The top-level module of a file (`log` for `log/batch/mod.rs`, `main` for `main.rs`).
fn layer(rel: &Path) -> String {
    let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
    first.trim_end_matches(".rs").to_string()
}

/// The violations of the layering under `src`, one message each.
fn violations(src: &Path) -> Vec<String> {
    let edges = edges(src);
    let mut problems = Vec::new();
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    for e in &edges {
        let (from, to) = (layer(&e.from), layer(&e.to));
        if from == to && from != "lib" {
            continue;
        }
        let to_module = e.to.with_extension("").to_string_lossy().replace('/', "::");
        let permitted = |entry: &&str| {
            let entry_path = entry.replace("::", "/");
            *entry == to || (entry.contains("::") && (e.to.starts_with(&entry_path) || to_module == *entry))
        };
        match allowed.get(from.as_str()) {
            Some(_) if to == "lib" || from == "lib" => problems.push(format!(
                "src/{}:{}: `{}`: src/lib.rs only declares the top-level modules; import from the module that defines the item",
                e.from.display(),
                e.line,
                e.path
            )),
            Some(ok) if ok.iter().any(permitted) => {}
            Some(_) => problems.push(format!(
                "src/{}:{}: `{from}` may not use `{to}` (`{}`): layering is {}",
                e.from.display(),
                e.line,
                e.path,
                "log <- read_path <- protocol <- broker; client on protocol and log::batch; metrics for broker and bench; bench on all"
            )),
            None => problems.push(format!(
                "src/{}:{}: top-level module `{from}` is not in the layering table (tests/it/layering.rs ALLOWED)",
                e.from.display(),
                e.line
            )),
        }
    }
    // `#[path]` modules and `include!` of source would hide an edge from this check.
    for f in source_files(src) {
        let code = blank_non_code(&f.text);
        for needle in ["#[path", "include!("] {
            for (at, _) in code.match_indices(needle) {
                let line = code[..at].matches('\n').count() + 1;
                problems.push(format!(
                    "src/{}:{line}: `{needle}` hides a module edge from the layering check; declare modules by their file",
                    f.rel.display()
                ));
            }
        }
    }
    // File cycles: Tarjan's strongly connected components over the file graph.
    let mut graph: BTreeMap<&Path, BTreeSet<&Path>> = BTreeMap::new();
    for e in &edges {
        graph.entry(&e.from).or_default().insert(&e.to);
        graph.entry(&e.to).or_default();
    }
    for component in strongly_connected(&graph) {
        if component.len() < 2 {
            continue;
        }
        let members: BTreeSet<&Path> = component.iter().copied().collect();
        let mut lines = Vec::new();
        for e in &edges {
            if members.contains(e.from.as_path()) && members.contains(e.to.as_path()) {
                let line = format!("  src/{}:{} -> src/{} (`{}`)", e.from.display(), e.line, e.to.display(), e.path);
                if !lines.contains(&line) {
                    lines.push(line);
                }
            }
        }
        problems.push(format!(
            "files import each other (a cycle of {} files): {}\n{}",
            component.len(),
            component.iter().map(|p| format!("src/{}", p.display())).collect::<Vec<_>>().join(", "),
            lines.join("\n")
        ));
    }
    problems
}

fn strongly_connected<'a>(graph: &BTreeMap<&'a Path, BTreeSet<&'a Path>>) -> Vec<Vec<&'a Path>> {
    struct State<'a> {
        index: BTreeMap<&'a Path, usize>,
        low: BTreeMap<&'a Path, usize>,
        on_stack: BTreeSet<&'a Path>,
        stack: Vec<&'a Path>,
        next: usize,
        out: Vec<Vec<&'a Path>>,
    }
    fn visit<'a>(v: &'a Path, g: &BTreeMap<&'a Path, BTreeSet<&'a Path>>, s: &mut State<'a>) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        for &w in &g[v] {
            if !s.index.contains_key(w) {
                visit(w, g, s);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                comp.push(w);
                if w == v {
                    break;
                }
            }
            comp.sort();
            s.out.push(comp);
        }
    }
    let mut s = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        on_stack: BTreeSet::new(),
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for &v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(v, graph, &mut s);
        }
    }
    s.out
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn src_follows_the_layering_table_and_has_no_file_cycles() {
    let problems = violations(&src_dir());
    assert!(problems.is_empty(), "{} layering problems:\n{}", problems.len(), problems.join("\n"));
}

/// Copies `src/` and reintroduces what the layering forbids; the checker must name each file and line.
#[test]
fn reintroduced_upward_import_and_cycle_are_caught() {
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("src");
    copy_dir(&src_dir(), &copy);
    // An upward import: the storage engine reaching into the harness.
    let segment = copy.join("log/segment.rs");
    let text = std::fs::read_to_string(&segment).unwrap();
    let doctored = format!("{text}\n#[allow(unused_imports)]\nuse crate::bench::histogram;\n");
    std::fs::write(&segment, &doctored).unwrap();
    let bad_line = doctored.lines().position(|l| l == "use crate::bench::histogram;").unwrap() + 1;
    // A cycle: two read paths importing each other.
    for (file, other) in [("read_path/copy.rs", "mmap"), ("read_path/mmap.rs", "copy")] {
        let p = copy.join(file);
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::write(&p, format!("{text}\n#[allow(unused_imports)]\nuse super::{other}::*;\n")).unwrap();
    }
    // Forms a reviewer used to slip past an earlier version of the checker.
    let append = |file: &str, text: &str| {
        let p = copy.join(file);
        let before = std::fs::read_to_string(&p).unwrap();
        std::fs::write(&p, format!("{before}\n{text}\n")).unwrap();
    };
    // Laundering through lib.rs.
    append("lib.rs", "pub use bench::stats::estimate;");
    append("log/config.rs", "#[allow(unused_imports)]\nuse crate::estimate;");
    // The client may read record batches, not the rest of the storage engine.
    append("client/admin.rs", "#[allow(unused_imports)]\nuse crate::log::manager::LogManager;");
    // A byte raw string ending in a backslash must not hide the code after it.
    append("log/checkpoint.rs", "const RAW: &[u8] = br\"C:\\\";\n#[allow(unused_imports)]\nuse crate::bench::compare;");
    // A #[path] module would hide its file from the check.
    append("log/dump.rs", "#[path = \"../bench/stats.rs\"]\nmod smuggled;");
    let problems = violations(&copy);
    let joined = problems.join("\n");
    for (file, what) in [
        ("src/lib.rs:", "src/lib.rs only declares the top-level modules"),
        ("src/log/config.rs:", "src/lib.rs only declares the top-level modules"),
        ("src/client/admin.rs:", "`client` may not use `log`"),
        ("src/log/checkpoint.rs:", "`log` may not use `bench`"),
        ("src/log/dump.rs:", "`#[path` hides a module edge"),
    ] {
        assert!(
            problems.iter().any(|p| p.starts_with(file) && p.contains(what)),
            "{file} {what}: not reported:\n{joined}"
        );
    }
    assert!(
        joined.contains(&format!("src/log/segment.rs:{bad_line}: `log` may not use `bench`")),
        "the upward import was not named with its file and line:\n{joined}"
    );
    assert!(
        problems.iter().any(|p| p.contains("files import each other")
            && p.contains("src/read_path/copy.rs:")
            && p.contains("src/read_path/mmap.rs:")),
        "the copy <-> mmap cycle was not reported:\n{joined}"
    );
}

#[test]
fn use_trees_expand_to_every_path() {
    let paths = expand_use_tree("crate::log::{self, batch::{Compression as C, RecordBatch}, segment::*}");
    let joined: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        joined,
        ["crate::log", "crate::log::batch::Compression", "crate::log::batch::RecordBatch", "crate::log::segment"]
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
