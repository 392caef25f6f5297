//! A map keyed by transcript entry id, for the per-message indexes a session keeps (the token
//! cache, recall's id lookup): an id the transcript store gave (`{:08x}`, eight lowercase hex
//! digits) is kept as its number, in 4 bytes and without an allocation of its own; any other
//! id (imported, made up by an engine) as its text. At 200,000 messages that is about 10 MB
//! less per map than a `String` key each.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use rustc_hash::FxHasher;

/// A hash map with a fast, non-keyed hash: the keys are the session's own entry ids.
type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// Entry id → `V`; looked up and filled by the id's text.
#[derive(Debug)]
pub(crate) struct IdMap<V> {
    /// Ids of eight lowercase hex digits, by their value.
    hex: FastMap<u32, V>,
    /// Every other id.
    other: FastMap<Box<str>, V>,
}

impl<V> Default for IdMap<V> {
    fn default() -> Self {
        IdMap {
            hex: FastMap::default(),
            other: FastMap::default(),
        }
    }
}

/// The value of an id of exactly eight lowercase hex digits (the store's `{:08x}`), which
/// formats back to the same text; `None` for any other id.
pub(crate) fn hex_id(id: &str) -> Option<u32> {
    // One pass: every message of every assembly is looked up by id in the token cache.
    let digits: &[u8; 8] = id.as_bytes().try_into().ok()?;
    let mut n = 0u32;
    for &c in digits {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => return None,
        };
        n = (n << 4) | u32::from(d);
    }
    Some(n)
}

impl<V> IdMap<V> {
    /// The value kept for `id`.
    pub(crate) fn get(&self, id: &str) -> Option<&V> {
        match hex_id(id) {
            Some(n) => self.hex.get(&n),
            None => self.other.get(id),
        }
    }

    /// Whether `id` has a value.
    pub(crate) fn contains_key(&self, id: &str) -> bool {
        self.get(id).is_some()
    }

    /// Keeps `value` for `id`, returning the value it replaces.
    pub(crate) fn insert(&mut self, id: &str, value: V) -> Option<V> {
        match hex_id(id) {
            Some(n) => self.hex.insert(n, value),
            None => self.other.insert(id.into(), value),
        }
    }

    /// How many ids have a value.
    pub(crate) fn len(&self) -> usize {
        self.hex.len() + self.other.len()
    }

    /// Keeps only the values `keep` says yes to.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&V) -> bool) {
        self.hex.retain(|_, v| keep(v));
        self.other.retain(|_, v| keep(v));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_stores_own_ids_are_kept_as_numbers() {
        assert_eq!(hex_id("00000001"), Some(1));
        assert_eq!(hex_id("ffffffff"), Some(u32::MAX));
        // Upper case, other lengths, signs and non-hex text would not format back the same.
        for id in [
            "0000000A",
            "0000001",
            "000000001",
            "+0000001",
            "0000000g",
            "",
            "toolu_1",
        ] {
            assert_eq!(hex_id(id), None, "{id}");
        }
    }

    #[test]
    fn ids_that_read_as_the_same_number_stay_apart() {
        let mut map = IdMap::default();
        assert_eq!(map.insert("0000000a", 1), None);
        assert_eq!(map.insert("0000000A", 2), None);
        assert_eq!(map.insert("a", 3), None);
        assert_eq!(map.insert("0000000a", 4), Some(1));
        assert_eq!(
            (map.get("0000000a"), map.get("0000000A"), map.get("a")),
            (Some(&4), Some(&2), Some(&3))
        );
        assert!(!map.contains_key("00000000a"));
        assert_eq!(map.len(), 3);
        map.retain(|v| *v != 2);
        assert_eq!((map.len(), map.get("0000000A")), (2, None));
    }
}
