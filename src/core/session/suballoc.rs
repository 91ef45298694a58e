//! The session's device memory manager: small and medium buffers carved from chunks, large ones
//! allocated directly (issue 11 item 1).
//!
//! A chunk is one platform allocation of [`CHUNK_BYTES`]; a carved buffer is (chunk, offset, length).
//! Buffers of one [`Pool`] share chunks, because a chunk is allocated with one descriptor (rights, cache
//! policy) and every buffer in it gets that descriptor's views. Inside a chunk a buddy allocator hands out
//! blocks of a power of two of pages, from one page up to [`LARGEST_CARVED`]; a buffer takes the smallest
//! block that holds its page-rounded size, and a freed block merges with its free buddy, so a chunk whose
//! buffers are all freed is one free block again. Blocks are taken lowest chunk and offset first, which
//! keeps the later chunks the emptiest and so the likeliest to be returned.
//!
//! What goes back to the platform, and when: a chunk whose last buffer is freed is returned, except that
//! each pool keeps up to [`SPARE_CHUNKS`] empty chunks for the next allocation (so a loop that allocates
//! and frees one small buffer makes no platform call); [`Carver::take_empty`] gives the spares back when
//! the device runs out of memory, and [`Carver::take_all`] everything at close. The session never
//! releases a carved buffer after a latch (it parks it), so a chunk holding a parked buffer is never
//! returned: "nothing is released to the platform after a latch" holds for chunks.
//!
//! This module is pure bookkeeping: it never calls the platform. The session allocates and frees the
//! chunks it asks for and returns.

use std::collections::BTreeSet;

/// Bytes of one chunk (2 MiB pages on the GPU: a chunk is 32 of them).
pub const CHUNK_BYTES: u64 = 64 << 20;
/// The largest buffer carved from a chunk; larger buffers get a platform allocation of their own.
pub const LARGEST_CARVED: u64 = 2 << 20;
/// Empty chunks a pool keeps for its next allocations instead of returning them.
pub const SPARE_CHUNKS: u32 = 1;

/// Which chunks a buffer may be carved from: the buffers of a pool share one platform descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pool {
    /// GPU-uncached data with a CPU view.
    Data = 0,
    /// GPU-cached, GPU-read-only data with a CPU view.
    Cached = 1,
    /// Data without a CPU view (device-only).
    Device = 2,
}

impl Pool {
    /// Every pool.
    pub const ALL: [Pool; 3] = [Pool::Data, Pool::Cached, Pool::Device];
}

/// Where a carved buffer lies: its pool, chunk, byte offset in the chunk and block order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Carve {
    /// The pool of its chunk.
    pub pool: Pool,
    /// The chunk, as the pool numbers them.
    pub chunk: u32,
    /// Byte offset of the buffer in the chunk.
    pub offset: u64,
    /// The block holds `2^order` pages.
    order: u8,
}

/// What the manager holds, summed over the pools.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CarverStats {
    /// Chunks held (each one platform allocation of [`CHUNK_BYTES`]).
    pub chunks: u64,
    /// Chunks held with no buffer in them.
    pub empty_chunks: u64,
    /// Carved buffers live (parked ones included).
    pub buffers: u64,
    /// Bytes of the blocks those buffers take (each a power of two of pages at least their size).
    pub block_bytes: u64,
    /// The largest free block in any chunk, in bytes (0 with no chunk).
    pub largest_free_block: u64,
}

impl CarverStats {
    /// Bytes of the chunks held.
    pub fn chunk_bytes(&self) -> u64 {
        self.chunks * CHUNK_BYTES
    }
}

struct Chunk<C> {
    backing: C,
    /// Buffers carved from it and not released.
    live: u32,
}

struct PoolChunks<C> {
    /// By chunk number; `None` for a number whose chunk was returned (reused by the next chunk).
    chunks: Vec<Option<Chunk<C>>>,
    vacant: Vec<u32>,
    /// Free blocks per order, as (chunk, first page): ordered, so the first is the lowest.
    free: Vec<BTreeSet<(u32, u32)>>,
    empty: u32,
    live: u64,
    block_pages: u64,
}

impl<C> PoolChunks<C> {
    fn new(orders: usize) -> Self {
        PoolChunks {
            chunks: Vec::new(),
            vacant: Vec::new(),
            free: (0..orders).map(|_| BTreeSet::new()).collect(),
            empty: 0,
            live: 0,
            block_pages: 0,
        }
    }
}

/// The buddy allocator over every pool's chunks, holding each chunk's platform allocation `C`.
pub struct Carver<C> {
    /// The platform page in bytes.
    page: u64,
    /// A chunk is `2^top` pages.
    top: u8,
    /// The largest carved block is `2^max_order` pages; `None`: the page is too large to carve at all.
    max_order: Option<u8>,
    pools: [PoolChunks<C>; 3],
}

impl<C> Carver<C> {
    /// A manager for a platform of `page`-byte pages (a power of two). With a page of more than
    /// [`LARGEST_CARVED`] nothing is carved: every buffer is allocated directly.
    pub fn new(page: u64) -> Self {
        let page = page.max(1);
        debug_assert!(page.is_power_of_two(), "the platform page is a power of two (negotiated at open)");
        let top = (CHUNK_BYTES / page).max(1).ilog2() as u8;
        let max_order = (page <= LARGEST_CARVED).then(|| (LARGEST_CARVED / page).ilog2() as u8);
        let orders = top as usize + 1;
        Carver { page, top, max_order, pools: [0, 1, 2].map(|_| PoolChunks::new(orders)) }
    }

    /// The block order a buffer of `bytes` bytes (page-rounded, non-zero) is carved with; `None` when it
    /// is larger than [`LARGEST_CARVED`] and gets an allocation of its own.
    pub fn order_for(&self, bytes: u64) -> Option<u8> {
        let max = self.max_order?;
        let pages = bytes.div_ceil(self.page).max(1);
        let order = pages.next_power_of_two().ilog2() as u8;
        (order <= max).then_some(order)
    }

    /// Bytes of a block of `order`.
    fn block_bytes(&self, order: u8) -> u64 {
        self.page << order
    }

    /// A free block of `order` in `pool`, taken; `None` when no chunk of the pool has one (add a chunk
    /// and ask again).
    pub fn carve(&mut self, pool: Pool, order: u8) -> Option<Carve> {
        let p = &mut self.pools[pool as usize];
        let from = (order..=self.top).find(|&k| !p.free[k as usize].is_empty())?;
        let (chunk, page) = p.free[from as usize].pop_first().expect("non-empty");
        // Split down to the order asked for: each split frees the upper half.
        for k in (order..from).rev() {
            p.free[k as usize].insert((chunk, page + (1 << k)));
        }
        let c = p.chunks[chunk as usize].as_mut().expect("a free block lies in a held chunk");
        if c.live == 0 {
            p.empty -= 1;
        }
        c.live += 1;
        p.live += 1;
        p.block_pages += 1 << order;
        Some(Carve { pool, chunk, offset: u64::from(page) * self.page, order })
    }

    /// Adds a chunk to `pool` (its platform allocation `backing`, of [`CHUNK_BYTES`]): all of it free.
    pub fn add_chunk(&mut self, pool: Pool, backing: C) -> u32 {
        let p = &mut self.pools[pool as usize];
        let chunk = Chunk { backing, live: 0 };
        let id = match p.vacant.pop() {
            Some(id) => {
                p.chunks[id as usize] = Some(chunk);
                id
            }
            None => {
                p.chunks.push(Some(chunk));
                (p.chunks.len() - 1) as u32
            }
        };
        p.free[self.top as usize].insert((id, 0));
        p.empty += 1;
        id
    }

    /// The platform allocation of `pool`'s chunk `chunk`.
    pub fn backing(&self, pool: Pool, chunk: u32) -> Option<&C> {
        self.pools[pool as usize].chunks.get(chunk as usize)?.as_ref().map(|c| &c.backing)
    }

    /// Releases the block of `carve` (which [`Carver::carve`] handed out and was not released since),
    /// merging it with its free buddies. When that empties its chunk and the pool already keeps
    /// [`SPARE_CHUNKS`] empty ones, the chunk is removed and its platform allocation returned, for the
    /// caller to free.
    pub fn release(&mut self, carve: Carve) -> Option<C> {
        let top = self.top;
        let p = &mut self.pools[carve.pool as usize];
        let mut page = (carve.offset / self.page) as u32;
        let mut k = carve.order;
        while k < top {
            let buddy = page ^ (1 << k);
            if !p.free[k as usize].remove(&(carve.chunk, buddy)) {
                break;
            }
            page = page.min(buddy);
            k += 1;
        }
        p.free[k as usize].insert((carve.chunk, page));
        p.live -= 1;
        p.block_pages -= 1 << carve.order;
        let c = p.chunks[carve.chunk as usize].as_mut().expect("a carved buffer's chunk is held");
        c.live -= 1;
        if c.live > 0 {
            return None;
        }
        if p.empty < SPARE_CHUNKS {
            p.empty += 1;
            return None;
        }
        Some(Self::remove_empty(p, top, carve.chunk))
    }

    /// Removes `chunk`, which holds no buffer (so it is one free block of order `top`).
    fn remove_empty(p: &mut PoolChunks<C>, top: u8, chunk: u32) -> C {
        let removed = p.free[top as usize].remove(&(chunk, 0));
        debug_assert!(removed, "an empty chunk is one free block");
        p.vacant.push(chunk);
        p.chunks[chunk as usize].take().expect("held").backing
    }

    /// Removes every empty chunk of every pool (the spares) and returns their platform allocations.
    pub fn take_empty(&mut self) -> Vec<C> {
        let top = self.top;
        let mut out = Vec::new();
        for p in &mut self.pools {
            let empty: Vec<u32> = (0..p.chunks.len() as u32)
                .filter(|&i| p.chunks[i as usize].as_ref().is_some_and(|c| c.live == 0))
                .collect();
            for chunk in empty {
                out.push(Self::remove_empty(p, top, chunk));
            }
            p.empty = 0;
        }
        out
    }

    /// Forgets every chunk and buffer (at close, when every buffer goes) and returns the chunks' platform
    /// allocations.
    pub fn take_all(&mut self) -> Vec<C> {
        let orders = self.top as usize + 1;
        let mut out = Vec::new();
        for p in &mut self.pools {
            let old = std::mem::replace(p, PoolChunks::new(orders));
            out.extend(old.chunks.into_iter().flatten().map(|c| c.backing));
        }
        out
    }

    /// What is held now.
    pub fn stats(&self) -> CarverStats {
        let mut s = CarverStats::default();
        for p in &self.pools {
            s.chunks += p.chunks.iter().flatten().count() as u64;
            s.empty_chunks += u64::from(p.empty);
            s.buffers += p.live;
            s.block_bytes += p.block_pages * self.page;
            if let Some(k) = (0..=self.top).rev().find(|&k| !p.free[k as usize].is_empty()) {
                s.largest_free_block = s.largest_free_block.max(self.block_bytes(k));
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u64 = 4096;

    #[test]
    fn sizes_map_to_power_of_two_blocks_up_to_the_largest_class() {
        let c = Carver::<u32>::new(PAGE);
        assert_eq!(c.order_for(PAGE), Some(0), "a 4-byte buffer rounds to one page");
        assert_eq!(c.order_for(2 * PAGE), Some(1));
        assert_eq!(c.order_for(3 * PAGE), Some(2), "three pages take a block of four");
        assert_eq!(c.order_for(LARGEST_CARVED), Some(9));
        assert_eq!(c.order_for(LARGEST_CARVED + PAGE), None, "past the largest class: allocated directly");
        let huge_pages = Carver::<u32>::new(4 << 20);
        assert_eq!(huge_pages.order_for(4 << 20), None, "a page past the largest class carves nothing");
    }

    #[test]
    fn blocks_split_and_merge_back_into_a_whole_chunk() {
        let mut c = Carver::new(PAGE);
        assert_eq!(c.carve(Pool::Data, 0), None, "no chunk yet");
        let chunk = c.add_chunk(Pool::Data, 'a');
        let a = c.carve(Pool::Data, 0).unwrap();
        let b = c.carve(Pool::Data, 0).unwrap();
        let d = c.carve(Pool::Data, 1).unwrap();
        assert_eq!((a.chunk, a.offset, b.offset, d.offset), (chunk, 0, PAGE, 2 * PAGE), "lowest first, packed");
        assert_eq!(c.stats().block_bytes, 4 * PAGE);
        assert_eq!(c.stats().largest_free_block, CHUNK_BYTES / 2);
        assert_eq!(c.release(b), None);
        assert_eq!(c.carve(Pool::Data, 0).unwrap().offset, PAGE, "a freed block is reused first");
        for x in [Carve { offset: PAGE, ..b }, a, d] {
            assert_eq!(c.release(x), None, "the first empty chunk stays as the pool's spare");
        }
        let s = c.stats();
        assert_eq!((s.chunks, s.empty_chunks, s.buffers, s.block_bytes), (1, 1, 0, 0));
        assert_eq!(s.largest_free_block, CHUNK_BYTES, "merged back into one block");
        // The spare is used again, not a new chunk.
        assert_eq!(c.carve(Pool::Data, 9).unwrap().chunk, chunk);
    }

    #[test]
    fn a_chunk_emptied_beside_a_spare_is_returned_and_its_number_reused() {
        let mut c = Carver::new(PAGE);
        let first = c.add_chunk(Pool::Data, 10);
        let whole = (CHUNK_BYTES / LARGEST_CARVED) as usize;
        let mut held: Vec<Carve> = (0..whole).map(|_| c.carve(Pool::Data, 9).unwrap()).collect();
        assert_eq!(c.carve(Pool::Data, 0), None, "the first chunk is full");
        let second = c.add_chunk(Pool::Data, 20);
        let in_second = c.carve(Pool::Data, 0).unwrap();
        assert_eq!(in_second.chunk, second);
        // Empty the first: it becomes the spare. Then empty the second: returned.
        for x in held.drain(..) {
            assert_eq!(c.release(x), None);
        }
        assert_eq!(c.stats().empty_chunks, 1);
        assert_eq!(c.release(in_second), Some(20), "a second empty chunk goes back to the platform");
        assert_eq!(c.stats().chunks, 1);
        assert_eq!(c.backing(Pool::Data, second), None);
        assert_eq!(c.backing(Pool::Data, first), Some(&10));
        assert_eq!(c.take_empty(), vec![10], "the spare goes back when memory runs out");
        assert_eq!(c.stats(), CarverStats::default());
        assert!([first, second].contains(&c.add_chunk(Pool::Data, 30)), "numbers of returned chunks are reused");
    }

    #[test]
    fn pools_never_share_chunks_and_close_takes_everything() {
        let mut c = Carver::new(PAGE);
        c.add_chunk(Pool::Data, 1);
        assert_eq!(c.carve(Pool::Device, 0), None, "a data chunk does not serve device-only buffers");
        c.add_chunk(Pool::Device, 2);
        let d = c.carve(Pool::Device, 3).unwrap();
        assert_eq!(c.backing(d.pool, d.chunk), Some(&2));
        c.carve(Pool::Data, 0).unwrap();
        let mut all = c.take_all();
        all.sort();
        assert_eq!(all, [1, 2]);
        assert_eq!(c.stats(), CarverStats::default());
    }
}
