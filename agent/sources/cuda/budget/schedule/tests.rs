use super::*;

const TICK: Duration = Duration::from_millis(100);

fn settings() -> Settings {
    Settings {
        budget: 0.01,
        floor: 0.01,
        window: TICK,
        incident_full: Duration::from_secs(300),
    }
}

fn alive(_: u32) -> bool {
    true
}

/// Drives `schedule` for `ticks` ticks from `start` with one process making `hot_per_s` hot
/// traps per second while probed (and `steady_per_s` always); returns the steps per tick and
/// the hot traps it made.
struct Driver {
    schedule: Schedule,
    now: Instant,
    hot: u64,
    steady: u64,
    probed: bool,
}

impl Driver {
    fn new(trap_ns: f64) -> Self {
        let now = Instant::now();
        Self {
            schedule: Schedule::new(settings(), trap_ns, now),
            now,
            hot: 0,
            steady: 0,
            probed: true,
        }
    }

    fn run(&mut self, ticks: usize, hot_per_s: u64, steady_per_s: u64) -> Vec<Step> {
        let mut all = Vec::new();
        for _ in 0..ticks {
            self.now += TICK;
            if self.probed {
                self.hot += hot_per_s / 10;
            }
            self.steady += steady_per_s / 10;
            let reading = [Reading {
                pid: 7,
                hot: self.hot,
                steady: self.steady,
            }];
            let readings = self
                .schedule
                .wants_reading(self.now)
                .then_some(&reading[..]);
            let steps = self.schedule.tick(self.now, readings, &[], &alive);
            for step in &steps {
                match step {
                    Step::Attach(7) => self.probed = true,
                    Step::Detach(7) => self.probed = false,
                    Step::SwitchToPerProcess(pids) => assert_eq!(pids, &[7]),
                    Step::SwitchToSystemWide => self.probed = true,
                    _ => {}
                }
            }
            all.extend(steps);
        }
        all
    }
}

#[test]
fn a_quiet_process_stays_system_wide_and_fully_observed() {
    // 1,000 traps/s at 2 µs: 0.2% of its time, under the 1% budget.
    let mut driver = Driver::new(2_000.0);
    let steps = driver.run(100, 1_000, 100);
    assert_eq!(steps, Vec::<Step>::new());
    assert_eq!(driver.schedule.mode(), Mode::SystemWide);
    assert_eq!(driver.schedule.fraction(7), 1.0);
    let mut fractions = IntervalFractions::default();
    assert_eq!(fractions.take(driver.schedule.take_ledger())[&7], 1.0);
}

#[test]
fn a_busy_process_is_sampled_at_the_budgets_share_and_the_ledger_says_how_much() {
    // 50,000 traps/s at 2 µs = 10% of its time; budget 1% -> a tenth of the time.
    let mut driver = Driver::new(2_000.0);
    // The rate rises from zero over the 2 s horizon: per process once its cost passes the
    // budget, and settled at a tenth after 5 minutes (the rate moves only while probed).
    let first = driver.run(3_000, 50_000, 0);
    assert_eq!(first[0], Step::SwitchToPerProcess(vec![7]));
    assert_eq!(driver.schedule.mode(), Mode::PerProcess);
    assert!((driver.schedule.fraction(7) - 0.1).abs() < 1e-3);
    let mut fractions = IntervalFractions::default();
    fractions.take(driver.schedule.take_ledger());
    let steps = driver.run(1_000, 50_000, 0);
    let attaches = steps.iter().filter(|s| **s == Step::Attach(7)).count();
    let detaches = steps.iter().filter(|s| **s == Step::Detach(7)).count();
    // One window of one tick every 10 ticks over 1,000 ticks.
    assert_eq!((attaches, detaches), (100, 100));
    // Observed a tenth of the time; unprobed, the process calls 1/(1 - 10%) times as fast
    // (its traps took 10% of its time), so a tenth of the time saw 0.1 / (0.1 + 0.9 / 0.9)
    // = 1/11 of its calls.
    let observed = fractions.take(driver.schedule.take_ledger())[&7];
    assert!((observed - 1.0 / 11.0).abs() < 0.001, "observed {observed}");
}

#[test]
fn steady_traps_leave_less_room_and_the_floor_holds() {
    // Steady calls alone cost 0.8%: the hot ones get 0.2% of 10% -> 2%.
    let mut driver = Driver::new(2_000.0);
    driver.run(3_000, 50_000, 4_000);
    assert!((driver.schedule.fraction(7) - 0.02).abs() < 1e-3);
    // Steady calls over the budget: the floor.
    let mut driver = Driver::new(2_000.0);
    driver.run(3_000, 50_000, 10_000);
    assert_eq!(driver.schedule.fraction(7), 0.01);
}

#[test]
fn an_incident_probes_in_full_then_sampling_resumes() {
    let mut driver = Driver::new(2_000.0);
    driver.run(20, 50_000, 0);
    assert!(driver.schedule.fraction(7) < 1.0);
    driver.schedule.boost(&[7], driver.now);
    let during = driver.run(100, 50_000, 0);
    assert!(during.iter().all(|s| *s != Step::Detach(7)), "{during:?}");
    assert_eq!(driver.schedule.fraction(7), 1.0);
    driver.run(3_000, 50_000, 0);
    assert!(driver.schedule.fraction(7) < 1.0);
}

#[test]
fn links_go_system_wide_after_a_quiet_minute() {
    let mut driver = Driver::new(2_000.0);
    driver.run(20, 50_000, 0);
    assert_eq!(driver.schedule.mode(), Mode::PerProcess);
    // The process calms down: its rate falls under the budget within a few windows.
    let steps = driver.run(1_200, 100, 0);
    assert!(steps.contains(&Step::SwitchToSystemWide), "{steps:?}");
    assert_eq!(driver.schedule.mode(), Mode::SystemWide);
}

#[test]
fn exited_processes_are_detached_and_forgotten() {
    let mut driver = Driver::new(2_000.0);
    driver.run(20, 50_000, 0);
    let now = driver.now + Duration::from_secs(2);
    let steps = driver.schedule.tick(now, Some(&[]), &[], &|_| false);
    assert!(steps.contains(&Step::Forget(7)), "{steps:?}");
    // Its last interval's rows still get its ledger, once.
    assert_eq!(driver.schedule.take_ledger().len(), 1);
    assert!(driver.schedule.take_ledger().is_empty());
}

#[test]
fn counters_that_go_back_are_a_new_process_and_newcomers_are_followed() {
    let now = Instant::now();
    let mut schedule = Schedule::new(settings(), 2_000.0, now);
    let read = |hot| {
        Some(vec![Reading {
            pid: 9,
            hot,
            steady: 0,
        }])
    };
    schedule.tick(now, read(u64::MAX).as_deref(), &[], &alive);
    let later = now + Duration::from_secs(1);
    // A reused pid starts from 10 traps, not from u64::MAX: no wrap into a huge rate.
    schedule.tick(later, read(10).as_deref(), &[11], &alive);
    assert_eq!(schedule.fraction(9), 1.0);
    assert_eq!(schedule.take_ledger().len(), 2);
}

#[test]
fn interval_fractions_compare_with_the_previous_interval_only() {
    let mut fractions = IntervalFractions::default();
    let first = fractions.take(HashMap::from([(1, (100.0, 10.0)), (2, (100.0, 100.0))]));
    assert_eq!(first[&1], 0.1);
    assert_eq!(first[&2], 1.0);
    let second = fractions.take(HashMap::from([(1, (200.0, 60.0)), (2, (200.0, 200.0))]));
    assert_eq!(second[&1], 0.5);
    assert_eq!(second[&2], 1.0);
}

#[test]
fn a_quiet_process_with_bursts_is_not_mistaken_for_a_busy_one() {
    // 1,000 calls in one tick, once a second: 0.2% of its time at 2 µs, under the 1%
    // budget, although a tick's own rate (10,000/s, 2%) is over it.
    let mut schedule = Schedule::new(settings(), 2_000.0, Instant::now());
    let mut now = Instant::now();
    let mut hot = 0;
    for tick in 0..600 {
        now += TICK;
        if tick % 10 == 0 {
            hot += 1_000;
        }
        let reading = [Reading {
            pid: 7,
            hot,
            steady: 0,
        }];
        let steps = schedule.tick(now, Some(&reading[..]), &[], &alive);
        assert_eq!(steps, Vec::<Step>::new(), "tick {tick}");
    }
    assert_eq!(schedule.fraction(7), 1.0);
}
