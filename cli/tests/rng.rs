//! What the kill tests share: a small seeded generator, so a failing sequence can be replayed,
//! and reading a number from the environment.

/// A small deterministic generator (xorshift), so a failing sequence can be replayed.
pub struct Rng(pub u64);

impl Rng {
    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }

    /// True one time in `n`.
    #[allow(dead_code)] // used by the serve kills, not the replay crashes
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

/// The environment variable `name` as a number, when it is one.
pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}
