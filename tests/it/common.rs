//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// The real-world corpus directory, or `None` (with a printed notice) when it is absent outside
/// CI. In CI (`CI` set to anything but `false`/empty) a missing corpus panics: the tests that
/// prove compatibility must not silently skip.
pub fn corpus() -> Option<PathBuf> {
    let dir = std::env::var_os("FETCHBENCH_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus"));
    if dir.join("README.md").is_file() {
        return Some(dir);
    }
    let in_ci = std::env::var("CI").map(|v| !v.is_empty() && v != "false").unwrap_or(false);
    if in_ci {
        panic!("corpus not found at {} (set FETCHBENCH_CORPUS); CI must run the corpus tests", dir.display());
    }
    eprintln!("SKIP: corpus not found at {}; set FETCHBENCH_CORPUS to run this test", dir.display());
    None
}

/// Every file under `dir` (recursively) whose name ends with `suffix`, sorted.
pub fn files_with_suffix(dir: &std::path::Path, suffix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().unwrap().to_string_lossy().ends_with(suffix) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}
