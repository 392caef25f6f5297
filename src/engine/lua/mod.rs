//! Lua (Luau) engines. Being written.
