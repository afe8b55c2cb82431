//! `gpuship report` over a lake of stats mode, the daemon's default, written by the real agent:
//! launches, `cuMemAlloc_v2` and `cuCtxSynchronize` added up in the kernel as `cuda_stats` rows,
//! and with `slow_call_ns = 1` every one of those calls a `cuda` row as well. The report must
//! count each call once, exactly as the agent's own run summary does (docs/views.md), and as
//! docs/rca.md's DuckDB query of the same rule does.

use chrono::{SubsecRound, Utc};

use super::run_report;
use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::cuda_stats::stats_config;
use crate::support::lake::{duckdb, rca_query};
use crate::support::Fixtures;

/// The cells of the function row of `function`, as text.
fn cells(html: &str, function: &str) -> Vec<String> {
    let row = super::row(
        html,
        &format!("<tr class=\"function\" data-function=\"{function}\">"),
    );
    row.split("<td")
        .skip(1)
        .map(|cell| {
            let start = cell.find('>').expect("cell") + 1;
            cell[start..cell.find("</td>").expect("cell end")].to_string()
        })
        .collect()
}

#[test]
fn stats_mode_calls_count_once_as_the_run_summary_counts_them() {
    let _alone = support::exclusive();
    let since = Utc::now().trunc_subsecs(0) - chrono::Duration::seconds(60);
    let fixtures = Fixtures::build();
    let data = data_dir();
    let agent = Agent::start(
        &stats_config(&fixtures, data.path(), "slow_call_ns = 1\n"),
        &[],
    );
    fixtures.run_workload(
        &["sequence", "3"],
        &[("FAKE_CUDA_RESULTS", "cuCtxSynchronize=700")],
    );
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    // 3 x 28 calls, every one a row (slow_call_ns = 1); 18 of them also aggregated: 9
    // launches, 6 allocations (3 out of memory), 3 failed synchronizations.
    assert_eq!(stopped.assert_nothing_lost("cuda", "cuda"), 84);
    assert_eq!(
        stopped.ring("cuda")["aggregated"],
        18,
        "{}",
        stopped.outcome
    );
    let summary = &stopped.outcome["summary"];

    let until = Utc::now().trunc_subsecs(0) + chrono::Duration::seconds(60);
    let page = data.path().join("report.html");
    let stderr = run_report(&since.to_rfc3339(), &until.to_rfc3339(), data.path(), &page);
    // Not 96: the 12 aggregated successes are rows too, and count once, from cuda_stats.
    assert!(
        stderr.contains(
            "0 XIDs in 0 incident(s), 84 CUDA calls (6 failed), 12 of them from cuda_stats"
        ),
        "{stderr}"
    );
    let html = std::fs::read_to_string(&page).unwrap();
    let calls = summary["calls"].as_object().expect("summary calls");
    assert_eq!(html.matches("<tr class=\"function\"").count(), calls.len());
    for (function, count) in calls {
        let (errors, aggregated) = match function.as_str() {
            "cuLaunchKernel" | "cuLaunchKernelEx" | "cuLaunchKernel_ptsz" => ("0", "3"),
            "cuMemAlloc_v2" => ("3", "3"),
            // Every synchronization failed: rows only, none counted from an aggregate.
            "cuCtxSynchronize" => ("3", "—"),
            _ => ("0", "—"),
        };
        let cells = cells(&html, function);
        assert_eq!(
            (cells[1].as_str(), cells[3].as_str(), cells[7].as_str()),
            (count.to_string().as_str(), errors, aggregated),
            "{function}: {cells:?}"
        );
    }
    assert_eq!(
        summary["failures"]["cuMemAlloc_v2 CUDA_ERROR_OUT_OF_MEMORY"], 3,
        "{summary}"
    );

    // docs/rca.md's query of the same rule, in DuckDB, gives the page's numbers.
    let location = data.path().display().to_string();
    let answer = duckdb(&rca_query("stats_calls", "gpuship-data", &location));
    assert_eq!(answer.len(), calls.len(), "{answer:?}");
    for r in &answer {
        let cells = cells(&html, &r[0]);
        let aggregated = if r[3] == "0" { "—" } else { r[3].as_str() };
        assert_eq!(
            (cells[1].as_str(), cells[3].as_str(), cells[7].as_str()),
            (r[1].as_str(), r[2].as_str(), aggregated),
            "{r:?}"
        );
    }
}
