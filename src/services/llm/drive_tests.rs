#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{Driven, drive};

#[test]
fn a_future_that_borrows_and_sleeps_on_tokio_finishes() {
    let words = vec!["a".to_owned(), "b".to_owned()];
    let borrowed = &words;
    let out = drive(
        async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            borrowed.join("+")
        },
        &AtomicBool::new(false),
        None,
    )
    .unwrap();
    assert!(matches!(out, Driven::Ready(s) if s == "a+b"));
}

#[test]
fn a_future_that_never_finishes_ends_on_cancel_or_at_its_limit() {
    let cancel = AtomicBool::new(true);
    let out = drive(std::future::pending::<()>(), &cancel, None).unwrap();
    assert!(matches!(out, Driven::Cancelled));
    cancel.store(false, Ordering::SeqCst);
    let until = Instant::now() + Duration::from_millis(30);
    let out = drive(std::future::pending::<()>(), &cancel, Some(until)).unwrap();
    assert!(matches!(out, Driven::TimedOut));
}
