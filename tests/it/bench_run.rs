//! `fetchbench run` on a tiny catch-up workload (a few MiB, 2 partitions, copy and sendfile):
//! exit 0, a results JSON that validates with the right read paths and record counts, and the
//! CSV beside it.

use std::path::PathBuf;
use std::process::Command;

use fetchbench::bench::results::Results;

#[test]
fn tiny_catch_up_workload_writes_valid_results() {
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("tiny.toml");
    std::fs::write(
        &workload,
        r#"
name = "tiny"
partitions = 2
record_size = "1KiB"
backlog = "4MiB"
consumers_per_group = 2
phases = ["catch_up"]
read_paths = ["copy", "sendfile"]
warmup = 0
"#,
    )
    .unwrap();
    let results_dir = dir.path().join("results");
    let out = Command::new(env!("CARGO_BIN_EXE_fetchbench"))
        .arg("run")
        .arg(&workload)
        .arg("--results-dir")
        .arg(&results_dir)
        .output()
        .unwrap();
    let text =
        format!("stdout:\n{}\nstderr:\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("MB/s") && stdout.contains("copy (catch_up)"), "{text}");
    let files: Vec<PathBuf> = std::fs::read_dir(&results_dir).unwrap().map(|e| e.unwrap().path()).collect();
    let json = files.iter().find(|p| p.extension().is_some_and(|e| e == "json")).expect("a JSON file");
    assert!(json.file_name().unwrap().to_string_lossy().ends_with("-tiny.json"), "{json:?}");
    assert!(json.with_extension("csv").is_file(), "the CSV beside the JSON: {files:?}");
    let results = Results::from_json(&std::fs::read_to_string(json).unwrap()).unwrap();
    let paths: Vec<(&str, &str)> = results.paths.iter().map(|p| (p.read_path.as_str(), p.phase.as_str())).collect();
    assert_eq!(paths, [("copy", "catch_up"), ("sendfile", "catch_up")]);
    for p in &results.paths {
        assert_eq!(p.records, 4096, "4 MiB of 1 KiB records, read once: {p:?}");
        assert!(p.bytes >= 4 << 20 && p.mb_per_sec > 0.0 && p.seconds > 0.0, "{p:?}");
        assert!(p.fetch_latency.summary.count > 0 && p.rebalance_ms.is_some(), "{p:?}");
    }
    assert_eq!(results.workload().unwrap().partitions, 2);
    let csv = std::fs::read_to_string(json.with_extension("csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
}
