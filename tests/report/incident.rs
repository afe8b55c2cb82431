//! The report's incident section on a real agent's lake: the stand-in workload (`incident`
//! mode) allocates 4 MiB on device 0, launches a kernel with a hostile name that a
//! synchronisation sees finish, copies, launches `wild_write(int*)`, and fails an allocation
//! out of memory; an XID 31 naming it comes through /dev/kmsg. The agent runs with the fleet's
//! default stats functions, so the flight recorder writes the launches and the copy under the
//! XID's incident and the XID lists the two kernels as suspects. In headless Chromium's DOM the
//! incident names its GPU (UUID, bus id, index), the XID with its action, the process, the
//! suspects in order with `wild_write(int*)` highlighted, the three recorded calls, the
//! out-of-memory failure with its largest allocations and the memory held; the hostile name is
//! text. `export-trace` of the same lake puts the suspects on the GPU's track.

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::Duration;

use chrono::{SubsecRound, Utc};
use serde_json::Value;

use super::{blobs, chromium, decode_png, rgb, run_report};
use crate::support;
use crate::support::agent::{binary, data_dir, Agent};
use crate::support::lake::fake_gpu_dir;
use crate::support::metrics::scrape;
use crate::support::{kmsg, wait_until, Fixtures};

const BUS: &str = "0000:d5:00.0";
/// The stand-in's UUID of device 0 (fake_devices.c).
const UUID: &str = "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f";
/// workload_incident.c's hostile kernel name as the DOM serialises the page's text: markup
/// escaped, the escape character replaced, quotes and newline kept.
const HOSTILE_DOM: &str = "&lt;script&gt;alert(1)&lt;/script&gt;\n\u{fffd}[31mevil\"'";
/// The same name as the trace's JSON holds it.
const HOSTILE: &str = "<script>alert(1)</script>\n\u{1b}[31mevil\"'";
/// The highlight of the first suspect (report/html.rs's stylesheet).
const HIGHLIGHT: &str = "#ffd54f";

/// A suspect's item: highlighted, kernel, its `completed` text, `data-completed="true"`.
type Suspect<'a> = (bool, Option<&'a str>, Option<&'a str>, Option<&'a str>);

/// The text from `start` to the first `end` after it.
fn between<'a>(text: &'a str, start: &str, end: &str) -> &'a str {
    let at = text.find(start).unwrap_or_else(|| panic!("no {start:?}"));
    let len = text[at..].find(end).unwrap_or_else(|| panic!("no {end:?}"));
    &text[at..at + len]
}

/// Every piece of `text` from an occurrence of `start` to the next `end`.
fn all<'a>(text: &'a str, start: &str, end: &str) -> Vec<&'a str> {
    text.match_indices(start)
        .map(|(at, _)| &text[at..at + text[at..].find(end).expect("end")])
        .collect()
}

/// The text of the element of `class` inside `item` (up to its closing tag).
fn inner<'a>(item: &'a str, class: &str) -> Option<&'a str> {
    let open = format!("class=\"{class}\">");
    let at = item.find(&open)? + open.len();
    Some(&item[at..at + item[at..].find("</")?])
}

/// Starts the workload and waits until it has made its calls; it lingers 3 s after.
fn start_workload(fixtures: &Fixtures) -> std::process::Child {
    let mut child = fixtures
        .workload(&["incident"])
        .env("WORKLOAD_LINGER_MS", "3000")
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting the workload");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().expect("stdout"))
        .read_line(&mut line)
        .expect("the workload's line");
    assert_eq!(
        line,
        "workload: incident big=0x7f0000000000 small=0x7f0000100000 calls=14\n"
    );
    child
}

#[test]
fn an_incident_names_its_gpu_suspect_kernels_and_the_calls_before_it_in_a_browser() {
    let _alone = support::exclusive();
    let since = Utc::now().trunc_subsecs(0) - chrono::Duration::seconds(60);
    let fixtures = Fixtures::build();
    let (data, dev) = (data_dir(), tempfile::tempdir().unwrap());
    let gpus = fake_gpu_dir("NVIDIA H100 80GB HBM3", &[(0, BUS, UUID)]);
    // The fleet's default stats functions (launches entry-only), memory figures every second.
    let config = fixtures
        .lake_config(
            "node-i",
            "stats_interval_secs = 1\n",
            (gpus.path(), dev.path(), data.path()),
        )
        .replace("stats = []\n", "");
    let agent = Agent::start(&config, &[]);
    let address = agent.metrics_address();
    let child = start_workload(&fixtures);
    let pid = child.id();
    // The XID names the kernels the agent knows when it comes: wait until the agent has read
    // every row of the workload (its 14 calls less the 3 that stats mode only counts), the
    // kernel lookups among them.
    let received = || {
        scrape(&address)
            .get("gpuship_ring_received_events_total{ring=\"cuda\"}")
            .copied()
    };
    wait_until(
        Duration::from_secs(10),
        "the agent reads the workload's 11 rows",
        || received() == Some(11),
        || format!("{:?}", received()),
    );
    kmsg(&format!(
        "<4>NVRM: Xid (PCI:0000:d5:00): 31, pid={pid}, name=cuda_workload, channel 0x0000000a, \
         intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_8 faulted @ 0x7f00_00000000. \
         Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE"
    ));
    wait_until(
        Duration::from_secs(10),
        "the flight recorder's rows are written",
        || agent.log().contains("flight recorder: the process's calls"),
        || agent.log(),
    );
    let output = child.wait_with_output().expect("waiting for the workload");
    assert!(output.status.success(), "{:?}", output.status);
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert!(
        stopped.log.contains("suspect_kernel=wild_write(int*)"),
        "{}",
        stopped.log
    );
    let until = Utc::now().trunc_subsecs(0) + chrono::Duration::seconds(60);
    let range = [
        "--since".to_string(),
        since.to_rfc3339(),
        "--until".into(),
        until.to_rfc3339(),
    ];

    let out = tempfile::tempdir().unwrap();
    let page = out.path().join("report.html");
    let stderr = run_report(&range[1], &range[3], data.path(), &page);
    assert!(
        stderr.contains("gpuship report: 1 XIDs in 1 incident(s)"),
        "{stderr}"
    );
    eprintln!("{stderr}");

    let profile = tempfile::tempdir().unwrap();
    let dom = String::from_utf8(chromium(&["--dump-dom"], &page, profile.path())).unwrap();
    assert!(!dom.contains("<script"), "no script element: {dom}");
    assert_eq!(dom.matches("<article class=\"incident-detail\"").count(), 1);
    let incident = between(
        &dom,
        &format!(
            "<article class=\"incident-detail\" id=\"incident-1\" data-incident=\"node-i/{BUS}/"
        ),
        "</article>",
    );
    // Where: the GPU and the process.
    assert_eq!(
        between(incident, "<p class=\"incident-gpu\">", "</p>"),
        format!(
            "<p class=\"incident-gpu\"><b>GPU: </b>UUID <code class=\"gpu-uuid\">{UUID}</code>, \
             bus id <code class=\"gpu-bus\">{BUS}</code>, index <span class=\"gpu-index\">0</span>, \
             NVIDIA H100 80GB HBM3, host node-i"
        )
    );
    assert_eq!(
        all(incident, "<li class=\"incident-process\"", "</li>"),
        [format!(
            "<li class=\"incident-process\" data-pid=\"{pid}\">pid {pid} <code>cuda_workload</code> \
             (found by driver_log)"
        )]
    );
    // What: the XID, its catalog name and action.
    let xids = all(incident, "<li class=\"incident-xid\"", "<br>");
    assert_eq!(xids.len(), 1, "{incident}");
    assert!(
        xids[0].ends_with(
            ": <b>XID 31 GPU MMU page fault</b> (error), recommended action \
             <b class=\"action\">restart_application</b>"
        ),
        "{}",
        xids[0]
    );
    // Which code: the suspects, most recent first, the one not seen to finish highlighted.
    let suspects: Vec<Suspect> = all(incident, "<li class=\"suspect", "<br>")
        .into_iter()
        .map(|item| {
            (
                item.starts_with("<li class=\"suspect first-suspect\""),
                inner(item, "kernel"),
                inner(item, "completed"),
                item.contains("data-completed=\"true\"").then_some("true"),
            )
        })
        .collect();
    assert_eq!(
        suspects,
        [
            (
                true,
                Some("wild_write(int*)"),
                Some("not seen to finish"),
                None
            ),
            (false, Some(HOSTILE_DOM), Some("completed"), Some("true")),
        ],
        "{incident}"
    );
    assert!(incident.contains(
        "<li class=\"suspect first-suspect\" data-completed=\"false\">\
         <mark class=\"kernel\">wild_write(int*)</mark> ← likely culprit"
    ));
    // The calls the flight recorder wrote before it, in order, with the launches' kernels.
    assert!(incident.contains("<details class=\"recorded-calls\" data-calls=\"3\">"));
    let recorded: Vec<(Option<&str>, Option<&str>)> =
        all(incident, "<li class=\"recorded-call\"", "</li>")
            .into_iter()
            .map(|item| (inner(item, "function"), inner(item, "kernel")))
            .collect();
    assert_eq!(
        recorded,
        [
            (Some("cuLaunchKernel"), Some(HOSTILE_DOM)),
            (Some("cuMemcpyAsync"), None),
            (Some("cuLaunchKernel"), Some("wild_write(int*)")),
        ]
    );
    // The out-of-memory failure, what the process held then and its largest allocations.
    let failed = all(incident, "<tr class=\"failed-call\"", "</tr>");
    assert_eq!(failed.len(), 1, "{incident}");
    assert!(failed[0].starts_with(
        "<tr class=\"failed-call\" data-call=\"cuMemAlloc_v2\" \
         data-result=\"CUDA_ERROR_OUT_OF_MEMORY\">"
    ));
    assert!(
        failed[0].contains(&format!(
            "asked for 1099511627776 B (1.00 TiB) on {UUID}<br>held then: device 4194304 B \
             (4.00 MiB), pool 0 B, physical 0 B, managed 0 B, pinned host 0 B<br>"
        )),
        "{}",
        failed[0]
    );
    let largest: Vec<&str> = all(failed[0], "<li class=\"allocation\">", " at ")
        .into_iter()
        .map(|a| a.trim_start_matches("<li class=\"allocation\">"))
        .collect();
    assert_eq!(
        largest,
        [
            "device 3145728 B (3.00 MiB) by cuMemAlloc_v2",
            "device 1048576 B (1.00 MiB) by cuMemAlloc_v2"
        ]
    );
    let memory = all(incident, "<tr class=\"memory\"", "</tr>");
    assert_eq!(memory.len(), 1, "{incident}");
    assert!(
        memory[0].starts_with(&format!(
            "<tr class=\"memory\" data-pid=\"{pid}\"><td class=\"num\">{pid}</td><td>{UUID} ({BUS})</td>\
             <td>4194304 B (4.00 MiB)</td><td>0 B</td><td>0 B</td><td>0 B</td><td>0 B</td>\
             <td class=\"num\">2</td><td>"
        )),
        "{}",
        memory[0]
    );
    assert!(!memory[0].contains("(at least)"), "seen from cuInit");

    // On screen: the highlight behind the first suspect, once.
    let shot = out.path().join("report.png");
    chromium(
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1400,4000",
        ],
        &page,
        profile.path(),
    );
    let (pixels, width, _) = decode_png(&shot);
    assert_eq!(blobs(&pixels, width, rgb(HIGHLIGHT), 40), 1);

    // The trace: the suspects on the XID's GPU track, before it, the culprit marked.
    let trace_file = out.path().join("trace.json");
    let export = Command::new(binary())
        .arg("export-trace")
        .args(&range)
        .arg("--data")
        .arg(data.path())
        .arg("--output")
        .arg(&trace_file)
        .output()
        .expect("running export-trace");
    assert!(export.status.success(), "{export:?}");
    let trace: Value = serde_json::from_slice(&std::fs::read(&trace_file).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let xid: Vec<&Value> = events.iter().filter(|e| e["cat"] == "xid").collect();
    assert_eq!(xid.len(), 1);
    let kernels: Vec<&Value> = xid[0]["args"]["suspects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["kernel"])
        .collect();
    assert_eq!(kernels, ["wild_write(int*)", HOSTILE]);
    let suspects: Vec<(&str, &Value, &Value, bool)> = events
        .iter()
        .filter(|e| e["cat"] == "suspect")
        .map(|e| {
            (
                e["name"].as_str().unwrap(),
                &e["pid"],
                &e["tid"],
                e["ts"].as_f64().unwrap() < xid[0]["ts"].as_f64().unwrap(),
            )
        })
        .collect();
    let (gpu_pid, gpu_tid) = (&xid[0]["pid"], &xid[0]["tid"]);
    let hostile = format!("suspect 2: {HOSTILE}");
    assert_eq!(
        suspects,
        [
            (hostile.as_str(), gpu_pid, gpu_tid, true),
            (
                "suspect 1: wild_write(int*) (likely culprit)",
                gpu_pid,
                gpu_tid,
                true
            ),
        ]
    );
}
