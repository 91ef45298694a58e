//! omega-macros
