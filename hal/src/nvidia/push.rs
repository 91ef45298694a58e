//! Pushbuffer and GPFIFO encoders: pure functions from method numbers and values to the dwords the GPU's
//! host (PBDMA) reads. Nothing here touches a device, so every encoding is unit-tested.
//!
//! Method header (clc56f.h): bits 11:0 method byte offset >> 2, 15:13 subchannel, 28:16 count (or the
//! immediate value), 31:29 SEC_OP. GPFIFO entry (clc86f.h): pushbuffer VA bits 39:2 in 39:2, LEVEL
//! (subroutine) bit 41, length in dwords in 62:42.

/// Subchannel of host (channel-class) methods: semaphores.
pub const SUBC_HOST: u32 = 0;
/// Subchannel the compute object is bound to.
pub const SUBC_COMPUTE: u32 = 1;
/// Subchannel the copy-engine object is bound to.
pub const SUBC_COPY: u32 = 4;

/// SEC_OP of a method header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum SecOp {
    /// Each data dword goes to the next method.
    Incrementing = 1,
    /// Every data dword goes to the same method.
    NonIncrementing = 3,
    /// The 13-bit count field is the data itself.
    Immediate = 4,
    /// The first dword goes to the method, the rest to the next one.
    IncrementOnce = 5,
}

/// A method header. `method` is the byte offset from the class header; `count` is at most 0x1fff.
pub const fn header(op: SecOp, subc: u32, method: u32, count: u32) -> u32 {
    ((op as u32) << 29) | ((count & 0x1fff) << 16) | ((subc & 7) << 13) | ((method >> 2) & 0xfff)
}

/// Host methods of the channel class (clc56f.h / clc86f.h).
pub mod host {
    /// SEM_ADDR_LO; SEM_ADDR_HI, SEM_PAYLOAD_LO/HI and SEM_EXECUTE follow.
    pub const SEM_ADDR_LO: u32 = 0x5c;
    /// SEM_EXECUTE OPERATION = RELEASE.
    pub const SEM_OP_RELEASE: u32 = 1;
    /// SEM_EXECUTE OPERATION = ACQ_CIRC_GEQ.
    pub const SEM_OP_ACQ_CIRC_GEQ: u32 = 3;
    /// SEM_EXECUTE RELEASE_WFI: wait for the engine to go idle before releasing.
    pub const SEM_RELEASE_WFI: u32 = 1 << 20;
    /// SEM_EXECUTE PAYLOAD_SIZE = 64 bit.
    pub const SEM_PAYLOAD_64: u32 = 1 << 24;
    /// SEM_EXECUTE RELEASE_TIMESTAMP: the GPU's nanosecond time goes to address + 8.
    pub const SEM_RELEASE_TIMESTAMP: u32 = 1 << 25;
}

/// Compute-class methods (clcbc0.h; the same offsets since Ampere).
pub mod compute {
    /// SET_OBJECT (any class).
    pub const SET_OBJECT: u32 = 0x000;
    /// SET_SHADER_SHARED_MEMORY_WINDOW_A (upper), _B (lower).
    pub const SET_SHADER_SHARED_MEMORY_WINDOW_A: u32 = 0x2a0;
    /// SEND_PCAS_A: QMD address >> 8.
    pub const SEND_PCAS_A: u32 = 0x2b4;
    /// SEND_SIGNALING_PCAS2_B: the PCAS action.
    pub const SEND_SIGNALING_PCAS2_B: u32 = 0x2c0;
    /// SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A (upper), _B (lower), _C (max SM count).
    pub const SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A: u32 = 0x2e4;
    /// SET_SHADER_LOCAL_MEMORY_A (upper), _B (lower): the SLM backing store.
    pub const SET_SHADER_LOCAL_MEMORY_A: u32 = 0x790;
    /// SET_SHADER_LOCAL_MEMORY_WINDOW_A (upper), _B (lower).
    pub const SET_SHADER_LOCAL_MEMORY_WINDOW_A: u32 = 0x7b0;
    /// WAIT_FOR_IDLE.
    pub const WAIT_FOR_IDLE: u32 = 0x110;
    /// SET_REPORT_SEMAPHORE_A (upper address), _B (lower), _C (payload), _D (operation and flags).
    pub const SET_REPORT_SEMAPHORE_A: u32 = 0x1b00;
    /// SET_REPORT_SEMAPHORE_D: RELEASE, four words (payload, timestamp at +8), flushed, no reduction.
    pub const REPORT_RELEASE_FOUR_WORDS: u32 = 0;
    /// INVALIDATE_SHADER_CACHES_NO_WFI.
    pub const INVALIDATE_SHADER_CACHES_NO_WFI: u32 = 0x1698;
    /// INVALIDATE_SHADER_CACHES_NO_WFI bits: instruction (0), global data (4), constant (12).
    pub const INVALIDATE_ALL: u32 = 1 | (1 << 4) | (1 << 12);
    /// PCAS action INVALIDATE_PREFETCH_COPY_SCHEDULE (libcuda's): drops any cached copy of a reused QMD.
    pub const PCAS_INVALIDATE_PREFETCH_COPY_SCHEDULE: u32 = 0xa;
}

/// DMA-copy-class methods (clc8b5.h).
pub mod copy {
    /// SET_SEMAPHORE_A (upper), _B (lower), SET_SEMAPHORE_PAYLOAD.
    pub const SET_SEMAPHORE_A: u32 = 0x240;
    /// LAUNCH_DMA.
    pub const LAUNCH_DMA: u32 = 0x300;
    /// OFFSET_IN_UPPER, _LOWER, OFFSET_OUT_UPPER, _LOWER.
    pub const OFFSET_IN_UPPER: u32 = 0x400;
    /// PITCH_IN, PITCH_OUT, LINE_LENGTH_IN, LINE_COUNT (a copy of LINE_COUNT lines).
    pub const PITCH_IN: u32 = 0x410;
    /// LINE_LENGTH_IN (bytes of a one-line copy).
    pub const LINE_LENGTH_IN: u32 = 0x418;
    /// LAUNCH_DMA MULTI_LINE_ENABLE (bit 9): LINE_COUNT lines of LINE_LENGTH_IN bytes, PITCH_IN / PITCH_OUT
    /// apart.
    pub const MULTI_LINE: u32 = 1 << 9;
    /// LAUNCH_DMA for a plain copy: non-pipelined transfer (waits for earlier copies), pitch source and
    /// destination.
    pub const LAUNCH_COPY: u32 = 0x182;
    /// LAUNCH_DMA for a copy that may start while the one before it is still running (DATA_TRANSFER_TYPE 1).
    pub const LAUNCH_COPY_PIPELINED: u32 = 0x181;
    /// LAUNCH_DMA for a semaphore release only: flush, four-word semaphore (payload + timestamp).
    pub const LAUNCH_SEMAPHORE: u32 = 0x14;
    /// Largest copy one LAUNCH_DMA is given (LINE_LENGTH_IN is 32 bits; tinygrad splits at 2 GiB).
    pub const MAX_LINE: u64 = 1 << 31;
}

/// A GPFIFO entry for `dwords` of pushbuffer at `va` (dword aligned, below 2^40), as a subroutine.
pub fn gpfifo_entry(va: u64, dwords: u32) -> u64 {
    debug_assert!(va.is_multiple_of(4) && va < (1 << 40), "pushbuffer VA {va:#x} not encodable");
    debug_assert!(dwords < (1 << 21), "pushbuffer of {dwords} dwords too long for one entry");
    (va & 0xff_ffff_fffc) | (1 << 41) | ((dwords as u64) << 42)
}

/// A pushbuffer under construction: method headers and their data, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Push {
    words: Vec<u32>,
}

impl Push {
    /// An empty pushbuffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty pushbuffer with room for `words` dwords.
    pub fn with_capacity(words: usize) -> Self {
        Push { words: Vec::with_capacity(words) }
    }

    /// Empties the pushbuffer, keeping its room.
    pub fn clear(&mut self) {
        self.words.clear();
    }

    /// The dwords so far.
    pub fn words(&self) -> &[u32] {
        &self.words
    }

    /// Bytes so far.
    pub fn bytes(&self) -> u64 {
        self.words.len() as u64 * 4
    }

    /// True when nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Appends another pushbuffer.
    pub fn extend(&mut self, other: &Push) {
        self.words.extend_from_slice(&other.words);
    }

    /// One incrementing method group: `data` goes to `method`, `method + 4`, ...
    pub fn methods(&mut self, subc: u32, method: u32, data: &[u32]) -> &mut Self {
        self.words.push(header(SecOp::Incrementing, subc, method, data.len() as u32));
        self.words.extend_from_slice(data);
        self
    }

    /// Binds class `class` to subchannel `subc`.
    pub fn set_object(&mut self, subc: u32, class: u32) -> &mut Self {
        self.methods(subc, compute::SET_OBJECT, &[class])
    }

    /// A host semaphore operation on `va` with `payload` (the five-method SEM_* group).
    pub fn host_semaphore(&mut self, va: u64, payload: u64, execute: u32) -> &mut Self {
        self.methods(
            SUBC_HOST,
            host::SEM_ADDR_LO,
            &[lo(va) & !3, hi(va) & 0x1ff_ffff, lo(payload), hi(payload), execute],
        )
    }

    /// A host release of `payload` at `va` after the engine has gone idle, 64-bit payload plus the
    /// release timestamp at `va + 8`: the second completion marker, and the barrier between groups.
    pub fn release_after_idle(&mut self, va: u64, payload: u32) -> &mut Self {
        self.host_semaphore(
            va,
            payload as u64,
            host::SEM_OP_RELEASE | host::SEM_RELEASE_WFI | host::SEM_PAYLOAD_64 | host::SEM_RELEASE_TIMESTAMP,
        )
    }

    /// A host release of `payload` at `va` without waiting for the engine (64-bit payload, timestamp at
    /// `va + 8`): for a marker whose order is already given by an acquire in front of it, or when nothing
    /// was launched.
    pub fn release(&mut self, va: u64, payload: u32) -> &mut Self {
        self.host_semaphore(
            va,
            payload as u64,
            host::SEM_OP_RELEASE | host::SEM_PAYLOAD_64 | host::SEM_RELEASE_TIMESTAMP,
        )
    }

    /// The compute engine waits until it is idle, then releases `payload` at `va` (timestamp at `va + 8`)
    /// after flushing its writes: marker 1 without the round trip through the host.
    pub fn compute_release_after_idle(&mut self, va: u64, payload: u32) -> &mut Self {
        self.methods(SUBC_COMPUTE, compute::WAIT_FOR_IDLE, &[0]);
        self.methods(
            SUBC_COMPUTE,
            compute::SET_REPORT_SEMAPHORE_A,
            &[hi(va), lo(va), payload, compute::REPORT_RELEASE_FOUR_WORDS],
        )
    }

    /// Launches the QMD at `qmd_va` (256-byte aligned, below 2^40), dropping any cached copy of it first.
    pub fn send_pcas(&mut self, qmd_va: u64) -> &mut Self {
        self.send_pcas_with(qmd_va, compute::PCAS_INVALIDATE_PREFETCH_COPY_SCHEDULE)
    }

    /// Launches the QMD at `qmd_va` with PCAS action `action`.
    pub fn send_pcas_with(&mut self, qmd_va: u64, action: u32) -> &mut Self {
        debug_assert!(qmd_va.is_multiple_of(256) && qmd_va < (1 << 40), "QMD VA {qmd_va:#x} not encodable");
        self.methods(SUBC_COMPUTE, compute::SEND_PCAS_A, &[(qmd_va >> 8) as u32]);
        self.methods(SUBC_COMPUTE, compute::SEND_SIGNALING_PCAS2_B, &[action])
    }

    /// Invalidates the instruction, global-data and constant caches without waiting for idle.
    pub fn invalidate_shader_caches(&mut self) -> &mut Self {
        self.methods(SUBC_COMPUTE, compute::INVALIDATE_SHADER_CACHES_NO_WFI, &[compute::INVALIDATE_ALL])
    }

    /// Programs the shared- and local-memory windows (once per channel).
    pub fn windows(&mut self, shared_window: u64, local_window: u64) -> &mut Self {
        self.methods(SUBC_COMPUTE, compute::SET_SHADER_SHARED_MEMORY_WINDOW_A, &[hi(shared_window), lo(shared_window)]);
        self.methods(SUBC_COMPUTE, compute::SET_SHADER_LOCAL_MEMORY_WINDOW_A, &[hi(local_window), lo(local_window)])
    }

    /// Points the channel at an SLM backing store of `bytes_per_tpc` per TPC at `base`.
    pub fn local_memory(&mut self, base: u64, bytes_per_tpc: u64, max_sm: u32) -> &mut Self {
        self.methods(SUBC_COMPUTE, compute::SET_SHADER_LOCAL_MEMORY_A, &[hi(base), lo(base)]);
        self.methods(
            SUBC_COMPUTE,
            compute::SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A,
            &[hi(bytes_per_tpc), lo(bytes_per_tpc), max_sm],
        )
    }

    /// Copies `len` bytes from `src` to `dst` with the copy engine, one LAUNCH_DMA per 2 GiB.
    pub fn copy(&mut self, src: u64, dst: u64, len: u64) -> &mut Self {
        self.copy_chunked(src, dst, len, copy::MAX_LINE)
    }

    /// Copies in pieces of at most `chunk` bytes. The first and last pieces are non-pipelined (the first
    /// waits for earlier work, the last for every piece before it, so a release after it covers the whole
    /// copy); the pieces between are pipelined, which keeps more transfers in flight.
    pub fn copy_chunked(&mut self, src: u64, dst: u64, len: u64, chunk: u64) -> &mut Self {
        self.copy_lines(src, dst, len, chunk, 0)
    }

    /// [`Push::copy_chunked`] with each piece of at least `line` bytes sent as a multi-line copy of
    /// `line`-byte lines (a whole number of them; any rest as one more line), which the copy engine can
    /// spread over more of its units than one long line. `line` 0: every piece is one line.
    pub fn copy_lines(&mut self, src: u64, dst: u64, len: u64, chunk: u64, line: u64) -> &mut Self {
        let chunk = chunk.clamp(4096, copy::MAX_LINE);
        let mut off = 0;
        while off < len {
            let n = (len - off).min(chunk);
            let last_piece = off + n == len;
            let lines = if line > 0 && line <= u32::MAX as u64 { n / line } else { 0 };
            let mut parts = [(0u64, 0u64, 1u64); 2];
            let mut count = 0;
            if lines > 1 {
                parts[count] = (0, line, lines);
                count += 1;
            }
            let done = if lines > 1 { lines * line } else { 0 };
            if done < n {
                parts[count] = (done, n - done, 1);
                count += 1;
            }
            for (k, &(at, length, count_lines)) in parts[..count].iter().enumerate() {
                let (s, d) = (src + off + at, dst + off + at);
                let edge = (off == 0 && k == 0) || (last_piece && k + 1 == count);
                let mut launch = if edge { copy::LAUNCH_COPY } else { copy::LAUNCH_COPY_PIPELINED };
                self.methods(SUBC_COPY, copy::OFFSET_IN_UPPER, &[hi(s), lo(s), hi(d), lo(d)]);
                if count_lines > 1 {
                    launch |= copy::MULTI_LINE;
                    self.methods(
                        SUBC_COPY,
                        copy::PITCH_IN,
                        &[length as u32, length as u32, length as u32, count_lines as u32],
                    );
                } else {
                    self.methods(SUBC_COPY, copy::LINE_LENGTH_IN, &[length as u32]);
                }
                self.methods(SUBC_COPY, copy::LAUNCH_DMA, &[launch]);
            }
            off += n;
        }
        self
    }

    /// A copy-engine release of `payload` at `va` (timestamp at `va + 8`) after its earlier copies are
    /// flushed.
    pub fn copy_release(&mut self, va: u64, payload: u32) -> &mut Self {
        self.methods(SUBC_COPY, copy::SET_SEMAPHORE_A, &[hi(va), lo(va), payload]);
        self.methods(SUBC_COPY, copy::LAUNCH_DMA, &[copy::LAUNCH_SEMAPHORE])
    }
}

fn lo(v: u64) -> u32 {
    v as u32
}

fn hi(v: u64) -> u32 {
    (v >> 32) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_place_each_field() {
        // tinygrad's nvmethod(1, SEND_PCAS_A, 1) = 2 << 28 | 1 << 16 | 1 << 13 | 0x2b4 >> 2.
        assert_eq!(header(SecOp::Incrementing, 1, 0x2b4, 1), 0x2001_20ad);
        assert_eq!(header(SecOp::Incrementing, 0, 0x5c, 5), 0x2005_0017);
        assert_eq!(header(SecOp::NonIncrementing, 4, 0x1b4, 3) >> 29, 3);
        assert_eq!(header(SecOp::Immediate, 2, 0x10, 0x1fff), 0x9fff_4004);
        // The count is 13 bits; nothing spills into SEC_OP.
        assert_eq!(header(SecOp::Incrementing, 0, 0, 0x3fff) >> 29, 1);
    }

    #[test]
    fn gpfifo_entries_split_address_level_and_length() {
        let e = gpfifo_entry(0x12_3456_7890, 0x40);
        assert_eq!(e & 0xffff_fffc, 0x3456_7890);
        assert_eq!((e >> 32) & 0xff, 0x12);
        assert_eq!((e >> 41) & 1, 1, "subroutine level");
        assert_eq!((e >> 42) & 0x1f_ffff, 0x40);
        assert_eq!(e >> 63, 0, "no SYNC wait");
        // The bit layout tinygrad writes: (addr//4 << 2) | len << 42 | 1 << 41.
        let va = 0x10_0000_1000u64;
        assert_eq!(gpfifo_entry(va, 7), (va / 4) << 2 | 7 << 42 | 1 << 41);
    }

    #[test]
    fn release_after_idle_is_the_five_method_semaphore_group() {
        let mut p = Push::new();
        p.release_after_idle(0x1_2345_6780, 42);
        assert_eq!(
            p.words(),
            &[header(SecOp::Incrementing, 0, 0x5c, 5), 0x2345_6780, 0x1, 42, 0, 1 | 1 << 20 | 1 << 24 | 1 << 25]
        );
    }

    #[test]
    fn pcas_carries_the_shifted_qmd_address_and_the_action() {
        let mut p = Push::new();
        p.send_pcas(0x20_0000_0300);
        let w = p.words();
        assert_eq!(w.len(), 4);
        assert_eq!(w[0], header(SecOp::Incrementing, SUBC_COMPUTE, 0x2b4, 1));
        assert_eq!(w[1], 0x2000_0003);
        assert_eq!(w[2], header(SecOp::Incrementing, SUBC_COMPUTE, 0x2c0, 1));
        assert_eq!(w[3], 0xa);
    }

    #[test]
    fn copies_split_at_two_gib_and_keep_upper_before_lower() {
        let mut p = Push::new();
        let len = (5u64 << 30) + 12;
        p.copy(0x1_0000_0000, 0x7_0000_0000, len);
        let w = p.words();
        // Three LAUNCH_DMA groups of 9 dwords each: 2 GiB, 2 GiB, 1 GiB + 12.
        assert_eq!(w.len(), 27);
        let lengths: Vec<u32> = (0..3).map(|i| w[9 * i + 6]).collect();
        assert_eq!(lengths, vec![1 << 31, 1 << 31, (1 << 30) + 12]);
        assert_eq!(lengths.iter().map(|&l| l as u64).sum::<u64>(), len);
        // Second chunk: source and destination advanced by 2 GiB, upper word first.
        assert_eq!(&w[10..14], &[1, 0x8000_0000, 7, 0x8000_0000]);
        let launches: Vec<u32> = w.chunks(9).map(|c| c[8]).collect();
        assert_eq!(launches, vec![copy::LAUNCH_COPY, copy::LAUNCH_COPY_PIPELINED, copy::LAUNCH_COPY]);
    }

    #[test]
    fn chunked_copies_pipeline_only_the_middle_pieces() {
        let mut p = Push::new();
        p.copy_chunked(0x1000_0000, 0x2000_0000, (3 << 20) + 5, 1 << 20);
        let w = p.words();
        assert_eq!(w.len(), 4 * 9);
        let launches: Vec<u32> = w.chunks(9).map(|c| c[8]).collect();
        assert_eq!(
            launches,
            vec![copy::LAUNCH_COPY, copy::LAUNCH_COPY_PIPELINED, copy::LAUNCH_COPY_PIPELINED, copy::LAUNCH_COPY]
        );
        let lengths: Vec<u32> = w.chunks(9).map(|c| c[6]).collect();
        assert_eq!(lengths, vec![1 << 20, 1 << 20, 1 << 20, 5]);
        // One piece: non-pipelined.
        let mut q = Push::new();
        q.copy_chunked(0, 0x1000, 100, 1 << 20);
        assert_eq!(q.words()[8], copy::LAUNCH_COPY);
    }

    #[test]
    fn multi_line_pieces_carry_pitches_and_counts_and_keep_the_edges_non_pipelined() {
        let mut p = Push::new();
        // 1 MiB pieces: two of sixteen 64 KiB lines, then a 5-byte third piece as one line.
        p.copy_lines(0x1000_0000, 0x2000_0000, (2 << 20) + 5, 1 << 20, 64 << 10);
        let w = p.words();
        // Multi-line group: offsets (5) + pitches, length and count (5) + launch (2) = 12 words; one line: 9.
        assert_eq!(w.len(), 12 + 12 + 9);
        assert_eq!(&w[6..10], &[64 << 10, 64 << 10, 64 << 10, 16]);
        assert_eq!(w[11], copy::LAUNCH_COPY | copy::MULTI_LINE, "first piece: non-pipelined");
        assert_eq!(w[23], copy::LAUNCH_COPY_PIPELINED | copy::MULTI_LINE);
        assert_eq!((w[24 + 6], w[24 + 8]), (5, copy::LAUNCH_COPY), "last piece: non-pipelined");
        // A piece that is not a whole number of lines: the lines, then the rest as one more line.
        let mut q = Push::new();
        q.copy_lines(0x1000_0000, 0x2000_0000, (1 << 20) + 5, 2 << 20, 64 << 10);
        let w = q.words();
        assert_eq!(w.len(), 12 + 9);
        assert_eq!(w[11], copy::LAUNCH_COPY | copy::MULTI_LINE);
        assert_eq!(&w[12 + 1..12 + 5], &[0, 0x1010_0000, 0, 0x2010_0000], "the rest starts after the lines");
        assert_eq!((w[12 + 6], w[12 + 8]), (5, copy::LAUNCH_COPY));
        // line 0 is the one-line form.
        let (mut a, mut b) = (Push::new(), Push::new());
        a.copy_lines(0, 0x1000, 100, 1 << 20, 0);
        b.copy_chunked(0, 0x1000, 100, 1 << 20);
        assert_eq!(a, b);
    }

    #[test]
    fn copy_release_is_a_flushed_four_word_semaphore() {
        let mut p = Push::new();
        p.copy_release(0x10_0000_0040, 9);
        assert_eq!(
            p.words(),
            &[
                header(SecOp::Incrementing, SUBC_COPY, 0x240, 3),
                0x10,
                0x40,
                9,
                header(SecOp::Incrementing, SUBC_COPY, 0x300, 1),
                0x14
            ]
        );
    }

    #[test]
    fn setup_methods_write_upper_then_lower() {
        let mut p = Push::new();
        p.set_object(SUBC_COMPUTE, 0xcbc0).windows(0x7294_0000_0000, 0x7293_0000_0000);
        p.local_memory(0x12_0020_0000, 0x24_0000, 0xff);
        let w = p.words();
        assert_eq!(&w[..2], &[header(SecOp::Incrementing, 1, 0, 1), 0xcbc0]);
        assert_eq!(&w[2..5], &[header(SecOp::Incrementing, 1, 0x2a0, 2), 0x7294, 0]);
        assert_eq!(&w[5..8], &[header(SecOp::Incrementing, 1, 0x7b0, 2), 0x7293, 0]);
        assert_eq!(&w[8..11], &[header(SecOp::Incrementing, 1, 0x790, 2), 0x12, 0x0020_0000]);
        assert_eq!(&w[11..15], &[header(SecOp::Incrementing, 1, 0x2e4, 3), 0, 0x24_0000, 0xff]);
    }
}
