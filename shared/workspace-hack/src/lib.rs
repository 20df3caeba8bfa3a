//! No code. Depending on this crate gives a function's build the features every function's
//! build gives the dependencies they share (see its Cargo.toml), so `sam build` compiles each
//! shared dependency once for all six functions instead of once per feature variant.
