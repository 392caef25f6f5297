//! What a model charges, and the price tables `compare` reads.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The model whose prices apply when none is named.
pub const DEFAULT_MODEL: &str = "claude-sonnet-4";

/// What a model charges, in dollars per million tokens.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Prices {
    /// Fresh (uncached) input.
    pub input: f64,
    /// Input served from the prompt cache.
    pub cached_input: f64,
    /// Output.
    pub output: f64,
}

impl Prices {
    /// The dollars for `fresh` and `cached` input tokens and `output` tokens.
    pub fn cost(&self, fresh: u64, cached: u64, output: u64) -> f64 {
        (fresh as f64 * self.input
            + cached as f64 * self.cached_input
            + output as f64 * self.output)
            / 1_000_000.0
    }
}

/// The built-in price table (list prices per million tokens, cached input as cache reads;
/// check your own contract and pass `--prices` when it differs).
pub fn default_prices() -> BTreeMap<String, Prices> {
    let table = [
        ("claude-sonnet-4", 3.00, 0.30, 15.00),
        ("claude-opus-4", 15.00, 1.50, 75.00),
        ("claude-haiku-3.5", 0.80, 0.08, 4.00),
        ("gpt-4.1", 2.00, 0.50, 8.00),
        ("gpt-4o", 2.50, 1.25, 10.00),
        ("gpt-4o-mini", 0.15, 0.075, 0.60),
    ];
    table
        .into_iter()
        .map(|(name, input, cached_input, output)| {
            (
                name.to_owned(),
                Prices {
                    input,
                    cached_input,
                    output,
                },
            )
        })
        .collect()
}

/// Reads a price table: a JSON object of model name to `{input, cachedInput, output}`.
pub fn load_prices(path: &Path) -> Result<BTreeMap<String, Prices>> {
    let text =
        std::fs::read_to_string(path).map_err(|e| Error::io("read the price table", path, e))?;
    serde_json::from_str(&text).map_err(|e| Error::Config {
        place: format!("{}:{}:{}", path.display(), e.line(), e.column()),
        message: format!(
            "a price table is {{\"model\": {{\"input\": 3.0, \"cachedInput\": 0.3, \"output\": 15.0}}}} (dollars per million tokens): {e}"
        ),
    })
}
