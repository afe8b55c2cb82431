//! A storm of SIGHUPs while the agent captures: every reload applied or refused, nothing lost.

use super::*;

#[test]
fn a_sighup_storm_loses_nothing() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let (lake, second) = (data_dir(), data_dir());
    let agent = Agent::start(&base_config(&fixtures, lake.path()), &[]);
    let (address, path) = (agent.metrics_address(), config_path(&agent));
    let bus = "0000:f3:00";
    let first = std::fs::read_to_string(&path).unwrap();
    let workload = launching(&fixtures);
    wait_for_calls(&agent, &address, 1000);
    // Sources restarted and a sink added, by whichever of the ten reloads comes first.
    let changed = format!("{first}{}", parquet("second", second.path()))
        .replace("drain_interval_ms = 20", "drain_interval_ms = 30");
    std::fs::write(&path, changed).unwrap();
    let ids: Vec<String> = (0..10).map(|i| format!("s{i:02}")).collect();
    for id in &ids {
        signal(agent.pid(), libc::SIGHUP);
        inject(bus, id);
    }
    wait_until(
        Duration::from_secs(60),
        "a reload of the storm",
        || reloads(&address).0 >= 1,
        || agent.log(),
    );
    stop(workload);
    inject(bus, "end");
    wait_for_marker(&agent, second.path(), bus, "end");
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_identities(&stopped);
    let reloads = &stopped.outcome["accounting"]["reloads"];
    let applied = reloads["applied"].as_u64().unwrap();
    assert!((1..=10).contains(&applied), "{reloads}");
    eprintln!("storm: 10 SIGHUPs, {applied} reloads applied (signals that come during a reload are merged)");
    assert_eq!(reloads["rejected"], 0);
    let mut all: Vec<&str> = ids.iter().map(String::as_str).collect();
    all.push("end");
    assert_eq!(markers(lake.path(), bus), once(&all));
    assert_eq!(markers(second.path(), bus)["end"], 1);
}

#[test]
fn the_systemd_unit_reloads_with_sighup() {
    let unit = std::fs::read_to_string(repo_root().join("deploy/systemd/gpuship.service")).unwrap();
    assert!(
        unit.contains("\nExecReload=/bin/kill -HUP $MAINPID\n"),
        "{unit}"
    );
}
