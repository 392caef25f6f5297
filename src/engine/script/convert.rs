//! Script values → JSON: errors naming the path inside the value, the byte budget, and the
//! nesting / cycle guard. Each adapter walks its own values; these are the rules they share.

use serde_json::Value as Json;

/// Deepest nesting accepted in a script value.
pub(crate) const MAX_DEPTH: usize = 128;

/// A conversion failure: the path inside the value and what is wrong.
#[derive(Debug)]
pub(crate) struct ConvError {
    path: Vec<String>,
    message: String,
    /// The value is over the conversion's byte budget (rather than of a shape no result takes).
    over_budget: bool,
}

impl ConvError {
    /// A failure at the current value.
    pub(crate) fn new(message: impl Into<String>) -> Self {
        ConvError {
            path: Vec::new(),
            message: message.into(),
            over_budget: false,
        }
    }

    /// Whether the value was refused for its size, over the conversion's byte budget.
    pub(crate) fn is_over_budget(&self) -> bool {
        self.over_budget
    }

    /// The same failure, one level down (`name` or `[i]`).
    pub(crate) fn under(mut self, segment: String) -> Self {
        self.path.push(segment);
        self
    }

    /// `field.path: message`, with `root` as the first segment.
    pub(crate) fn describe(&self, root: &str) -> String {
        let mut p = root.to_string();
        for seg in self.path.iter().rev() {
            if seg.starts_with('[') || p.is_empty() {
                p.push_str(seg);
            } else {
                p.push('.');
                p.push_str(seg);
            }
        }
        if p.is_empty() {
            self.message.clone()
        } else {
            format!("{p}: {}", self.message)
        }
    }
}

/// What each converted value (a number, a table, one table entry) costs the byte budget besides
/// its text: the size of the JSON value it becomes. A result of three million small numbers holds
/// no text, yet converting it takes seconds of native work the deadline cannot stop; charging
/// each value bounds a conversion's time and memory by the same cap as its text.
pub(crate) const VALUE_BYTES: usize = std::mem::size_of::<Json>();

/// The bytes `text` takes written as a JSON string's contents, as serde_json writes it: `"`,
/// `\\`, backspace, form feed, newline, CR and tab take two, the other C0 controls six
/// (`\u0001`), every other byte one. Caps count text as written, so a result or a state of
/// control characters cannot pass a cap that its escaped copy on the wire or on disk is six
/// times over.
pub(crate) fn written_len(text: &[u8]) -> usize {
    text.iter()
        .map(|&b| match b {
            b'"' | b'\\' | 0x08 | 0x0c | b'\n' | b'\r' | b'\t' => 2,
            0x00..=0x1f => 6,
            _ => 1,
        })
        .sum()
}

/// Byte budget of one conversion (all strings added up as written, JSON-escaped, plus
/// [`VALUE_BYTES`] a value), and the nesting guard.
#[derive(Debug)]
pub(crate) struct Budget {
    /// Bytes still allowed.
    pub left: usize,
    /// The cap, for messages.
    pub cap: usize,
}

impl Budget {
    /// A budget of `cap` bytes.
    pub(crate) fn new(cap: usize) -> Self {
        Budget { left: cap, cap }
    }

    /// Takes `bytes` of text from the budget.
    pub(crate) fn take(&mut self, bytes: usize) -> Result<(), ConvError> {
        if bytes > self.left {
            return Err(self.over());
        }
        self.left -= bytes;
        Ok(())
    }

    /// Charges one value (or table entry) against the budget, before converting it.
    pub(crate) fn value(&mut self) -> Result<(), ConvError> {
        self.take(VALUE_BYTES)
    }

    /// Fails, without charging, when `values` more values cannot fit: a container too big for
    /// the budget is refused before it is walked.
    pub(crate) fn room_for(&self, values: usize) -> Result<(), ConvError> {
        if values.saturating_mul(VALUE_BYTES) > self.left {
            return Err(self.over());
        }
        Ok(())
    }

    fn over(&self) -> ConvError {
        let mut e = ConvError::new(format!(
            "the result holds more than {} bytes (its text as written, JSON-escaped, and \
             {VALUE_BYTES} bytes for each value or table entry)",
            self.cap
        ));
        e.over_budget = true;
        e
    }

    /// A string counted against the budget, as written ([`written_len`]).
    pub(crate) fn string(&mut self, s: &str) -> Result<Json, ConvError> {
        self.take(written_len(s.as_bytes()))?;
        Ok(Json::String(s.to_owned()))
    }
}

/// Guards nesting depth and cycles: `enter` before a container, `leave` after.
#[derive(Debug, Default)]
pub(crate) struct Nesting(Vec<usize>);

impl Nesting {
    /// Enters the container identified by `key` (its address).
    pub(crate) fn enter(&mut self, key: usize) -> Result<(), ConvError> {
        if self.0.contains(&key) {
            return Err(ConvError::new("a value contains itself (cyclic)"));
        }
        if self.0.len() >= MAX_DEPTH {
            return Err(ConvError::new(format!(
                "values nested deeper than {MAX_DEPTH} levels"
            )));
        }
        self.0.push(key);
        Ok(())
    }

    /// Leaves the innermost container.
    pub(crate) fn leave(&mut self) {
        self.0.pop();
    }
}

/// A script number as JSON: NaN and infinities refused, whole floats become integers.
pub(crate) fn number(n: f64) -> Result<Json, ConvError> {
    if n.is_nan() {
        return Err(ConvError::new("number is NaN"));
    }
    if n.is_infinite() {
        return Err(ConvError::new(format!("number is {n}")));
    }
    if n.fract() == 0.0 && n.abs() <= 9_007_199_254_740_992.0 {
        return Ok(Json::from(n as i64));
    }
    Ok(serde_json::Number::from_f64(n)
        .map(Json::Number)
        .unwrap_or(Json::Null))
}
