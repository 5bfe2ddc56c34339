//! Shared fixtures for Gangway's criterion benchmarks (see `benches/`).
