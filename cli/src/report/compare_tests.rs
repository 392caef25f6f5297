#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use super::*;
use ctxhost::tools::compare::{BlockEntry, CallEntry, Figures};

fn block(n: usize) -> BlockEntry {
    BlockEntry {
        digest: format!("{n:016x}"),
        role: "user".to_owned(),
        id: Some(format!("{n:08x}")),
        tokens: 10,
        preview: format!("message {n}"),
    }
}

/// A row whose call `i` sends blocks `0..=i` (a context that only grows).
fn growing(engine: &str, calls: usize) -> Row {
    let log = CallLog {
        blocks: (0..calls).map(block).collect(),
        calls: (0..calls)
            .map(|i| CallEntry {
                conversation: 1,
                turn: u32::try_from(i + 1).unwrap(),
                engine: engine.to_owned(),
                fallback: false,
                input_tokens: 10 * (i as u64 + 1),
                cached_tokens: 10 * i as u64,
                input_cost: 0.0,
                compacted: false,
                break_cause: None,
                context: (0..=u32::try_from(i).unwrap()).collect(),
            })
            .collect(),
    };
    Row {
        engine: engine.to_owned(),
        transcript: PathBuf::from("t.jsonl"),
        window: 8_000,
        conversations: 1,
        figures: Figures::default(),
        times: Vec::new(),
        quarantine: None,
        wall_ms: 0,
        call_log: Some(log),
        raw_times: Default::default(),
    }
}

fn meta() -> CompareMeta {
    CompareMeta {
        engines: vec!["a".to_owned(), "b".to_owned()],
        transcripts: vec![PathBuf::from("t.jsonl")],
        windows: vec![8_000],
        model: "m".to_owned(),
        prices: Prices {
            input: 3.0,
            cached_input: 0.3,
            output: 15.0,
        },
        break_share: 0.9,
    }
}

#[test]
fn the_page_holds_each_block_once_and_each_context_as_what_changed() {
    let n = 2_000;
    let rows = [growing("a", n), growing("b", n)];
    let m = meta();
    let data = page_data(&m, &rows);
    // Both engines sent the same blocks: each is embedded once.
    assert_eq!(data.blocks.len(), n);
    assert_eq!(data.runs.len(), 2);
    for run in &data.runs {
        // Call i keeps the i blocks of call i-1 and adds one: n indices in all, not n²/2.
        let added: usize = run.calls.iter().map(|c| c.a.len()).sum();
        assert_eq!(added, n);
        assert!(run.calls.iter().enumerate().all(|(i, c)| c.k == i));
    }
    let page = render(&meta(), &rows, &[]);
    assert!(
        page.len() < 400 * n,
        "{} bytes for {n} calls of two engines",
        page.len()
    );
}

#[test]
fn data_cannot_break_out_of_the_compare_page() {
    let evil = "</script><img src=x onerror=alert(1)>&\u{2028}";
    let mut row = growing(evil, 3);
    if let Some(log) = &mut row.call_log {
        log.blocks[0].preview = evil.to_owned();
    }
    let mut m = meta();
    m.engines = vec![evil.to_owned()];
    m.model = evil.to_owned();
    let page = render(&m, &[row], &[]);
    assert!(!page.contains("<img"));
    assert_eq!(page.matches("</script>").count(), 2, "only the page's own");
    let data = page.find("id=\"compare-data\"").expect("data");
    assert!(
        !page[data..].contains('\u{2028}'),
        "raw U+2028 in the script"
    );
}
