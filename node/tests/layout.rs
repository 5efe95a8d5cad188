//! The shape of the code: no import cycle between the source files of `node/src`,
//! `client/src`, `cli/src` and `bench/workload/src`, so that every arrow runs one way (core
//! <- store <- server <- node; between the crates, Cargo keeps the client library <- the
//! workload <- the CLI); and no arrow up out of the core: `node/src/core` (the pure
//! lease table: no I/O, no clock) imports only from itself, never from the store, the server
//! or the clock. Reads the sources as text: each `use crate::...`,
//! `use super::...` and inline `crate::a::b` path is an arrow from its file to the file of the
//! longest module it names. `mod` and `pub use` lines are wiring, not arrows (a parent
//! re-exporting a child depends on nothing), and a file's closing `#[cfg(test)] mod ... {}`
//! is left out (clippy keeps test modules last). Run it alone with
//! `cargo test -p baton-node --test layout -- --nocapture`; it prints every arrow it found
//! with `BATON_LAYOUT_ARROWS=1`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a source file under `src`: `store/mod.rs` is `store`,
/// `core/table.rs` is `core::table`, `lib.rs` and `main.rs` are the root.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The source without its closing test module.
fn without_tests(text: &str) -> &str {
    let mut at = 0;
    while let Some(found) = text[at..].find("#[cfg(test)]\nmod ") {
        let start = at + found;
        let line_end = text[start + 13..]
            .find('\n')
            .map_or(text.len(), |e| start + 13 + e);
        if text[start..line_end].trim_end().ends_with('{') {
            return &text[..start];
        }
        at = line_end;
    }
    text
}

/// The paths a `use` tree names, braces expanded: `a::{b, c::{d, e}}` is `a::b`, `a::c::d`,
/// `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.to_owned()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, ch) in inner.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
        .into_iter()
        .filter(|item| !item.trim().is_empty())
        .flat_map(|item| {
            expand(item)
                .into_iter()
                .map(move |p| format!("{prefix}{p}"))
        })
        .collect()
}

/// The module paths a file names, made absolute.
fn named_paths(module: &[String], text: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut push = |path: &str| {
        let segments: Vec<&str> = path
            .split("::")
            .map(|s| s.trim().split(' ').next().unwrap_or(""))
            .collect();
        let mut absolute: Vec<String> = match segments.first() {
            Some(&"crate") => Vec::new(),
            Some(&"super") => module[..module.len().saturating_sub(1)].to_vec(),
            _ => return,
        };
        let mut rest = &segments[1..];
        while rest.first() == Some(&"super") {
            absolute.pop();
            rest = &rest[1..];
        }
        absolute.extend(rest.iter().map(|s| s.to_string()));
        paths.push(absolute);
    };
    let text = without_tests(text);
    let mut statement = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        if !statement.is_empty() || trimmed.starts_with("use ") {
            statement.push_str(trimmed);
            statement.push(' ');
            if trimmed.contains(';') {
                let tree = statement.trim_start_matches("use ").trim_end();
                for path in expand(tree.trim_end_matches(';')) {
                    push(&path);
                }
                statement.clear();
            }
            continue;
        }
        if trimmed.starts_with("pub use ") || trimmed.starts_with("pub(crate) use ") {
            continue;
        }
        let mut rest = trimmed;
        while let Some(at) = rest.find("crate::") {
            let before = rest[..at].chars().last();
            let path: String = rest[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            if !before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                push(&path);
            }
            rest = &rest[at + 7..];
        }
    }
    paths
}

/// The arrows between the files of each `src` folder: file -> files it uses.
fn arrows(srcs: &[PathBuf]) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for src in srcs {
        let mut files = Vec::new();
        rust_files(src, &mut files);
        let modules: BTreeMap<Vec<String>, String> = files
            .iter()
            .map(|f| (module_of(src, f), f.display().to_string()))
            .collect();
        for file in &files {
            let module = module_of(src, file);
            let name = file.display().to_string();
            let text = std::fs::read_to_string(file).unwrap();
            let targets = graph.entry(name.clone()).or_insert_with(BTreeSet::new);
            for path in named_paths(&module, &text) {
                // The longest prefix of the path that is a module of this folder.
                let target = (1..=path.len()).rev().find_map(|n| modules.get(&path[..n]));
                if let Some(target) = target.filter(|t| **t != name) {
                    targets.insert(target.clone());
                }
            }
        }
    }
    graph
}

/// The cycles of `graph` (its strongly connected components of more than one file).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Tarjan's algorithm, iterative enough for a few hundred files.
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !state.index.contains_key(v.as_str()) {
            visit(&mut state, v);
        }
    }
    state.found
}

fn srcs() -> Vec<PathBuf> {
    let node = Path::new(env!("CARGO_MANIFEST_DIR"));
    [
        "src",
        "../client/src",
        "../cli/src",
        "../bench/workload/src",
    ]
    .iter()
    .map(|dir| node.join(dir))
    .collect()
}

#[test]
fn no_source_file_of_node_client_or_cli_is_in_an_import_cycle() {
    let graph = arrows(&srcs());
    if std::env::var_os("BATON_LAYOUT_ARROWS").is_some() {
        for (file, targets) in &graph {
            for target in targets {
                println!("{file} -> {target}");
            }
        }
    }
    let found = cycles(&graph);
    assert!(
        found.is_empty(),
        "import cycles (each: files that reach each other): {found:#?}"
    );
}

/// The arrows that leave `node/src/core/` for another file of the node.
fn arrows_out_of_the_core(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<(String, String)> {
    let in_core = |f: &str| f.contains("/node/src/core/");
    graph
        .iter()
        .filter(|(file, _)| in_core(file))
        .flat_map(|(file, targets)| {
            targets
                .iter()
                .filter(|t| !in_core(t))
                .map(move |t| (file.clone(), t.clone()))
        })
        .collect()
}

#[test]
fn the_core_imports_nothing_from_the_store_the_server_or_the_clock() {
    let graph = arrows(&srcs());
    let up = arrows_out_of_the_core(&graph);
    assert!(
        up.is_empty(),
        "arrows up out of the pure core (it must import only from itself): {up:#?}"
    );
    // The check sees the core's files and their arrows among themselves, and would see one
    // going up.
    let core_arrows = graph
        .iter()
        .filter(|(f, _)| f.contains("/node/src/core/"))
        .map(|(_, ts)| ts.len())
        .sum::<usize>();
    assert!(core_arrows > 5, "only {core_arrows} arrows inside the core");
    let mut with_up = graph.clone();
    let table = graph
        .keys()
        .find(|f| f.ends_with("node/src/core/table.rs"))
        .expect("core/table.rs is read")
        .clone();
    let store = graph
        .keys()
        .find(|f| f.ends_with("node/src/store/mod.rs"))
        .expect("store/mod.rs is read")
        .clone();
    with_up.get_mut(&table).unwrap().insert(store.clone());
    assert_eq!(arrows_out_of_the_core(&with_up), vec![(table, store)]);
}

#[test]
fn the_cycle_finder_finds_a_cycle_where_there_is_one() {
    // The check above cannot pass by seeing nothing: the arrows it reads are there, and a
    // cycle among them would be found.
    let graph = arrows(&srcs());
    let arrows_seen: usize = graph.values().map(BTreeSet::len).sum();
    assert!(arrows_seen > 100, "only {arrows_seen} arrows read");
    let has = |from: &str, to: &str| {
        graph
            .iter()
            .any(|(f, ts)| f.ends_with(from) && ts.iter().any(|t| t.ends_with(to)))
    };
    assert!(has("store/state_machine.rs", "core/mod.rs"));
    assert!(has("src/admin.rs", "src/metrics.rs"));
    let mut with_cycle = graph.clone();
    let (a, b) = ("x/a.rs".to_owned(), "x/b.rs".to_owned());
    with_cycle.insert(a.clone(), [b.clone()].into());
    with_cycle.insert(b.clone(), [a.clone()].into());
    assert_eq!(cycles(&with_cycle), vec![vec![a, b]]);
}

/// Most lines of the README: what baton is, the guarantees in brief, the two commands, one
/// walkthrough and links; everything else is in `docs/`, by reader.
const README_LINES_MAX: usize = 250;

#[test]
fn the_readme_stays_short_and_nothing_cites_a_file_outside_the_repo() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= README_LINES_MAX,
        "README.md has {lines} lines, at most {README_LINES_MAX}: move the detail into docs/"
    );
    // What a reader of the repo needs of the specification is in docs/: no document or
    // source file points outside the repository for it.
    let mut files = Vec::new();
    for dir in [
        "node/src",
        "client/src",
        "cli/src",
        "cli/tests",
        "docs",
        "deploy",
        "jepsen-tests",
        "bench/src",
        "bench/workload/src",
        "python",
    ] {
        let mut found = Vec::new();
        collect(&root.join(dir), &mut found);
        files.extend(found);
    }
    files.push(root.join("README.md"));
    assert!(files.len() > 100, "only {} files read", files.len());
    let outside: Vec<String> = files
        .iter()
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            text.contains("../shared/") || text.contains("SPEC.md")
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        outside.is_empty(),
        "files citing what is outside the repo: {outside:#?}"
    );
}

/// Every `.rs`, `.md` and `.py` file under `dir` (none of a build's output).
fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "target" | ".venv" | "__pycache__" | "build") {
                collect(&path, out);
            }
        } else if path
            .extension()
            .is_some_and(|e| e == "rs" || e == "md" || e == "py")
        {
            out.push(path);
        }
    }
}

/// Most lines of a source file (its closing test module not counted; test files apart):
/// a longer one is split by responsibility.
const SOURCE_LINES_MAX: usize = 800;

#[test]
fn no_source_file_is_over_800_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for dir in [
        "node/src",
        "client/src",
        "cli/src",
        "jepsen-tests/src",
        "bench/src",
        "bench/workload/src",
        "proto/src",
        "deploy",
        "python/src",
    ] {
        collect(&root.join(dir), &mut files);
    }
    let sources: Vec<&PathBuf> = files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs" || e == "py"))
        .filter(|f| {
            let name = f.file_name().unwrap().to_string_lossy();
            !name.ends_with("_tests.rs")
                && name != "tests.rs"
                // The Python stubs protoc-gen writes when the wheel is built.
                && !name.ends_with("_pb2.py")
                && !name.ends_with("_pb2_grpc.py")
        })
        .filter(|f| !f.components().any(|c| c.as_os_str() == "tests"))
        .collect();
    assert!(
        sources.len() > 100,
        "only {} source files read",
        sources.len()
    );
    let long: Vec<String> = sources
        .iter()
        .filter_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            let lines = without_tests(&text).lines().count();
            (lines > SOURCE_LINES_MAX).then(|| format!("{}: {lines} lines", f.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "source files over {SOURCE_LINES_MAX} lines (split them by responsibility): {long:#?}"
    );
}

/// What the `baton` CLI needs and a program using the client library does not: none of it
/// may reach `baton-client`'s normal dependencies (`cargo tree -p baton-client -e normal`).
const CLI_ONLY_CRATES: [&str; 8] = [
    "clap",
    "clap_complete",
    "axum",
    "rmcp",
    "schemars",
    "globset",
    "nix",
    "tracing-subscriber",
];

#[test]
fn the_client_library_brings_none_of_the_clis_dependencies() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let tree = |package: &str| -> BTreeSet<String> {
        let out = std::process::Command::new(&cargo)
            .args([
                "tree",
                "--offline",
                "-e",
                "normal",
                "--prefix",
                "none",
                "-p",
                package,
            ])
            .current_dir(root)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cargo tree -p {package}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter_map(|line| line.split_whitespace().next())
            .map(str::to_owned)
            .collect()
    };
    let client = tree("baton-client");
    assert!(client.contains("tonic"), "not a tree: {client:?}");
    let found: Vec<&str> = CLI_ONLY_CRATES
        .into_iter()
        .filter(|name| client.contains(*name))
        .collect();
    assert!(found.is_empty(), "baton-client depends on {found:?}");
    // The names are right: the CLI does use each of them.
    let cli = tree("baton-cli");
    let missing: Vec<&str> = CLI_ONLY_CRATES
        .into_iter()
        .filter(|name| !cli.contains(*name))
        .collect();
    assert!(missing.is_empty(), "baton-cli no longer uses {missing:?}");
}
