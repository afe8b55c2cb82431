use super::*;

#[test]
fn every_interval_holds_a_whole_window_at_the_least_share() {
    let mut config = CudaSourceConfig::default();
    let least = |config: &CudaSourceConfig| {
        least_observed(config, Duration::from_millis(config.sampling_window_ms))
    };
    // The defaults: 500 ms windows, 10 s intervals -> one window per 9 s.
    assert!((least(&config) - 0.5 / 9.0).abs() < 1e-12);
    config.min_observed_fraction = 0.2;
    assert_eq!(least(&config), 0.2);
    // A window as long as half the interval or more: probed in full.
    config.stats_interval_secs = 1;
    assert_eq!(least(&config), 1.0);
    config.sampling_window_ms = 600_000;
    config.stats_interval_secs = 0;
    assert_eq!(least(&config), 1.0);
}

#[test]
fn ticks_are_at_most_a_tenth_of_a_window_and_10_ms_apart() {
    assert_eq!(
        min_tick(Duration::from_millis(500)),
        Duration::from_millis(10)
    );
    assert_eq!(
        min_tick(Duration::from_millis(50)),
        Duration::from_millis(5)
    );
    assert_eq!(
        min_tick(Duration::from_millis(1)),
        Duration::from_micros(100)
    );
    assert_eq!(min_tick(Duration::ZERO), Duration::ZERO);
}
