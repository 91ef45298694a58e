//! Tensor-memory-accelerator (TMA) descriptors, encoded on the host: the 128-byte `CUtensorMap` that
//! `cp.async.bulk.tensor` reads, for the tiled mode.
//!
//! NVIDIA does not publish the layout. It was recovered from the driver's own encoder
//! (`cuTensorMapEncodeTiled`, CUDA 13.0, driver 580.159.04 on the H200) by `benches/cuda/tma_dump.cu`:
//! one field of a base shape varied at a time, every other byte unchanged. `tests/tma_driver.rs` replays
//! that tool's output (`tests/data/tma_driver.txt`: the layout study and thousands of random shapes, the
//! ones the driver refused included) on every platform, so each byte this module writes, and each refusal,
//! is the driver's. The encoder runs anywhere (no GPU, no CUDA); the simulator decodes what it wrote.
//!
//! Bit positions (little-endian bit numbers over the 128 bytes):
//!
//! | bits | field |
//! |---|---|
//! | 0..64 | global address (16-byte aligned, so bits 0..4 are zero) |
//! | 68..71 | rank - 1 |
//! | 71 | element type, bit 0 |
//! | 72..75 | element type, bits 1..3 |
//! | 75..77 | interleave (0 none, 1 16 B, 2 32 B) |
//! | 77..79 | swizzle (0 none, 1 32 B, 2 64 B, 3 128 B) |
//! | 79 | out-of-bounds fill (1: NaN, request zero FMA) |
//! | 80 | TF32 rounding (the two TF32 element types) |
//! | 81..83 | L2 promotion (0 none, 1 64 B, 2 128 B, 3 256 B) |
//! | 96 + 32 i .. +32 | global stride of dimension i + 1, bytes >> 4, low 32 bits (i < 4) |
//! | 224 + 4 i .. +4 | the same stride's bits 32..36 |
//! | 256 + 32 i .. +32 | global dimension i - 1 |
//! | 416 + 3 i .. +3 | element stride of dimension i - 1 |
//! | 440 + 8 i .. +8 | box dimension i - 1 |
//! | 512..530 | bytes one box moves: the product of `box[i] / element_stride[i]` (floor) and the element size |
//! | 576..592 | the swizzle atom: 16 without a swizzle, else 8 rows of the swizzle span (256, 512, 1024) |
//!
//! The element-type code is the PTX ISA's (`tensormap.replace.tile.elemtype`: f32.ftz 8, f64 9, bf16
//! 10), not CUDA's enum; TF32 is f32 (or f32.ftz) with bit 80 set.

use thiserror::Error;

/// Bytes of one descriptor.
pub const TENSOR_MAP_BYTES: usize = 128;

/// One descriptor as `cp.async.bulk.tensor` reads it: 128 bytes, 64-byte aligned (the instruction's
/// requirement, in global memory or in the parameter space).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C, align(64))]
pub struct TensorMap(pub [u8; TENSOR_MAP_BYTES]);

impl core::fmt::Debug for TensorMap {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "TensorMap(")?;
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// Element types, in CUDA's `CUtensorMapDataType` order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TmaElem {
    /// `UINT8`.
    U8,
    /// `UINT16`.
    U16,
    /// `UINT32`.
    U32,
    /// `INT32`.
    S32,
    /// `UINT64`.
    U64,
    /// `INT64`.
    S64,
    /// `FLOAT16`.
    F16,
    /// `FLOAT32`.
    F32,
    /// `FLOAT64`.
    F64,
    /// `BFLOAT16`.
    Bf16,
    /// `FLOAT32_FTZ`.
    F32Ftz,
    /// `TFLOAT32`.
    Tf32,
    /// `TFLOAT32_FTZ`.
    Tf32Ftz,
}

impl TmaElem {
    /// Every type, in CUDA's enum order (the index is CUDA's value).
    pub const ALL: [TmaElem; 13] = [
        TmaElem::U8,
        TmaElem::U16,
        TmaElem::U32,
        TmaElem::S32,
        TmaElem::U64,
        TmaElem::S64,
        TmaElem::F16,
        TmaElem::F32,
        TmaElem::F64,
        TmaElem::Bf16,
        TmaElem::F32Ftz,
        TmaElem::Tf32,
        TmaElem::Tf32Ftz,
    ];

    /// Bytes per element.
    pub const fn bytes(self) -> u32 {
        match self {
            TmaElem::U8 => 1,
            TmaElem::U16 | TmaElem::F16 | TmaElem::Bf16 => 2,
            TmaElem::U32 | TmaElem::S32 | TmaElem::F32 | TmaElem::F32Ftz | TmaElem::Tf32 | TmaElem::Tf32Ftz => 4,
            TmaElem::U64 | TmaElem::S64 | TmaElem::F64 => 8,
        }
    }

    /// The 4-bit code of bits 71..75 and the TF32 bit.
    const fn code(self) -> (u64, bool) {
        match self {
            TmaElem::U8 => (0, false),
            TmaElem::U16 => (1, false),
            TmaElem::U32 => (2, false),
            TmaElem::S32 => (3, false),
            TmaElem::U64 => (4, false),
            TmaElem::S64 => (5, false),
            TmaElem::F16 => (6, false),
            TmaElem::F32 => (7, false),
            TmaElem::F32Ftz => (8, false),
            TmaElem::F64 => (9, false),
            TmaElem::Bf16 => (10, false),
            TmaElem::Tf32 => (7, true),
            TmaElem::Tf32Ftz => (8, true),
        }
    }

    fn from_code(code: u64, tf32: bool) -> Option<TmaElem> {
        TmaElem::ALL.into_iter().find(|e| e.code() == (code, tf32))
    }

    /// Floating-point types (the NaN fill is theirs alone).
    pub const fn is_float(self) -> bool {
        !matches!(self, TmaElem::U8 | TmaElem::U16 | TmaElem::U32 | TmaElem::S32 | TmaElem::U64 | TmaElem::S64)
    }
}

/// How dimension 0 is interleaved (`CUtensorMapInterleave`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum TmaInterleave {
    /// Not interleaved.
    #[default]
    None,
    /// 16-byte interleave.
    B16,
    /// 32-byte interleave.
    B32,
}

/// The shared-memory swizzle (`CUtensorMapSwizzle`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum TmaSwizzle {
    /// No swizzle.
    #[default]
    None,
    /// 32-byte swizzle.
    B32,
    /// 64-byte swizzle.
    B64,
    /// 128-byte swizzle.
    B128,
}

impl TmaSwizzle {
    /// The swizzle span in bytes (0 without a swizzle).
    pub const fn span(self) -> u32 {
        match self {
            TmaSwizzle::None => 0,
            TmaSwizzle::B32 => 32,
            TmaSwizzle::B64 => 64,
            TmaSwizzle::B128 => 128,
        }
    }
}

/// L2 promotion of the loads (`CUtensorMapL2promotion`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum TmaL2Promotion {
    /// None.
    #[default]
    None,
    /// 64 bytes.
    B64,
    /// 128 bytes.
    B128,
    /// 256 bytes.
    B256,
}

/// What out-of-bounds elements read as (`CUtensorMapFloatOOBfill`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum TmaFill {
    /// Zeros.
    #[default]
    Zeros,
    /// NaN, with the request-zero-FMA behaviour (floating-point types only).
    NanRequestZeroFma,
}

/// A tiled tensor map's parameters, as `cuTensorMapEncodeTiled` takes them. Entries past `rank` are
/// ignored (and read back as 0 from [`decode_tiled`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TiledSpec {
    /// Element type.
    pub elem: TmaElem,
    /// Dimensions, 1..=5.
    pub rank: u32,
    /// GPU address of element 0 (16-byte aligned; 32 with the 32-byte interleave).
    pub global_address: u64,
    /// Elements per dimension, dimension 0 contiguous (1..=2^32 each).
    pub global_dim: [u64; 5],
    /// Byte stride of dimensions 1..rank (entry i is dimension i + 1): multiples of 16 (32 with the
    /// 32-byte interleave), below 2^40.
    pub global_stride: [u64; 4],
    /// The box (one copy's extent) per dimension, 1..=256.
    pub box_dim: [u32; 5],
    /// Element strides per dimension, 1..=8.
    pub element_stride: [u32; 5],
    /// Interleave.
    pub interleave: TmaInterleave,
    /// Swizzle.
    pub swizzle: TmaSwizzle,
    /// L2 promotion.
    pub l2_promotion: TmaL2Promotion,
    /// Out-of-bounds fill.
    pub fill: TmaFill,
}

impl TiledSpec {
    /// A row-major 2-D tensor of `[rows, cols]` elements with `row_bytes` between rows, read in boxes of
    /// `[box_rows, box_cols]`, unit element strides, no interleave, no L2 promotion, zero fill.
    pub fn matrix(
        elem: TmaElem,
        global_address: u64,
        [rows, cols]: [u64; 2],
        row_bytes: u64,
        [box_rows, box_cols]: [u32; 2],
        swizzle: TmaSwizzle,
    ) -> TiledSpec {
        TiledSpec {
            elem,
            rank: 2,
            global_address,
            global_dim: [cols, rows, 0, 0, 0],
            global_stride: [row_bytes, 0, 0, 0],
            box_dim: [box_cols, box_rows, 0, 0, 0],
            element_stride: [1, 1, 0, 0, 0],
            interleave: TmaInterleave::None,
            swizzle,
            l2_promotion: TmaL2Promotion::None,
            fill: TmaFill::Zeros,
        }
    }
}

/// Why a tiled tensor map cannot be encoded; each is a shape the driver's encoder refuses too.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum TmaError {
    /// The rank is outside 1..=5, or below 3 with an interleave.
    #[error("rank {rank} is outside 1..=5 (3..=5 with an interleave)")]
    Rank {
        /// The rank asked for.
        rank: u32,
    },
    /// The global address is not aligned as the interleave requires.
    #[error("global address {address:#x} is not {align}-byte aligned")]
    Address {
        /// The address.
        address: u64,
        /// The alignment it needs.
        align: u64,
    },
    /// A global dimension is 0 or past 2^32.
    #[error("global dimension {dim} is {value}; it must be 1..=2^32")]
    GlobalDim {
        /// The dimension.
        dim: usize,
        /// Its value.
        value: u64,
    },
    /// A global stride is not a multiple of the alignment, or is 2^40 or more.
    #[error("global stride of dimension {dim} is {value} bytes; it must be a multiple of {align} below 2^40")]
    GlobalStride {
        /// The dimension whose stride it is (1..rank).
        dim: usize,
        /// The stride in bytes.
        value: u64,
        /// The multiple it must be.
        align: u64,
    },
    /// A box dimension is 0 or past 256.
    #[error("box dimension {dim} is {value}; it must be 1..=256")]
    BoxDim {
        /// The dimension.
        dim: usize,
        /// Its value.
        value: u32,
    },
    /// The inner box is not whole 16-byte units.
    #[error("the inner box is {bytes} bytes, not a multiple of 16")]
    InnerBoxUnits {
        /// Its bytes.
        bytes: u64,
    },
    /// The inner box is wider than the swizzle span (without an interleave).
    #[error("the inner box is {bytes} bytes, wider than the {span}-byte swizzle")]
    InnerBoxSwizzle {
        /// Its bytes.
        bytes: u64,
        /// The span.
        span: u32,
    },
    /// An element stride is 0 or past 8.
    #[error("element stride of dimension {dim} is {value}; it must be 1..=8")]
    ElementStride {
        /// The dimension.
        dim: usize,
        /// Its value.
        value: u32,
    },
    /// The NaN fill was asked for an integer type.
    #[error("the NaN fill needs a floating-point element type, not {elem:?}")]
    NanFillOnInteger {
        /// The element type.
        elem: TmaElem,
    },
    /// The bytes one box moves pass what the descriptor can hold.
    #[error("one box moves {bytes} bytes; at most {max}")]
    BoxBytes {
        /// Its bytes.
        bytes: u64,
        /// The most.
        max: u64,
    },
    /// [`decode_tiled`]: a field holds a value no encoding produces.
    #[error("not a tiled tensor map this encoder writes: {field}")]
    NotDecodable {
        /// The field.
        field: &'static str,
    },
}

/// Most bytes one box may move: what one block's shared memory can take on sm_90 (227 KiB). The
/// driver encoded a box of 231,744 bytes and refused one of 234,496.
pub const MAX_BOX_BYTES: u64 = 227 * 1024;

fn put(bytes: &mut [u8; TENSOR_MAP_BYTES], bit: usize, width: usize, value: u64) {
    debug_assert!(width == 64 || value >> width == 0, "{value:#x} does not fit {width} bits");
    for i in 0..width {
        if value >> i & 1 == 1 {
            let b = bit + i;
            bytes[b / 8] |= 1 << (b % 8);
        }
    }
}

fn get(bytes: &[u8; TENSOR_MAP_BYTES], bit: usize, width: usize) -> u64 {
    (0..width).fold(0u64, |v, i| {
        let b = bit + i;
        v | u64::from(bytes[b / 8] >> (b % 8) & 1) << i
    })
}

/// The bytes one box moves: per dimension the box divided (down) by its element stride, times the
/// element size (the driver's count, which the descriptor carries).
fn box_bytes(s: &TiledSpec) -> u64 {
    let rank = s.rank as usize;
    (0..rank).fold(u64::from(s.elem.bytes()), |n, i| n * u64::from(s.box_dim[i] / s.element_stride[i].max(1)))
}

/// Checks `s` the way the driver does, naming the first field it refuses.
pub fn check_tiled(s: &TiledSpec) -> Result<(), TmaError> {
    let interleaved = s.interleave != TmaInterleave::None;
    if !(1..=5).contains(&s.rank) || (interleaved && s.rank < 3) {
        return Err(TmaError::Rank { rank: s.rank });
    }
    let rank = s.rank as usize;
    let align = if s.interleave == TmaInterleave::B32 { 32 } else { 16 };
    if !s.global_address.is_multiple_of(align) {
        return Err(TmaError::Address { address: s.global_address, align });
    }
    for (dim, &value) in s.global_dim[..rank].iter().enumerate() {
        if value == 0 || value > 1 << 32 {
            return Err(TmaError::GlobalDim { dim, value });
        }
    }
    for (i, &value) in s.global_stride[..rank - 1].iter().enumerate() {
        if !value.is_multiple_of(align) || value >= 1 << 40 {
            return Err(TmaError::GlobalStride { dim: i + 1, value, align });
        }
    }
    for (dim, &value) in s.box_dim[..rank].iter().enumerate() {
        if value == 0 || value > 256 {
            return Err(TmaError::BoxDim { dim, value });
        }
    }
    // Whole 16-byte units with or without an interleave (the driver refuses a 50-byte interleaved inner
    // box too); the swizzle span bounds it only without one.
    let inner = u64::from(s.box_dim[0]) * u64::from(s.elem.bytes());
    if !inner.is_multiple_of(16) {
        return Err(TmaError::InnerBoxUnits { bytes: inner });
    }
    let span = s.swizzle.span();
    if !interleaved && span != 0 && inner > u64::from(span) {
        return Err(TmaError::InnerBoxSwizzle { bytes: inner, span });
    }
    for (dim, &value) in s.element_stride[..rank].iter().enumerate() {
        if value == 0 || value > 8 {
            return Err(TmaError::ElementStride { dim, value });
        }
    }
    if s.fill == TmaFill::NanRequestZeroFma && !s.elem.is_float() {
        return Err(TmaError::NanFillOnInteger { elem: s.elem });
    }
    let bytes = box_bytes(s);
    if bytes > MAX_BOX_BYTES {
        return Err(TmaError::BoxBytes { bytes, max: MAX_BOX_BYTES });
    }
    Ok(())
}

/// Encodes a tiled tensor map, byte for byte what `cuTensorMapEncodeTiled` writes for the same
/// parameters, or the refusal naming the field the driver would refuse.
pub fn encode_tiled(s: &TiledSpec) -> Result<TensorMap, TmaError> {
    check_tiled(s)?;
    let rank = s.rank as usize;
    let mut m = [0u8; TENSOR_MAP_BYTES];
    put(&mut m, 0, 64, s.global_address);
    put(&mut m, 68, 3, u64::from(s.rank - 1));
    let (code, tf32) = s.elem.code();
    put(&mut m, 71, 4, code);
    put(&mut m, 75, 2, s.interleave as u64);
    put(&mut m, 77, 2, s.swizzle as u64);
    put(&mut m, 79, 1, s.fill as u64);
    put(&mut m, 80, 1, u64::from(tf32));
    put(&mut m, 81, 2, s.l2_promotion as u64);
    for i in 0..rank - 1 {
        let units = s.global_stride[i] >> 4;
        put(&mut m, 96 + 32 * i, 32, units & 0xffff_ffff);
        put(&mut m, 224 + 4 * i, 4, units >> 32);
    }
    for i in 0..rank {
        put(&mut m, 256 + 32 * i, 32, s.global_dim[i] - 1);
        put(&mut m, 416 + 3 * i, 3, u64::from(s.element_stride[i] - 1));
        put(&mut m, 440 + 8 * i, 8, u64::from(s.box_dim[i] - 1));
    }
    put(&mut m, 512, 18, box_bytes(s));
    let atom = match s.swizzle.span() {
        0 => 16,
        span => 8 * u64::from(span),
    };
    put(&mut m, 576, 16, atom);
    Ok(TensorMap(m))
}

/// Reads back what [`encode_tiled`] wrote (the simulator's TMA and its host references use it).
pub fn decode_tiled(m: &TensorMap) -> Result<TiledSpec, TmaError> {
    let b = &m.0;
    let rank = get(b, 68, 3) as u32 + 1;
    let field = |field| TmaError::NotDecodable { field };
    let elem = TmaElem::from_code(get(b, 71, 4), get(b, 80, 1) == 1).ok_or(field("element type"))?;
    let interleave = [TmaInterleave::None, TmaInterleave::B16, TmaInterleave::B32]
        .get(get(b, 75, 2) as usize)
        .copied()
        .ok_or(field("interleave"))?;
    let swizzle = [TmaSwizzle::None, TmaSwizzle::B32, TmaSwizzle::B64, TmaSwizzle::B128][get(b, 77, 2) as usize];
    let fill = [TmaFill::Zeros, TmaFill::NanRequestZeroFma][get(b, 79, 1) as usize];
    let l2_promotion =
        [TmaL2Promotion::None, TmaL2Promotion::B64, TmaL2Promotion::B128, TmaL2Promotion::B256][get(b, 81, 2) as usize];
    let mut s = TiledSpec {
        elem,
        rank,
        global_address: get(b, 0, 64),
        global_dim: [0; 5],
        global_stride: [0; 4],
        box_dim: [0; 5],
        element_stride: [0; 5],
        interleave,
        swizzle,
        l2_promotion,
        fill,
    };
    let rank = rank as usize;
    if rank > 5 {
        return Err(field("rank"));
    }
    for i in 0..rank.saturating_sub(1) {
        s.global_stride[i] = (get(b, 96 + 32 * i, 32) | get(b, 224 + 4 * i, 4) << 32) << 4;
    }
    for i in 0..rank {
        s.global_dim[i] = get(b, 256 + 32 * i, 32) + 1;
        s.element_stride[i] = get(b, 416 + 3 * i, 3) as u32 + 1;
        s.box_dim[i] = get(b, 440 + 8 * i, 8) as u32 + 1;
    }
    match encode_tiled(&s) {
        Ok(again) if again == *m => Ok(s),
        _ => Err(field("a byte no encoding of these fields writes")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gemm_a() -> TiledSpec {
        TiledSpec::matrix(TmaElem::Bf16, 0x7f12_3456_0000, [4096, 2048], 4096, [128, 64], TmaSwizzle::B128)
    }

    #[test]
    fn a_gemm_operand_round_trips() {
        let m = encode_tiled(&gemm_a()).unwrap();
        assert_eq!(decode_tiled(&m).unwrap(), TiledSpec { global_dim: [2048, 4096, 0, 0, 0], ..gemm_a() });
        // 64 bf16 x 128 rows = 16 KiB per box; 128-byte swizzle atom of 1024 bytes.
        assert_eq!(get(&m.0, 512, 18), 16384);
        assert_eq!(get(&m.0, 576, 16), 1024);
    }

    #[test]
    fn refusals_name_the_field() {
        let mut s = gemm_a();
        s.box_dim[0] = 65;
        assert_eq!(encode_tiled(&s), Err(TmaError::InnerBoxUnits { bytes: 130 }));
        s.box_dim[0] = 128;
        assert_eq!(encode_tiled(&s), Err(TmaError::InnerBoxSwizzle { bytes: 256, span: 128 }));
        let mut s = gemm_a();
        s.global_stride[0] = 4100;
        assert_eq!(encode_tiled(&s), Err(TmaError::GlobalStride { dim: 1, value: 4100, align: 16 }));
        let mut s = gemm_a();
        s.global_address += 8;
        assert!(matches!(encode_tiled(&s), Err(TmaError::Address { align: 16, .. })));
    }

    #[test]
    fn a_flipped_byte_is_not_decoded() {
        let mut m = encode_tiled(&gemm_a()).unwrap();
        m.0[100] = 1;
        assert!(decode_tiled(&m).is_err());
    }
}
