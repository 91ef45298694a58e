//! What a library call hands back, for every library: on success the scope's launch token and the
//! call's record, on failure the token when launching may go on, the error naming its stage and what was
//! planned. Each library names its own record and error: `Done<'s, Info>`, `Failed<'s, Error, Info>`.

use crate::Gpu;

/// A completed call, and the launch token back.
#[derive(Debug)]
pub struct Done<'s, I> {
    /// The launch token, for the next launch.
    pub gpu: Gpu<'s>,
    /// What ran.
    pub info: I,
}

/// A failed call: the token back when the failure was certain (nothing ran, or a launch was refused or
/// faulted), `None` when a completion was uncertain and the process latched.
#[derive(Debug)]
pub struct Failed<'s, E, I> {
    /// The token, when launching may go on.
    pub gpu: Option<Gpu<'s>>,
    /// What failed, naming its stage.
    pub error: E,
    /// What was planned and what ran before the failure (boxed: a failure stays small to pass around).
    pub info: Box<I>,
}

impl<E: core::fmt::Display, I> core::fmt::Display for Failed<'_, E, I> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.error.fmt(f)
    }
}

impl<E: std::error::Error, I: core::fmt::Debug> std::error::Error for Failed<'_, E, I> {}
