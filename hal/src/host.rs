//! The host-memory service: CPU-only memory for builds without an allocator of their own.

/// CPU-only memory.
pub trait HostMemory: Send + Sync {
    /// `bytes` of uninitialised memory, aligned for any scalar; null on failure.
    fn alloc(&self, bytes: usize) -> *mut u8;
    /// `bytes` of zeroed memory; null on failure.
    fn calloc(&self, bytes: usize) -> *mut u8;
    /// Releases memory from `alloc` or `calloc`.
    ///
    /// # Safety
    /// - `p` is null or came from this service's `alloc`/`calloc` and was not freed since.
    unsafe fn free(&self, p: *mut u8);
}

/// The C heap, shared by the backends that run in a hosted process.
#[derive(Debug, Default, Clone, Copy)]
pub struct LibcHeap;

impl HostMemory for LibcHeap {
    fn alloc(&self, bytes: usize) -> *mut u8 {
        // SAFETY: malloc has no preconditions; a null result is passed on as the failure.
        unsafe { libc::malloc(bytes.max(1)) as *mut u8 }
    }

    fn calloc(&self, bytes: usize) -> *mut u8 {
        // SAFETY: calloc has no preconditions; a null result is passed on as the failure.
        unsafe { libc::calloc(1, bytes.max(1)) as *mut u8 }
    }

    unsafe fn free(&self, p: *mut u8) {
        // SAFETY: the caller guarantees `p` is null or a live pointer from malloc/calloc above.
        unsafe { libc::free(p as *mut libc::c_void) }
    }
}
