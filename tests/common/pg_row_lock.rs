//! A row lock held by a transaction of the test's own, for the Postgres lease tests (the suite's
//! `store_pg` and the `pg_procs` binary): a commit that meets it waits, as one held up by a
//! paused or slow process would.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

/// A transaction of the test's own that holds the row locks its statement took until dropped.
pub struct RowLock {
    release: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RowLock {
    /// Runs `sql` (a `SELECT .. FOR UPDATE`) in a transaction; returns once it holds the lock.
    pub fn take(url: &str, sql: String) -> RowLock {
        let config: tokio_postgres::Config = url.parse().unwrap();
        let (locked, is_locked) = std::sync::mpsc::channel();
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let (mut client, conn) = config.connect(tokio_postgres::NoTls).await.unwrap();
                let driver = tokio::spawn(conn);
                let tx = client.transaction().await.unwrap();
                let rows = tx.query(&sql, &[]).await.unwrap();
                assert_eq!(rows.len(), 1, "{sql}: locks one row");
                locked.send(()).unwrap();
                let _ = released.await;
                tx.commit().await.unwrap();
                drop(client);
                let _ = driver.await;
            });
        });
        is_locked.recv().unwrap();
        RowLock {
            release: Some(release),
            thread: Some(thread),
        }
    }
}

/// Waits until `waiters()` (a count of `pg_stat_activity` rows waiting on a lock) is above zero:
/// the statement under test has reached the held lock. Fails after a minute, naming `what`,
/// rather than hang the test binary when the statement never comes.
pub fn wait_for_waiter(what: &str, mut waiters: impl FnMut() -> i64) {
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while waiters() == 0 {
        assert!(
            std::time::Instant::now() < give_up,
            "{what}: no statement waited on the held row lock within 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

impl Drop for RowLock {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            let _ = release.send(());
        }
        if let Some(thread) = self.thread.take()
            && !std::thread::panicking()
        {
            thread.join().unwrap();
        }
    }
}
