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
///
/// ```
/// use ctxhost::services::recall::terms;
/// assert_eq!(terms("See src/foo.rs"), ["see", "src/foo.rs", "src", "foo", "rs"]);
/// assert_eq!(terms("mia_li_3668 and #123!"), ["mia_li_3668", "mia", "li", "3668", "#123", "123"]);
/// assert_eq!(terms("ERR_X."), ["err_x", "err"]);
/// ```
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for run in text.split(|c: char| !(c.is_alphanumeric() || joins(c))) {
        let body = run.trim_start_matches(joins).trim_end_matches(joins);
        if body.is_empty() {
            continue;
        }
        let lead = &run[..run.len() - run.trim_start_matches(joins).len()];
        let hashed = lead.ends_with('#');
        let parts: Vec<&str> = body
            .split(|c: char| !c.is_alphanumeric())
            .filter(|p| !p.is_empty())
            .collect();
        if parts.len() > 1 || hashed {
            let whole = if hashed {
                format!("#{}", body.to_lowercase())
            } else {
                body.to_lowercase()
            };
            if whole.len() <= MAX_TERM_BYTES {
                out.push(whole);
            }
        }
        for part in parts {
            let part = part.to_lowercase();
            let single_letter = part.chars().count() == 1 && !part.chars().all(|c| c.is_numeric());
            if single_letter || part.len() > MAX_TERM_BYTES || STOPWORDS.contains(&part.as_str()) {
                continue;
            }
            out.push(part);
        }
    }
    out
}
