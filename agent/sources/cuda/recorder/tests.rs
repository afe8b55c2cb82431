use super::*;

const S: i64 = 1_000_000_000;

fn plan() -> DumpPlan {
    DumpPlan::new(Arc::from("node-1"), 10 * S)
}

#[test]
fn sticky_results_are_the_ones_that_leave_the_context_unusable() {
    for code in [700, 701, 702, 710, 714, 715, 716, 717, 718, 719, 999] {
        assert!(is_sticky(code), "{code}");
    }
    for code in [0, 1, 2, 200, 400, 703, 709, 711, 720, 800, u32::MAX] {
        assert!(!is_sticky(code), "{code}");
    }
}

#[test]
fn a_sticky_failure_starts_one_incident_and_later_ones_join_it() {
    let mut plan = plan();
    let first = plan.sticky_failure(42, 100 * S, None);
    assert_eq!(&*first, "node-1/pid-42/100000000000");
    assert_eq!(
        plan.take(),
        vec![Dump {
            pid: 42,
            incident: first.clone(),
            from_ns: 90 * S,
            until_ns: 100 * S
        }]
    );
    // Every later call of the broken context fails too: they join, no second dump.
    assert_eq!(plan.sticky_failure(42, 105 * S, None), first);
    assert_eq!(plan.sticky_failure(42, 110 * S, None), first);
    assert!(plan.take().is_empty());
    // After the window a new failure is a new incident.
    let later = plan.sticky_failure(42, 111 * S, None);
    assert_ne!(later, first);
    assert_eq!(plan.take().len(), 1);
}

#[test]
fn a_failure_under_an_xid_incident_takes_its_id_and_the_xid_adds_no_second_dump() {
    let mut plan = plan();
    let xid: Arc<str> = Arc::from("node-1/0000:3b:00.0/99");
    assert_eq!(plan.sticky_failure(7, 100 * S, Some(xid.clone())), xid);
    assert_eq!(plan.take().len(), 1);
    plan.xid_incident(7, xid.clone(), 99 * S);
    assert!(plan.take().is_empty(), "the same incident");
    // The kernel log's XID arrives after the failure started its own incident: no copy.
    let mut plan = self::plan();
    let own = plan.sticky_failure(8, 100 * S, None);
    plan.take();
    plan.xid_incident(8, xid.clone(), 101 * S);
    assert!(plan.take().is_empty());
    assert_eq!(plan.sticky_failure(8, 102 * S, None), own);
}

#[test]
fn an_xid_alone_dumps_the_seconds_before_it_and_a_second_after() {
    let mut plan = plan();
    let xid: Arc<str> = Arc::from("node-1/0000:3b:00.0/50");
    plan.xid_incident(9, xid.clone(), 50 * S);
    plan.xid_incident(9, xid.clone(), 50 * S);
    assert_eq!(
        plan.take(),
        vec![Dump {
            pid: 9,
            incident: xid,
            from_ns: 40 * S,
            until_ns: 51 * S
        }]
    );
}

#[test]
fn times_at_the_limits_do_not_overflow_and_processes_are_bounded() {
    let mut plan = DumpPlan::new(Arc::from("h"), i64::MAX);
    plan.sticky_failure(1, i64::MAX, None);
    plan.sticky_failure(2, i64::MIN, None);
    let dumps = plan.take();
    assert_eq!(dumps[0].from_ns, 0);
    assert_eq!(dumps[1].from_ns, i64::MIN);
    let mut plan = self::plan();
    for pid in 0..MAX_PROCESSES as i32 + 10 {
        plan.sticky_failure(pid, i64::from(pid) * S, None);
    }
    assert_eq!(plan.by_pid.len(), MAX_PROCESSES);
    assert_eq!(plan.take().len(), MAX_PROCESSES + 10);
}
