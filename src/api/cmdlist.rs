//! The typed shell: a list bound to a scope, filled with [`Launch`]es, submitted with the launch token.

use core::any::Any;
use core::marker::PhantomData;

use crate::core::cmdlist::{CmdList, CmdListError, CmdListOpts, CmdListStats, ListCompletion, Result};
use crate::error::Error;
use crate::launch::Launch;
use crate::scope::{Gpu, Scope};
use crate::session::runtime;

/// A command list of scope `'s` whose launches borrow what they name for `'k`.
///
/// A [`Launch`] keeps the buffers it names borrowed for its `'k`; the list carries that `'k`, so a buffer a
/// recorded launch names can be neither freed nor written from the CPU while the list can still submit it.
/// Dropping the list releases its stamp area (it needs the session lock, which the scope holds), then
/// what it [holds](CmdListBuilder::hold).
pub struct CmdListBuilder<'k, 's> {
    // Declared before `held`, so the list (which can submit launches naming it) goes first.
    list: CmdList<'static>,
    held: Vec<Box<dyn Any>>,
    _launches: PhantomData<&'k ()>,
    // Invariant in 's, like the scope's own brand.
    _scope: PhantomData<fn(&'s ()) -> &'s ()>,
    _not_send: PhantomData<*const ()>,
}

static_assertions::assert_not_impl_any!(CmdListBuilder<'static, 'static>: Send, Sync);

impl core::fmt::Debug for CmdListBuilder<'_, '_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.list.fmt(f)
    }
}

impl<'s> Scope<'s> {
    /// An empty command list with the default options (a barrier before each dependent launch).
    pub fn cmdlist<'k>(&'s self) -> Result<CmdListBuilder<'k, 's>> {
        self.cmdlist_with(CmdListOpts::default())
    }

    /// An empty command list with `opts`.
    pub fn cmdlist_with<'k>(&'s self, opts: CmdListOpts) -> Result<CmdListBuilder<'k, 's>> {
        // The scope's lock token proves this thread holds the lock.
        let list = CmdList::create_locked(runtime(), Some(&opts))?;
        Ok(CmdListBuilder {
            list,
            held: Vec::new(),
            _launches: PhantomData,
            _scope: PhantomData,
            _not_send: PhantomData,
        })
    }
}

impl<'k, 's> CmdListBuilder<'k, 's> {
    /// Records `launch` (checked against its kernel's parameters and the session's launch checks; nothing
    /// runs). Returns its index.
    pub fn add(&mut self, launch: &Launch<'k, 's>) -> Result<usize> {
        let list = &mut self.list;
        launch.with_spec(|spec| list.add(spec)).map(|i| i as usize)
    }

    /// Records `launch` marked independent: it may overlap the launch before it.
    pub fn add_independent(&mut self, launch: &Launch<'k, 's>) -> Result<usize> {
        let i = self.add(launch)?;
        self.list.mark_independent(i as u32)?;
        Ok(i)
    }

    /// Marks launch `index` independent.
    pub fn mark_independent(&mut self, index: usize) -> Result<()> {
        let index = u32::try_from(index).unwrap_or(u32::MAX);
        self.list.mark_independent(index)
    }

    /// Keeps `held` until the list is dropped (it goes after the list itself). What recorded launches
    /// name that no caller owns (a library add's own workspace) then lives exactly as long as the list
    /// that can submit them. Hold it before adding the launches that name it.
    pub fn hold(&mut self, held: impl Any) {
        self.held.push(Box::new(held));
    }

    /// Launches recorded.
    pub fn len(&self) -> usize {
        self.list.count() as usize
    }

    /// True with no launch recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets the recorded launches (the buffers they named stay borrowed, and what the list holds stays
    /// held, until the list is dropped).
    pub fn reset(&mut self) -> Result<()> {
        self.list.reset()
    }

    /// Completion timestamps of the last completed submission's launches, platform ns (0: not released).
    pub fn stamps(&self) -> Vec<u64> {
        self.list.stamps_vec()
    }

    /// What the list has done.
    pub fn stats(&self) -> CmdListStats {
        self.list.stats()
    }

    /// The options.
    pub fn options(&self) -> CmdListOpts {
        self.list.options()
    }

    /// The fixed name of the list's barrier mode.
    pub fn barrier_name(&self) -> &'static str {
        self.list.barrier_name()
    }

    /// True once an uncertain completion latched the list.
    pub fn is_latched(&self) -> bool {
        self.list.is_latched()
    }

    /// The core list (for what the typed shell does not wrap).
    pub fn core(&self) -> &CmdList<'static> {
        &self.list
    }
}

/// A completed submission, and the token for the next launch.
#[derive(Debug)]
pub struct Submitted<'s> {
    /// The launch token, back.
    pub gpu: Gpu<'s>,
    /// Submit to second marker, platform-clock ns.
    pub elapsed_ns: u64,
    /// The first marker word observed.
    pub marker: u32,
    /// Launches submitted.
    pub launches: usize,
}

/// A failed submission. `gpu` is the token back when the failure was certain (a refusal before submit, a
/// kernel fault); `None` when the completion was uncertain and the list and the process latched.
#[derive(Debug)]
pub struct SubmitError<'s> {
    /// The token, when launching may go on.
    pub gpu: Option<Gpu<'s>>,
    /// What failed, naming its stage.
    pub error: CmdListError,
}

impl core::fmt::Display for SubmitError<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for SubmitError<'_> {}

impl From<SubmitError<'_>> for Error {
    fn from(e: SubmitError<'_>) -> Error {
        e.error.into()
    }
}

impl<'s> Gpu<'s> {
    /// Submits every launch of `list` as one submission and waits once for it to complete.
    pub fn submit(self, list: &mut CmdListBuilder<'_, 's>) -> core::result::Result<Submitted<'s>, SubmitError<'s>> {
        match list.list.submit() {
            Ok(ListCompletion { elapsed_ns, marker, launches }) => {
                Ok(Submitted { gpu: self, elapsed_ns, marker, launches: launches as usize })
            }
            Err(error) if runtime().is_blocked() => Err(SubmitError { gpu: None, error }),
            Err(error) => Err(SubmitError { gpu: Some(self), error }),
        }
    }
}
