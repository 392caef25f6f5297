use super::*;

#[test]
fn limits_default_and_hard_timeout() {
    let l = Limits::default();
    assert_eq!(
        (l.deadline_ms, l.grace_ms, l.memory_bytes),
        (500, 1000, 256 << 20)
    );
    let l = Limits {
        deadline_ms: 20,
        ..Limits::default()
    };
    assert_eq!(l.deadline(), Duration::from_millis(20));
    assert_eq!(l.hard_timeout(), Duration::from_millis(1020));
}

#[test]
fn watchdog_sets_flag_after_deadline_and_guard_disarms() {
    let fired = Arc::new(AtomicBool::new(false));
    let _g = watchdog().arm(Instant::now() + Duration::from_millis(10), fired.clone());
    let start = Instant::now();
    while !fired.load(Ordering::Relaxed) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "watchdog never fired"
        );
        std::thread::sleep(Duration::from_millis(1));
    }

    let disarmed = Arc::new(AtomicBool::new(false));
    let g = watchdog().arm(Instant::now() + Duration::from_millis(30), disarmed.clone());
    drop(g);
    std::thread::sleep(Duration::from_millis(60));
    assert!(!disarmed.load(Ordering::Relaxed));
}

#[test]
fn signals_report_cancel_before_deadline() {
    let s = StopSignals::new(None);
    assert_eq!(s.check(), None);
    s.expired.store(true, Ordering::Relaxed);
    assert_eq!(s.check(), Some(StopReason::Deadline));
    s.cancel.store(true, Ordering::Relaxed);
    assert_eq!(s.check(), Some(StopReason::Cancelled));
    s.note_line(Some(7));
    s.note_line(Some(9));
    assert_eq!(s.line(), Some(7));
}

#[test]
fn worker_runs_jobs_and_abandons_a_stuck_one() {
    let w = Worker::spawn("test-worker", 1 << 20, 0u32).unwrap();
    let n = w
        .call(Duration::from_secs(5), |s: &mut u32| {
            *s += 1;
            *s
        })
        .unwrap();
    assert_eq!(n, 1);
    let r = w.call(Duration::from_millis(20), |_s: &mut u32| {
        std::thread::sleep(Duration::from_millis(200));
    });
    assert_eq!(r, Err(WorkerError::TimedOut));
    assert!(w.is_abandoned());
    assert_eq!(
        w.call(Duration::from_secs(1), |s: &mut u32| *s),
        Err(WorkerError::Abandoned)
    );
}

#[test]
fn a_wait_outside_the_deadline_neither_expires_the_call_nor_abandons_the_worker() {
    let w = Worker::spawn("test-wait", 1 << 20, ()).unwrap();
    let signals = Arc::new(StopSignals::new(None));
    let s = Arc::clone(&signals);
    // A 50 ms deadline, a caller waiting 100 ms: the host wait takes 300 ms.
    let r = w.call(Duration::from_millis(100), move |_: &mut ()| {
        let guard = s.start_call(Duration::from_millis(50));
        outside_deadline(|| std::thread::sleep(Duration::from_millis(300)));
        let after_wait = s.check();
        drop(guard);
        after_wait
    });
    assert_eq!(r, Ok(None), "the call is still within its deadline");
    assert!(!w.is_abandoned());

    // The same wait inside the deadline expires the call, and the caller gives up.
    let s = Arc::clone(&signals);
    let r = w.call(Duration::from_millis(100), move |_: &mut ()| {
        let guard = s.start_call(Duration::from_millis(50));
        std::thread::sleep(Duration::from_millis(300));
        let after_wait = s.check();
        drop(guard);
        after_wait
    });
    assert_eq!(r, Err(WorkerError::TimedOut));
    assert_eq!(signals.check(), Some(StopReason::Deadline));
}

#[test]
fn work_back_within_the_deadline_after_a_wait_outside_it_expires_the_call() {
    let w = Worker::spawn("test-within", 1 << 20, ()).unwrap();
    let signals = Arc::new(StopSignals::new(None));
    // A 50 ms deadline, a caller waiting 100 ms past it: a 300 ms wait outside the deadline is
    // credited, the 300 ms of work after it (a summarizer's offline fallback) is not.
    let s = Arc::clone(&signals);
    let r = w.call(Duration::from_millis(100), move |_: &mut ()| {
        let guard = s.start_call(Duration::from_millis(50));
        outside_deadline(|| {
            std::thread::sleep(Duration::from_millis(300));
            within_deadline(|| std::thread::sleep(Duration::from_millis(300)));
        });
        let after = s.check();
        drop(guard);
        after
    });
    assert_eq!(r, Err(WorkerError::TimedOut), "the caller gave up");
    assert_eq!(signals.check(), Some(StopReason::Deadline));

    // Short work back inside keeps the rest of the wait's credit: the call stays in time.
    let w = Worker::spawn("test-within-short", 1 << 20, ()).unwrap();
    let signals = Arc::new(StopSignals::new(None));
    let s = Arc::clone(&signals);
    let r = w.call(Duration::from_millis(100), move |_: &mut ()| {
        let guard = s.start_call(Duration::from_millis(50));
        outside_deadline(|| {
            std::thread::sleep(Duration::from_millis(200));
            within_deadline(|| ());
            std::thread::sleep(Duration::from_millis(200));
        });
        let after = s.check();
        drop(guard);
        after
    });
    assert_eq!(r, Ok(None), "both waits were credited");
    assert!(!w.is_abandoned());
}

#[test]
fn host_work_off_a_worker_is_credited_only_for_its_waits() {
    let nap = || std::thread::sleep(Duration::from_millis(30));
    // Work that waits on nothing outside: no credit at all.
    let ((), waited) = crediting(nap);
    assert_eq!(waited, Duration::ZERO);
    // A wait outside the deadline: credited.
    let ((), waited) = crediting(|| outside_deadline(nap));
    assert!(waited >= Duration::from_millis(30), "{waited:?}");
    // Work back within the deadline inside the wait is taken back out of it.
    let t0 = Instant::now();
    let ((), waited) = crediting(|| {
        outside_deadline(|| {
            nap();
            within_deadline(nap);
        })
    });
    let total = t0.elapsed();
    assert!(waited >= Duration::from_millis(30), "{waited:?}");
    assert!(
        waited + Duration::from_millis(30) <= total,
        "the work within ({waited:?} of {total:?}) is not credited"
    );
    // Outside `crediting` nothing is noted.
    assert_eq!(
        outside::CREDIT.with(std::cell::Cell::get).map(|c| c.waited),
        None
    );
}
