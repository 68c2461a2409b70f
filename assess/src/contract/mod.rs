//! The contract (SPEC §3): what it says (`model`), reading it from TOML with file/line
//! diagnostics, every error at once (`parse`), and compiling it: each property's strategy an
//! accepted or rejected candidate with its obligations (`compile`).

mod compile;
mod model;
mod parse;

pub use compile::{Compiled, Missing, PropertyStatus, STALE_AUTHORITY_EXCLUSION, Status};
pub use model::{Contract, Grants, Property, Route, Strategy};
pub use parse::{ContractError, Diagnostic, Premise, PremiseKind, PremiseStatus};
