//! Limits and the deadline watchdog shared by the Lua and Rhai adapters. Being written.
