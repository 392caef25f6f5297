//! Why a model call gave no usable answer: one error type for the HTTP client, the budgets
//! and the summarizer, naming the endpoint and never the API key.

/// Why a model call gave no usable answer; each names the endpoint, none holds the key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    /// No connection could be made (refused, no such host, TLS failure).
    #[error("the model at {endpoint} is unreachable: {cause}")]
    Unreachable {
        /// The URL called.
        endpoint: String,
        /// What the connection attempt said.
        cause: String,
    },
    /// The deadline passed before an answer came.
    #[error("the model at {endpoint} did not answer within {timeout_ms} ms")]
    Timeout {
        /// The URL called.
        endpoint: String,
        /// The deadline of the call.
        timeout_ms: u64,
    },
    /// The server answered with an error status (after retries, for 429 and 5xx).
    #[error("the model at {endpoint} answered HTTP {status}: {body}")]
    Http {
        /// The URL called.
        endpoint: String,
        /// The HTTP status.
        status: u16,
        /// The start of the body, the key removed.
        body: String,
    },
    /// The body was not a Chat Completions response.
    #[error("the model at {endpoint} sent a malformed answer: {cause}")]
    Malformed {
        /// The URL called.
        endpoint: String,
        /// What did not parse.
        cause: String,
    },
    /// The model declined to summarize.
    #[error("the model at {endpoint} refused: {reason}")]
    Refused {
        /// The refusal text or finish reason.
        reason: String,
        /// The URL called.
        endpoint: String,
    },
    /// The answer had no text.
    #[error("the model at {endpoint} sent an empty answer")]
    Empty {
        /// The URL called.
        endpoint: String,
    },
    /// The summary budget cannot hold the model's answer nor its identifiers.
    #[error("a summary budget of {max_tokens} tokens cannot hold the model's answer")]
    Budget {
        /// The request's summary budget.
        max_tokens: u64,
    },
    /// The turn was cancelled while the model was working.
    #[error("the model call was cancelled with its turn")]
    Cancelled,
    /// No model is available (none configured, or the client has none to lend).
    #[error("no model is available: {reason}")]
    Unavailable {
        /// Why.
        reason: String,
    },
    /// The turn's model calls (`maxCallsPerTurn`) are spent.
    #[error("the {limit} model calls this turn allows are spent")]
    CallsPerTurn {
        /// The configured limit.
        limit: u32,
    },
    /// The day's tokens (`maxTokensPerDay`) would be exceeded.
    #[error(
        "the model's day budget is spent: {spent} of {limit} tokens used in the last 24 h, this call needs up to {needed}"
    )]
    TokensPerDay {
        /// Tokens used in the last 24 hours.
        spent: u64,
        /// What this call could use.
        needed: u64,
        /// The configured limit.
        limit: u64,
    },
}
