//! Text an engine wrote is untrusted: on a terminal an ESC starts a CSI or OSC sequence (clear
//! the screen, retitle the window, forge a hyperlink), a CR overwrites the line it is on, a
//! U+202E turns what follows around. [`escape`] writes such characters as `\u001b`, `\r`,
//! `\u202e`, so they do nothing wherever the text is shown: the CLI passes everything it prints
//! through it, and the host's own messages quote engine-made names with it (an error a client
//! shows to its user is inert too).
//!
//! The escapes are JSON's, so escaped text stays safe inside JSON: a bidi or C1 character
//! written as `\u202e` decodes to the same string.

use std::borrow::Cow;

/// Whether `c` must not reach a terminal raw: C0 controls other than newline and tab, DEL, the
/// C1 controls, the bidi embeddings, overrides, isolates and marks, and the line and paragraph
/// separators.
fn is_unsafe(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}'
        | '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{2028}' | '\u{2029}'
        | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every character a terminal would act on written as an escape (`\r`, else
/// `\uXXXX`); newlines and tabs stay. Borrowed when there is nothing to escape.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !is_unsafe(c) {
            out.push(c);
        } else if c == '\r' {
            out.push_str("\\r");
        } else {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_controls_are_escaped_and_text_is_kept() {
        let hostile = "a\u{1b}[2J\u{1b}]0;pwned\u{7}b\rc\0d\u{202e}e\u{9b}f\ng\th é";
        assert_eq!(
            escape(hostile),
            "a\\u001b[2J\\u001b]0;pwned\\u0007b\\rc\\u0000d\\u202ee\\u009bf\ng\th é"
        );
        assert!(matches!(escape("plain ✓ text\n"), Cow::Borrowed(_)));
    }
}
