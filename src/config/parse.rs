//! Reading a config file's text safely: a size cap, a nesting cap (before the recursive JSON5
//! parser sees it), and serde's messages turned into ones that name the closest key.

use std::path::Path;

use crate::error::{Error, Result};

/// The largest config file read (4 MiB): configs are small, and a wrong path (a device, a log)
/// must not be read whole.
pub const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// The deepest nesting of `{` and `[` a config may have. The JSON5 parser recurses per level,
/// so a deeper file would overflow the stack and abort the process instead of failing cleanly.
pub const MAX_CONFIG_DEPTH: usize = 64;

/// Reads the config file at `path` as UTF-8 text, refusing one larger than
/// [`MAX_CONFIG_BYTES`].
pub(super) fn read_config_text(path: &Path) -> Result<String> {
    use std::io::Read;
    let too_big = || Error::Config {
        place: path.display().to_string(),
        message: format!("larger than {MAX_CONFIG_BYTES} bytes; is this the config file?"),
    };
    let file = std::fs::File::open(path).map_err(|e| Error::io("read config", path, e))?;
    if file.metadata().is_ok_and(|m| m.len() > MAX_CONFIG_BYTES) {
        return Err(too_big());
    }
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("read config", path, e))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(too_big());
    }
    String::from_utf8(bytes).map_err(|e| Error::Config {
        place: path.display().to_string(),
        message: format!("not UTF-8 text: {e}"),
    })
}

/// Refuses JSON5 nested deeper than [`MAX_CONFIG_DEPTH`], naming where it gets too deep.
/// Strings and comments are skipped, so brackets inside them do not count.
pub(super) fn check_nesting(text: &str, place: &str) -> Result<()> {
    let (mut depth, mut line, mut col) = (0usize, 1usize, 0usize);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        col += 1;
        match c {
            '\n' => {
                line += 1;
                col = 0;
            }
            '"' | '\'' => {
                while let Some(d) = chars.next() {
                    col += 1;
                    match d {
                        '\\' => {
                            chars.next();
                            col += 1;
                        }
                        '\n' => {
                            line += 1;
                            col = 0;
                        }
                        d if d == c => break,
                        _ => {}
                    }
                }
            }
            '/' if chars.peek() == Some(&'/') => {
                for d in chars.by_ref() {
                    if d == '\n' {
                        line += 1;
                        col = 0;
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut star = false;
                for d in chars.by_ref() {
                    if d == '\n' {
                        line += 1;
                        col = 0;
                    }
                    if star && d == '/' {
                        break;
                    }
                    star = d == '*';
                }
            }
            '{' | '[' => {
                depth += 1;
                if depth > MAX_CONFIG_DEPTH {
                    return Err(Error::Config {
                        place: format!("{place}:{line}:{col}"),
                        message: format!(
                            "nested deeper than {MAX_CONFIG_DEPTH} levels; a config is never this deep"
                        ),
                    });
                }
            }
            '}' | ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Turns serde's "unknown field `x`, expected one of `a`, `b`" into "unknown key `x` (did you
/// mean `a`?)", and drops the position json5 appends (the caller puts it in front).
pub(super) fn explain_serde_message(raw: &str) -> String {
    let message = raw.rsplit_once(" at line ").map_or(raw, |(m, _)| m);
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message.to_owned();
    };
    let Some((key, expected)) = rest.split_once('`') else {
        return message.to_owned();
    };
    let candidates: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    match crate::contract::closest(key, candidates.iter().copied()) {
        Some(best) => format!("unknown key `{key}` (did you mean `{best}`?)"),
        None if !candidates.is_empty() => {
            format!(
                "unknown key `{key}`; known keys here: {}",
                candidates.join(", ")
            )
        }
        None => format!("unknown key `{key}`"),
    }
}
