//! The 64-bit FNV-1a hash: tiny, and fixed forever (unlike `DefaultHasher`), so what is hashed
//! in one process can be compared in the next (a client mirror's fingerprints, the directory
//! names an earlier ctxhost chose, a replay's message keys).

/// A running FNV-1a hash; `.0` is the value so far.
pub(crate) struct Fnv(pub(crate) u64);

impl Fnv {
    /// A hash of nothing yet.
    pub(crate) fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    /// Hashes `bytes` in.
    pub(crate) fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}
