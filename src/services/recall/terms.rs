//! Cutting text into search terms, keeping identifiers whole as well as their parts.

/// Characters that join the parts of an identifier (`src/foo.rs`, `mia_li_3668`, `a::b`,
/// `ERR_X`, `user@host`, `well-known`).
fn joins(c: char) -> bool {
    matches!(c, '_' | '.' | '/' | ':' | '-' | '@' | '~' | '+' | '#')
}

/// The longest term kept; longer runs (base64, minified code) are only kept as their parts.
const MAX_TERM_BYTES: usize = 96;

/// Words too common to tell messages apart.
const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "do", "for", "from", "has", "have",
    "he", "i", "if", "in", "is", "it", "its", "me", "my", "no", "not", "of", "on", "or", "so",
    "that", "the", "then", "there", "this", "to", "was", "we", "what", "with", "you",
];

/// The search terms of `text`, lowercased, in order (repeats included). Each run of letters,
/// digits and joining characters (`_ . / : - @ ~ + #`) gives its alphanumeric parts, and, when
/// it has more than one part, the whole run too, without leading and trailing punctuation (a
/// leading `#` stays: `#123`). Common English words and one-letter parts are left out.
/// (Examples: the unit test `terms_cut_identifiers_into_their_parts`.)
pub(crate) fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    each_term(text, |t| out.push(t.to_owned()));
    out
}

/// Calls `f` with each of [`terms`]' terms of `text`, in order, without allocating a string
/// per term (the index adds every stored message's terms).
pub(super) fn each_term(text: &str, mut f: impl FnMut(&str)) {
    let mut buf = String::new();
    for run in text.split(|c: char| !(c.is_alphanumeric() || joins(c))) {
        let body = run.trim_start_matches(joins).trim_end_matches(joins);
        if body.is_empty() {
            continue;
        }
        let lead = &run[..run.len() - run.trim_start_matches(joins).len()];
        let hashed = lead.ends_with('#');
        let parts = || {
            body.split(|c: char| !c.is_alphanumeric())
                .filter(|p| !p.is_empty())
        };
        if hashed || parts().nth(1).is_some() {
            buf.clear();
            if hashed {
                buf.push('#');
            }
            lower_into(body, &mut buf);
            if buf.len() <= MAX_TERM_BYTES {
                f(&buf);
            }
        }
        for part in parts() {
            buf.clear();
            lower_into(part, &mut buf);
            let single_letter = {
                let mut cs = buf.chars();
                matches!((cs.next(), cs.next()), (Some(c), None) if !c.is_numeric())
            };
            if single_letter || buf.len() > MAX_TERM_BYTES || STOPWORDS.contains(&buf.as_str()) {
                continue;
            }
            f(&buf);
        }
    }
}

/// Appends `s` lowercased to `out` (as `str::to_lowercase` does).
fn lower_into(s: &str, out: &mut String) {
    if s.is_ascii() {
        out.extend(s.bytes().map(|b| char::from(b.to_ascii_lowercase())));
    } else {
        out.push_str(&s.to_lowercase());
    }
}
