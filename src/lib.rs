//! omega
