//! `gpuship report` end to end: the real agent records the stand-in libcuda workload (one forced
//! failure beside the allocation that always fails) and two XIDs of different severities
//! injected through /dev/kmsg, plus the accounting document it keeps beside the data. The report
//! must hold exactly those counts, incidents and markers, and must render in headless Chromium
//! with the severity colors on screen and the timeline's markers in the DOM. Stats mode:
//! `report/stats_mode.rs`; docs/rca.md's queries of the flight recorder's rows:
//! `report/flight_recorder.rs`; an incident's section (GPU, suspects, recorded calls, memory):
//! `report/incident.rs`.

mod flight_recorder;
mod incident;
mod stats_mode;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support;
use crate::support::agent::{binary, data_dir, Agent};
use crate::support::lake::duckdb;
use crate::support::Fixtures;
use chrono::{SubsecRound, Utc};
use gpuship_lake::views::report::timeline::{severity_color, CUDA_FAILURE_COLOR};

const GPU_A: &str = "0000:d1:00.0";
const GPU_B: &str = "0000:d2:00.0";

/// A fake /proc/driver/nvidia/gpus with two GPUs, on buses no other test uses.
fn gpu_dir() -> tempfile::TempDir {
    support::lake::fake_gpu_dir(
        "NVIDIA H200",
        &[
            (0, GPU_A, "GPU-0d0d-0000-1111-2222-333333333333"),
            (1, GPU_B, "GPU-1d1d-0000-1111-2222-333333333333"),
        ],
    )
}

fn config(fixtures: &Fixtures, gpus: &Path, dev: &Path, lake: &Path) -> String {
    fixtures.lake_config("node-r", "", (gpus, dev, lake))
}

/// The `<tr ...>...</tr>` that starts with `start`.
fn row<'a>(html: &'a str, start: &str) -> &'a str {
    let at = html.find(start).unwrap_or_else(|| panic!("no row {start}"));
    let end = at + html[at..].find("</tr>").expect("row end");
    &html[at..end]
}

/// `gpuship report --since <since> --until <until> --data <data> --output <page>`: asserts it
/// succeeded and returns its standard error (the one-line summary).
fn run_report(since: &str, until: &str, data: &Path, page: &Path) -> String {
    let report = Command::new(binary())
        .args(["report", "--since", since, "--until", until])
        .arg("--data")
        .arg(data)
        .arg("--output")
        .arg(page)
        .output()
        .expect("running report");
    let stderr = String::from_utf8_lossy(&report.stderr).into_owned();
    assert!(report.status.success(), "{stderr}");
    stderr
}

/// Runs chromium headless with `args` on `page`, with a deadline; returns stdout.
fn chromium(args: &[&str], page: &Path, profile: &Path) -> Vec<u8> {
    let mut child = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .args([
            "--force-color-profile=srgb",
            "--force-device-scale-factor=1",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium (make testenv installs it)");
    let stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut { stdout }, &mut out).map(|_| out)
    });
    let deadline = Instant::now() + Duration::from_secs(90);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium did not finish");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    reader.join().unwrap().expect("chromium stdout")
}

/// Groups of 4-connected pixels of exactly `rgb`, at least `min` pixels each.
fn blobs(pixels: &[[u8; 3]], width: usize, rgb: [u8; 3], min: usize) -> usize {
    let mut seen = vec![false; pixels.len()];
    let mut count = 0;
    for start in 0..pixels.len() {
        if seen[start] || pixels[start] != rgb {
            continue;
        }
        let (mut size, mut stack) = (0, vec![start]);
        seen[start] = true;
        while let Some(i) = stack.pop() {
            size += 1;
            let (x, y) = (i % width, i / width);
            let mut next = Vec::with_capacity(4);
            if x > 0 {
                next.push(i - 1);
            }
            if x + 1 < width {
                next.push(i + 1);
            }
            if y > 0 {
                next.push(i - width);
            }
            if i + width < pixels.len() {
                next.push(i + width);
            }
            for j in next {
                if !seen[j] && pixels[j] == rgb {
                    seen[j] = true;
                    stack.push(j);
                }
            }
        }
        if size >= min {
            count += 1;
        }
    }
    count
}

fn rgb(hex: &str) -> [u8; 3] {
    let v = u32::from_str_radix(hex.trim_start_matches('#'), 16).unwrap();
    [(v >> 16) as u8, (v >> 8) as u8, v as u8]
}

/// The screenshot's pixels as RGB, and its width.
fn decode_png(path: &Path) -> (Vec<[u8; 3]>, usize, usize) {
    let file = std::io::BufReader::new(std::fs::File::open(path).expect("screenshot"));
    let mut decoder = png::Decoder::new(file);
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().expect("PNG header");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("PNG frame");
    let channels = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        other => panic!("unexpected PNG color type {other:?}"),
    };
    let pixels = buf[..info.buffer_size()]
        .chunks_exact(channels)
        .map(|p| [p[0], p[1], p[2]])
        .collect();
    (pixels, info.width as usize, info.height as usize)
}

#[test]
fn the_report_shows_exactly_what_the_agent_recorded_and_renders_in_a_browser() {
    let _alone = support::exclusive();
    let since = Utc::now().trunc_subsecs(0) - chrono::Duration::seconds(60);
    let fixtures = Fixtures::build();
    let (data, gpus, dev) = (data_dir(), gpu_dir(), tempfile::tempdir().unwrap());
    let agent = Agent::start(
        &config(&fixtures, gpus.path(), dev.path(), data.path()),
        &[],
    );
    let workload = fixtures.gated_sequence(dev.path());
    let pid = workload.pid();
    support::kmsg(&format!("<4>NVRM: Xid (PCI:0000:d1:00): 31, pid={pid}, name=cuda_workload, channel 0x0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_8 faulted @ 0x7f00_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE"));
    support::kmsg("<4>NVRM: Xid (PCI:0000:d2:00): 79, GPU has fallen off the bus.");
    agent.wait_for_log("code=79", Duration::from_secs(10));
    workload.release();
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    // The agent keeps its accounting beside the data: one document for the run, rewritten at
    // shutdown with the final counters, exactly those of the run's outcome.
    let documents: Vec<_> = std::fs::read_dir(data.path().join("_accounting"))
        .expect("the agent wrote _accounting/")
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(documents.len(), 1, "{documents:?}");
    let document: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&documents[0]).unwrap()).unwrap();
    assert_eq!(document["accounting"], stopped.outcome["accounting"]);
    assert!(
        document["window"]["start"].as_str().unwrap() < document["window"]["end"].as_str().unwrap()
    );
    let until = Utc::now().trunc_subsecs(0) + chrono::Duration::seconds(60);
    let seconds = (until - since).num_seconds() as f64;

    let out_dir = tempfile::tempdir().unwrap();
    let page = out_dir.path().join("report.html");
    let stderr = run_report(&since.to_rfc3339(), &until.to_rfc3339(), data.path(), &page);
    assert!(
        stderr.contains("gpuship report: 2 XIDs in 2 incident(s), 28 CUDA calls (2 failed)"),
        "{stderr}"
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains("<script"), "no script");

    // Header.
    assert!(html.contains("Hosts: node-r</p>"));
    for (id, count) in [
        ("xids", 2),
        ("incidents", 2),
        ("cuda", 28),
        ("failures", 2),
        ("driver", 0),
    ] {
        assert!(
            html.contains(&format!("id=\"count-{id}\"><b>{count}</b>")),
            "{id}"
        );
    }

    // Calls per function: the same counts DuckDB finds in the lake.
    let glob = format!("{}/cuda/**/*.parquet", data.path().display());
    let by_function = duckdb(&format!(
        "select function, count(*), count(*) filter (where result <> 0) \
         from read_parquet('{glob}', hive_partitioning=true) group by function order by function"
    ));
    assert_eq!(
        by_function.len(),
        26,
        "28 calls; cuMemAlloc_v2 and cuMemFree_v2 twice"
    );
    assert_eq!(
        html.matches("<tr class=\"function\"").count(),
        by_function.len()
    );
    for r in &by_function {
        let calls: f64 = r[1].parse().unwrap();
        let expected = format!(
            "<tr class=\"function\" data-function=\"{f}\"><td>{f}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{:.3}</td><td class=\"num\">{}</td>",
            r[1],
            calls / seconds,
            r[2],
            f = r[0]
        );
        assert!(html.contains(&expected), "{expected}");
    }
    let exact = |f: &str, calls: u32, errors: u32| {
        let r = row(
            &html,
            &format!("<tr class=\"function\" data-function=\"{f}\">"),
        );
        assert!(
            r.contains(&format!("<td class=\"num\">{calls}</td>"))
                && r.contains(&format!(
                    "</td><td class=\"num\">{errors}</td><td class=\"num\">"
                )),
            "{r}"
        );
    };
    exact("cuMemAlloc_v2", 2, 1);
    exact("cuCtxSynchronize", 1, 1);
    exact("cuMemFree_v2", 2, 0);

    // Incidents: one per GPU, root cause, action, the calls the first one broke.
    assert_eq!(html.matches("<tr class=\"incident\"").count(), 2);
    let fault = row(
        &html,
        "<tr class=\"incident\" data-incident=\"node-r/0000:d1:00.0/",
    );
    assert!(
        fault.contains("data-root-code=\"31\" data-codes=\"31\" data-severity=\"error\""),
        "{fault}"
    );
    assert!(fault.contains("XID 31: GPU MMU page fault"), "{fault}");
    assert!(fault.contains("<td>restart_application</td>"), "{fault}");
    assert!(
        fault.contains(&format!(
            "<td>{pid} cuda_workload</td><td class=\"num\">2</td>"
        )),
        "{fault}"
    );
    let off_bus = row(
        &html,
        "<tr class=\"incident\" data-incident=\"node-r/0000:d2:00.0/",
    );
    assert!(
        off_bus.contains("data-root-code=\"79\" data-codes=\"79\" data-severity=\"fatal\""),
        "{off_bus}"
    );
    assert!(off_bus.contains("<td>reboot_node</td>"), "{off_bus}");
    assert!(
        off_bus.ends_with("<td>none attributed</td><td class=\"num\">0</td>"),
        "{off_bus}"
    );

    // Timeline markers and the affected process.
    assert_eq!(html.matches("<circle class=\"xid-marker\"").count(), 2);
    assert!(html.contains(&format!(
        "data-code=\"31\" data-severity=\"error\" data-gpu=\"{GPU_A}\""
    )));
    assert!(html.contains(&format!(
        "data-code=\"79\" data-severity=\"fatal\" data-gpu=\"{GPU_B}\""
    )));
    let failures =
        format!("<polygon class=\"cuda-failure\" data-gpu=\"{GPU_A}\" data-pid=\"{pid}\"");
    assert_eq!(html.matches(&failures).count(), 2);
    assert_eq!(html.matches("<polygon class=\"cuda-failure\"").count(), 2);
    let affected = row(&html, &format!("<tr class=\"process\" data-pid=\"{pid}\">"));
    assert!(
        affected.contains("CUDA_ERROR_ILLEGAL_ADDRESS ×1"),
        "{affected}"
    );
    assert!(
        affected.contains("CUDA_ERROR_OUT_OF_MEMORY ×1"),
        "{affected}"
    );

    // Accounting, from the document.
    assert!(!html.contains("id=\"no-accounting\""));
    let sinks = stopped.outcome["accounting"]["sinks"].as_array().unwrap();
    let delivered: u64 = sinks.iter().map(|s| s["delivered"].as_u64().unwrap()).sum();
    assert_eq!(delivered, 30, "28 calls and 2 XIDs");
    assert!(html.contains(&format!(
        "From 1 accounting document(s): {delivered} delivered, 0 dropped, 0 lost in the kernel."
    )));
    let sink = stopped.sink("cuda")["sink"].as_str().unwrap().to_string();
    let cuda_row = row(
        &html,
        &format!("<tr class=\"sink\" data-sink=\"{sink}\" data-kind=\"cuda\">"),
    );
    assert!(cuda_row.ends_with("<td class=\"num\">28</td><td class=\"num\">0</td><td>none</td><td class=\"num\">0</td>"), "{cuda_row}");
    let ring = row(&html, "<tr class=\"ring\" data-ring=\"cuda\">");
    assert!(
        ring.ends_with("<td class=\"num\">28</td><td class=\"num\">0</td>"),
        "{ring}"
    );
    assert!(html.contains("Kernel log: 2 XID line(s) read, 0 unparseable, 0 gap(s)"));

    // Rendered: the severity colors of both XIDs are on screen, as markers and legend.
    let profile = tempfile::tempdir().unwrap();
    let shot: PathBuf = out_dir.path().join("report.png");
    chromium(
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1400,2000",
        ],
        &page,
        profile.path(),
    );
    let (pixels, width, height) = decode_png(&shot);
    assert_eq!((width, height), (1400, 2000));
    let mut colors = BTreeMap::<[u8; 3], usize>::new();
    for p in &pixels {
        *colors.entry(*p).or_default() += 1;
    }
    let white = colors.get(&[255, 255, 255]).copied().unwrap_or(0);
    assert!(
        pixels.len() - white > pixels.len() / 100,
        "the page is not blank"
    );
    assert!(
        colors.len() > 50,
        "text, tables and markers: {} colors",
        colors.len()
    );
    // Each severity seen: its legend swatch and its marker; the others: the swatch alone.
    for (severity, expected) in [("fatal", 2), ("error", 2), ("warning", 1), ("info", 1)] {
        let found = blobs(&pixels, width, rgb(severity_color(severity)), 40);
        assert_eq!(found, expected, "{severity} ({})", severity_color(severity));
    }
    // Two failed calls a few microseconds apart draw one diamond, beside the legend's.
    assert_eq!(blobs(&pixels, width, rgb(CUDA_FAILURE_COLOR), 40), 2);

    let dom = String::from_utf8(chromium(&["--dump-dom"], &page, profile.path())).unwrap();
    assert_eq!(dom.matches("class=\"xid-marker\"").count(), 2, "{dom}");
    assert!(dom.contains("<svg class=\"timeline\""));
    assert!(dom.contains("data-code=\"79\" data-severity=\"fatal\""));
    assert_eq!(dom.matches("class=\"cuda-failure\"").count(), 2);
    assert!(!dom.contains("<script"));
}
