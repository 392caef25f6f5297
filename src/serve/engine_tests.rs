#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use super::EngineFile;

#[test]
fn an_unchanged_engine_file_is_looked_at_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("e.lua");
    std::fs::write(&path, "return 1").unwrap();
    let mut file = EngineFile::new(path.clone());
    for _ in 0..1000 {
        assert!(!file.changed());
    }
    assert_eq!(file.reads, 0, "unchanged metadata: the content is not read");
}

#[test]
fn a_save_is_a_change_and_a_rewrite_of_the_same_text_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("e.lua");
    std::fs::write(&path, "return 1").unwrap();
    let mut file = EngineFile::new(path.clone());
    let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
    // Same length, the modification time set back: the change time still moves (a tick of
    // the file system's clock later).
    std::thread::sleep(std::time::Duration::from_millis(50));
    std::fs::write(&path, "return 2").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(modified)
        .unwrap();
    assert!(file.changed(), "a same-length save with its mtime set back");
    assert!(!file.changed(), "seen once");
    std::thread::sleep(std::time::Duration::from_millis(50));
    std::fs::write(&path, "return 2").unwrap();
    assert!(
        !file.changed(),
        "the same text written again is no new version"
    );
    assert_eq!(file.reads, 2);
}
