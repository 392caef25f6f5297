use super::fault::find_line;

#[test]
fn finds_the_first_line_of_the_script() {
    let text = "x/e.lua:12: boom\nstack traceback:\n  x/e.lua:3: in function";
    assert_eq!(find_line("x/e.lua", text), Some(12));
    assert_eq!(find_line("y.lua", text), None);
}
