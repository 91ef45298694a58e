//! The CPU threads that move the caller's side of large staged copies (`visibility.rs`), started at the
//! first copy that needs them, parked between copies and joined when the device closes.
//!
//! Why they persist: spawning and joining eight threads cost 230-260 µs on the 2-core build machine,
//! paid by every staged copy of 1 MiB or more while each copy made its crew afresh; a host-pointer
//! library entry makes up to three such copies, against a floor of about 400 µs for its 21 MB at the
//! copy engine's speed. Waking parked threads costs a futex wake each, and a worker that finished a copy
//! spins a moment before it parks, so the next copy of a call (W after x, y after the product) finds
//! it awake.
//!
//! The protocol of one copy: the caller publishes a job under the mutex (a new generation), the
//! workers take it, and each moves its share of piece `i` once the caller allowed it (`allowed > i`),
//! then records that it has moved pieces `0..=i` in its own progress word; the caller's `wait_done(i)`
//! waits until every worker's word says so before it hands a slot of the ring to the copy engine. The
//! caller may allow several pieces ahead (the ring's slots), so one total of shares moved would not do:
//! a worker ahead on later pieces would make up for one still on piece `i`. Whatever the outcome, the
//! caller returns only after every worker checked out of the job (`left`), so no worker touches the
//! caller's bytes or the ring after the copy returned.

use crate::error::HalError;
use crate::sync;

/// The share a worker moves of one piece of a job.
pub(crate) trait CrewJob: Copy + Send + 'static {
    /// Moves worker `worker`'s share (of `threads`) of piece `piece`.
    ///
    /// # Safety
    /// - The job's memory is live: called only between the job's publication and the return of
    ///   [`Crew::run`] that published it.
    /// - Piece `piece` was allowed by that run's protocol, and the protocol hands its bytes to the CPU
    ///   until `wait_done(piece)` returned; each (piece, worker) pair is moved once.
    unsafe fn move_share(&self, piece: u64, worker: u64, threads: u64);
}

/// How long a worker that finished a job spins for the next before it parks: enough for the next copy
/// of the same library call (x, then W, then y after the product), short enough that eight idle
/// threads give their cores back soon.
#[cfg(not(loom))]
const SPIN_BEFORE_PARK: std::time::Duration = std::time::Duration::from_micros(50);

/// What the caller publishes for one copy.
struct Slot<J> {
    /// Raised once per job; a worker runs a generation once.
    generation: u64,
    /// The job of the current generation, its piece count and the workers it uses.
    job: Option<(J, u64, u64)>,
    /// The crew is being dropped: workers return.
    shutdown: bool,
}

/// The state the caller and the workers share.
struct Shared<J> {
    slot: sync::Mutex<Slot<J>>,
    wake: sync::Condvar,
    /// `slot.generation`, readable without the lock, for the spin before parking.
    generation: sync::AtomicU64,
    /// Pieces the workers may move: `0 .. allowed`.
    allowed: sync::AtomicU64,
    /// Per worker, the pieces of the current job it has moved its share of: `0 .. progress[w]`.
    progress: Box<[sync::AtomicU64]>,
    /// The copy failed: workers leave the job at their next wait.
    abort: sync::AtomicBool,
    /// Workers that checked out of the current job.
    left: sync::AtomicU64,
}

/// Parked worker threads of staged copies.
pub(crate) struct Crew<J: CrewJob> {
    shared: sync::Arc<Shared<J>>,
    workers: Vec<sync::thread::JoinHandle<()>>,
}

impl<J: CrewJob> Crew<J> {
    /// `threads` workers, started now and parked; refused with the system's reason when a thread cannot
    /// be started (those started are joined again).
    pub(crate) fn start(threads: u64) -> Result<Self, HalError> {
        let shared = sync::Arc::new(Shared {
            slot: sync::Mutex::new(Slot { generation: 0, job: None, shutdown: false }),
            wake: sync::Condvar::new(),
            generation: sync::AtomicU64::new(0),
            allowed: sync::AtomicU64::new(0),
            progress: (0..threads.max(1)).map(|_| sync::AtomicU64::new(0)).collect(),
            abort: sync::AtomicBool::new(false),
            left: sync::AtomicU64::new(0),
        });
        let mut crew = Crew { shared, workers: Vec::new() };
        for w in 0..threads.max(1) {
            let shared = sync::Arc::clone(&crew.shared);
            let spawned = sync::thread::Builder::new()
                .name(format!("omega-copy-{w}"))
                .spawn(move || worker(&shared, w))
                .map_err(|e| HalError::Unsupported(format!("staged copy: cannot start copy thread {w}: {e}")))?;
            crew.workers.push(spawned);
        }
        Ok(crew)
    }

    /// Workers in the crew.
    pub(crate) fn threads(&self) -> u64 {
        self.workers.len() as u64
    }

    /// Runs one copy of `pieces` pieces whose shares `job` moves on its first `threads` workers (at most
    /// the crew's): `protocol` drives it with `allow(i)` (the workers may move piece `i` and those
    /// before it) and `wait_done(i)` (every share of pieces `0..=i` was moved). Returns what `protocol`
    /// returned, once every worker left the job, whether it succeeded, failed or panicked.
    ///
    /// # Safety
    /// - `job`'s memory stays live, and the bytes of a piece allowed belong to the workers until
    ///   `wait_done` of it returned, as [`CrewJob::move_share`] requires; `protocol` only calls
    ///   `wait_done(i)` after `allow(i)`.
    pub(crate) unsafe fn run<R, E>(
        &mut self,
        job: J,
        pieces: u64,
        threads: u64,
        protocol: impl FnOnce(&dyn Fn(u64), &dyn Fn(u64)) -> Result<R, E>,
    ) -> Result<R, E> {
        let threads = threads.clamp(1, self.threads());
        let s = &*self.shared;
        // Every worker left the last job (the guard of the last run waited for it), so none reads these
        // until it takes the new generation under the mutex, which orders these stores before its loads.
        s.allowed.store(0, sync::Ordering::Relaxed);
        s.progress.iter().for_each(|p| p.store(0, sync::Ordering::Relaxed));
        s.abort.store(false, sync::Ordering::Relaxed);
        s.left.store(0, sync::Ordering::Relaxed);
        {
            let mut slot = sync::lock(&s.slot);
            slot.generation += 1;
            slot.job = Some((job, pieces, threads));
            s.generation.store(slot.generation, sync::Ordering::Release);
        }
        s.wake.notify_all();
        let guard = LeaveGuard { shared: s, workers: self.threads(), ok: false };
        let allow = |i: u64| s.allowed.store(i + 1, sync::Ordering::Release);
        let wait_done = |i: u64| {
            for p in &s.progress[..threads as usize] {
                let mut spins = 0u32;
                while p.load(sync::Ordering::Acquire) <= i {
                    spin(&mut spins);
                }
            }
        };
        let r = protocol(&allow, &wait_done);
        let mut guard = guard;
        guard.ok = r.is_ok();
        drop(guard);
        r
    }
}

/// Waits, when a run ends (returned or unwound), until every worker left its job; a run that did not
/// succeed first tells the workers to stop.
struct LeaveGuard<'a, J> {
    shared: &'a Shared<J>,
    workers: u64,
    ok: bool,
}

impl<J> Drop for LeaveGuard<'_, J> {
    fn drop(&mut self) {
        if !self.ok {
            self.shared.abort.store(true, sync::Ordering::Release);
        }
        let mut spins = 0u32;
        while self.shared.left.load(sync::Ordering::Acquire) < self.workers {
            spin(&mut spins);
        }
    }
}

impl<J: CrewJob> Drop for Crew<J> {
    fn drop(&mut self) {
        sync::lock(&self.shared.slot).shutdown = true;
        self.shared.wake.notify_all();
        for w in self.workers.drain(..) {
            // A worker that panicked has nothing left to release; the close goes on.
            let _ = w.join();
        }
    }
}

/// A worker: takes each new generation's job, moves its shares of every piece as the caller allows
/// them, checks out, and waits for the next.
fn worker<J: CrewJob>(s: &Shared<J>, w: u64) {
    let mut seen = 0u64;
    loop {
        // Not under loom, whose models must not spin unboundedly: there a worker parks at once. The
        // clock is read once every 64 rounds (a `pause` takes 10-140 cycles, by CPU).
        #[cfg(not(loom))]
        {
            let spin_from = std::time::Instant::now();
            let mut rounds = 0u32;
            while s.generation.load(sync::Ordering::Acquire) == seen {
                rounds = rounds.wrapping_add(1);
                if rounds.is_multiple_of(64) && spin_from.elapsed() >= SPIN_BEFORE_PARK {
                    break;
                }
                core::hint::spin_loop();
            }
        }
        let (job, pieces, threads) = {
            let mut slot = sync::lock(&s.slot);
            while slot.generation == seen && !slot.shutdown {
                slot = sync::wait(&s.wake, slot);
            }
            if slot.shutdown {
                return;
            }
            seen = slot.generation;
            slot.job.expect("every generation carries its job")
        };
        if w < threads {
            'pieces: for i in 0..pieces {
                let mut spins = 0u32;
                while s.allowed.load(sync::Ordering::Acquire) <= i {
                    if s.abort.load(sync::Ordering::Acquire) {
                        break 'pieces;
                    }
                    spin(&mut spins);
                }
                // SAFETY: the job is the current generation's, whose run waits for this worker's
                // check-out below before it returns; piece `i` was allowed (the Acquire load above pairs
                // with `allow`'s Release), and this worker moves its share of it once.
                unsafe { job.move_share(i, w, threads) };
                s.progress[w as usize].store(i + 1, sync::Ordering::Release);
            }
        }
        s.left.fetch_add(1, sync::Ordering::Release);
    }
}

/// One step of a short busy wait: spin first, then give the core away (a piece takes tens of µs).
/// Under loom every step yields, so a model's waits end.
fn spin(spins: &mut u32) {
    *spins += 1;
    if cfg!(loom) || *spins >= 256 {
        sync::thread::yield_now();
    } else {
        core::hint::spin_loop();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Copies `src` into `dst` in pieces of `size` bytes, each cut in 64-byte-aligned shares.
    #[derive(Clone, Copy)]
    struct Copy {
        src: *const u8,
        dst: *mut u8,
        len: u64,
        size: u64,
    }
    // SAFETY: the test's buffers outlive every run that carries their addresses.
    unsafe impl Send for Copy {}

    impl CrewJob for Copy {
        unsafe fn move_share(&self, piece: u64, worker: u64, threads: u64) {
            let off = piece * self.size;
            let n = self.size.min(self.len - off);
            let each = (n / threads) & !63;
            let (a, b) = (each * worker, if worker + 1 == threads { n } else { each * (worker + 1) });
            // SAFETY: `off + b <= len`; shares are disjoint; the buffers are live (the caller's promise).
            unsafe {
                core::ptr::copy_nonoverlapping(
                    self.src.add((off + a) as usize),
                    self.dst.add((off + a) as usize),
                    (b - a) as usize,
                )
            };
        }
    }

    #[test]
    fn one_crew_moves_every_byte_of_copies_after_copies_and_leaves_after_a_failure() {
        let mut crew = Crew::<Copy>::start(4).unwrap();
        for (len, size, threads) in [(1u64 << 20, 256 << 10, 4u64), (3 << 20, 1 << 20, 3), (100_000, 40_000, 4)] {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            let mut dst = vec![0u8; len as usize];
            let job = Copy { src: src.as_ptr(), dst: dst.as_mut_ptr(), len, size };
            let pieces = len.div_ceil(size);
            // SAFETY: both buffers live through the run; the protocol waits for each piece it allowed.
            let r: Result<(), ()> = unsafe {
                crew.run(job, pieces, threads, |allow, wait_done| {
                    for i in 0..pieces {
                        allow(i);
                        wait_done(i);
                    }
                    Ok(())
                })
            };
            r.unwrap();
            assert!(src == dst, "{len} bytes in pieces of {size} over {threads} threads");
        }
        // A failed run: piece 0 allowed, then the protocol gives up; the run returns once the workers left.
        let src = vec![1u8; 1 << 20];
        let mut dst = vec![0u8; 1 << 20];
        let job = Copy { src: src.as_ptr(), dst: dst.as_mut_ptr(), len: 1 << 20, size: 1 << 18 };
        // SAFETY: as above.
        let r: Result<(), &str> = unsafe {
            crew.run(job, 4, 4, |allow, wait_done| {
                allow(0);
                wait_done(0);
                Err("copy engine gave up")
            })
        };
        assert_eq!(r, Err("copy engine gave up"));
        assert!(dst[..1 << 18].iter().all(|&b| b == 1) && dst[1 << 18..].iter().all(|&b| b == 0), "only piece 0");
        assert_eq!(crew.threads(), 4);
    }

    /// Marks (piece, worker) moved; worker 1's share of piece 1 lags 30 ms behind.
    #[derive(Clone, Copy)]
    struct Lagging {
        marks: *const [sync::AtomicBool; 8],
    }
    // SAFETY: the marks outlive the run.
    unsafe impl Send for Lagging {}

    impl CrewJob for Lagging {
        unsafe fn move_share(&self, piece: u64, worker: u64, threads: u64) {
            if (piece, worker) == (1, 1) {
                std::thread::sleep(std::time::Duration::from_millis(30));
            }
            // SAFETY: the marks are live (the caller's promise).
            let marks = unsafe { &*self.marks };
            marks[(piece * threads + worker) as usize].store(true, sync::Ordering::Relaxed);
        }
    }

    #[test]
    fn wait_done_waits_for_every_worker_even_when_others_ran_pieces_ahead() {
        let marks: Box<[sync::AtomicBool; 8]> = Box::default();
        let mut crew = Crew::<Lagging>::start(2).unwrap();
        let job = Lagging { marks: &*marks };
        // SAFETY: the marks outlive the run; every piece allowed is waited for.
        let r: Result<(), ()> = unsafe {
            crew.run(job, 4, 2, |allow, wait_done| {
                allow(3);
                // Worker 0 moves pieces 0-3 while worker 1 sleeps in piece 1: five shares done, more
                // than piece 1's four, yet piece 1 is not.
                wait_done(1);
                let moved = |i: usize| marks[i].load(sync::Ordering::Relaxed);
                assert!((0..4).all(moved), "wait_done(1) returned before worker 1 moved piece 1");
                wait_done(3);
                Ok(())
            })
        };
        r.unwrap();
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    //! The crew's protocol under loom: each piece moved once, visible to the caller when `wait_done`
    //! returns, and no worker inside a job once `run` returned, across a failed copy and the next one (a
    //! share written after it would race with the caller's reads). One worker: with two, the spin waits
    //! pass loom's branch bound; the cutting of pieces among workers is the host test's above. Taking
    //! out the wait for the workers' check-out, or the Acquire of `wait_done`, fails this model.
    use super::*;
    use loom::cell::UnsafeCell;

    #[derive(Clone, Copy)]
    struct Mark {
        cells: *const [UnsafeCell<u64>; 4],
    }
    // SAFETY: the cells outlive the runs (the model drops the crew first).
    unsafe impl Send for Mark {}

    impl CrewJob for Mark {
        unsafe fn move_share(&self, piece: u64, worker: u64, threads: u64) {
            // SAFETY: the cells are live (the caller's promise).
            let cells = unsafe { &*self.cells };
            // SAFETY: the protocol gives this worker the cell of (piece, worker); loom checks that claim.
            cells[(piece * threads + worker) as usize].with_mut(|p| unsafe { *p += 1 });
        }
    }

    #[test]
    fn shares_are_moved_once_and_seen_by_the_caller_and_none_after_the_run() {
        loom::model(|| {
            let cells: Box<[UnsafeCell<u64>; 4]> = Box::new([0, 0, 0, 0].map(UnsafeCell::new));
            let mut crew = Crew::<Mark>::start(1).unwrap();
            let job = Mark { cells: &*cells };
            // A copy of one piece; one of two pieces that fails after allowing its second, without
            // waiting for it (a copy-engine wait that failed); another copy of one piece.
            for (n, (pieces, fail)) in [(1, false), (2, true), (1, false)].into_iter().enumerate() {
                let protocol = |allow: &dyn Fn(u64), wait_done: &dyn Fn(u64)| {
                    allow(0);
                    wait_done(0);
                    // SAFETY: no worker holds piece 0 once wait_done(0) returned.
                    let seen = cells[0].with(|p| unsafe { *p });
                    assert_eq!(seen, n as u64 + 1, "piece 0 moved once a run");
                    if fail {
                        allow(1);
                        return Err(());
                    }
                    Ok(())
                };
                // SAFETY: the cells outlive the run; the protocol waits for each piece it allowed or fails.
                let r: Result<(), ()> = unsafe { crew.run(job, pieces, 1, protocol) };
                assert_eq!(r.is_err(), fail);
            }
            // No worker is inside a job once run returned, even the failed one's piece 1: these reads race
            // with nothing.
            // SAFETY: every worker left every job.
            let moved: Vec<u64> = cells.iter().map(|c| c.with(|p| unsafe { *p })).collect();
            assert!(moved[0] == 3 && moved[1] <= 1 && moved[2..] == [0, 0], "{moved:?}");
            drop(crew);
        });
    }
}
