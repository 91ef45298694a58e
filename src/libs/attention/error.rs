//! The attention library's failures: each names its stage ([`AttentionError::stage`], the first words of
//! its text) and carries what was wrong as data.

use crate::cmdlist::CmdListError;
use crate::{Error, Stage};

/// A buffer of a call, as failures name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operand {
    /// The queries.
    Q,
    /// The dense keys.
    K,
    /// The dense values.
    V,
    /// The output.
    Out,
    /// The paged KV pool.
    Pool,
    /// The page tables.
    Table,
    /// The sequence lengths.
    Lens,
    /// A step's new K rows (append).
    KNew,
    /// A step's new V rows (append).
    VNew,
    /// A step's fused QKV rows (the fused append).
    Qkv,
    /// Qwen3's q_norm weight (the fused append).
    QNorm,
    /// Qwen3's k_norm weight (the fused append).
    KNorm,
    /// The RoPE cosine table (the fused append).
    Cos,
    /// The RoPE sine table (the fused append).
    Sin,
}

impl Operand {
    /// Its name, as failures print it.
    pub const fn name(self) -> &'static str {
        match self {
            Operand::Q => "q",
            Operand::K => "k",
            Operand::V => "v",
            Operand::Out => "out",
            Operand::Pool => "pool",
            Operand::Table => "page table",
            Operand::Lens => "lengths",
            Operand::KNew => "k_new",
            Operand::VNew => "v_new",
            Operand::Qkv => "qkv",
            Operand::QNorm => "q_norm",
            Operand::KNorm => "k_norm",
            Operand::Cos => "cos",
            Operand::Sin => "sin",
        }
    }
}

impl core::fmt::Display for Operand {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// Heads, lengths or buffers that cannot go together; nothing was launched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// A count that must be at least 1 is 0.
    #[error("{what} is 0")]
    Zero {
        /// Which count.
        what: &'static str,
    },
    /// Query heads that are not a whole number of groups of the KV heads.
    #[error("{q_heads} query heads are not a multiple of {kv_heads} KV heads")]
    Heads {
        /// Query heads.
        q_heads: u32,
        /// KV heads.
        kv_heads: u32,
    },
    /// More query heads per KV head than the decode kernel's MMA rows.
    #[error("{group} query heads per KV head; the decode kernel packs at most {max} into an MMA's rows")]
    Group {
        /// Query heads per KV head.
        group: u32,
        /// The most it takes.
        max: u32,
    },
    /// A head dim the dense kernel does not take.
    #[error("head_dim {head_dim}: the dense kernel takes 1 ..= {max}")]
    HeadDim {
        /// The head dim.
        head_dim: u32,
        /// The most it takes.
        max: u32,
    },
    /// More query rows than keys (query row i sits at position kv_len - q_rows + i).
    #[error("{q_rows} query rows against {kv_len} keys: the rows are the last positions of the KV")]
    Rows {
        /// Query rows.
        q_rows: u32,
        /// Keys.
        kv_len: u32,
    },
    /// A forced split count past what the combine merges.
    #[error("{splits} splits: at most {max}")]
    Splits {
        /// The split count asked for.
        splits: u32,
        /// The most the combine merges.
        max: u32,
    },
    /// A forced pipeline depth the decode kernels are not compiled for.
    #[error("{stages} pipeline stages: the decode kernels have {two} or {deep}")]
    Stages {
        /// The stages asked for.
        stages: u32,
        /// The kernels' depths.
        two: u32,
        /// See `two`.
        deep: u32,
    },
    /// A buffer shorter than its operand.
    #[error("{operand} holds {len} elements, the call needs {needs}")]
    Short {
        /// The operand.
        operand: Operand,
        /// Its elements.
        len: usize,
        /// The elements the call reads or writes.
        needs: u64,
    },
    /// A buffer not aligned as its kernel's vector loads need.
    #[error("{operand} at {va:#x} is not {align}-byte aligned")]
    Misaligned {
        /// The operand.
        operand: Operand,
        /// Its GPU address.
        va: u64,
        /// The alignment its loads need.
        align: u64,
    },
    /// An operand past what a buffer can hold.
    #[error("{operand} is past 2^63 bytes")]
    Overflow {
        /// The operand.
        operand: Operand,
    },
}

/// A KV layout the kernels cannot read; nothing was launched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// A page size that is not a positive multiple of the kernels' 16-token tile.
    #[error(
        "pages of {page_tokens} tokens: a page is a positive multiple of 16 tokens (16 and 64 are the tested sizes)"
    )]
    PageTokens {
        /// Tokens per page.
        page_tokens: u32,
    },
    /// A head dim the decode kernels are not compiled for.
    #[error("head_dim {head_dim}: the paged kernels are compiled for 32, 64 and 128")]
    HeadDim {
        /// The head dim.
        head_dim: u32,
    },
    /// No KV heads or no pages.
    #[error("{what} is 0")]
    Zero {
        /// Which count.
        what: &'static str,
    },
    /// A stride that lets one page's or head's rows overlap the next, or is not a whole number of 16-byte
    /// chunks.
    #[error("{which} is {value} elements; it must be a multiple of 8 and at least {needs}")]
    Stride {
        /// Which stride.
        which: &'static str,
        /// Its value, elements.
        value: u64,
        /// The least it may be.
        needs: u64,
    },
    /// A pool past what a buffer can hold.
    #[error("the pool's {pages} pages of {page_stride} elements are past 2^63 bytes")]
    Overflow {
        /// Pages.
        pages: u32,
        /// Elements a page.
        page_stride: u64,
    },
    /// An element type other than bf16 (the C layout's `dtype`).
    #[error("dtype {dtype}: the pool holds bf16 (OMEGA_GPU_ATTN_DTYPE_BF16 = 1)")]
    Dtype {
        /// The dtype code.
        dtype: u32,
    },
}

/// A failure of the attention library.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AttentionError {
    /// Heads, lengths or buffers that cannot go together; nothing was launched.
    #[error("attention shape: {0}")]
    Shape(#[from] ShapeError),
    /// A KV layout the kernels cannot read; nothing was launched.
    #[error("attention layout: {0}")]
    Layout(#[from] LayoutError),
    /// A page table or length outside the pool or the table (host-visible tables: found before launch,
    /// nothing ran; device tables: the kernels clamped and flagged it, and the call ran with the clamp).
    #[error("attention table: {detail}")]
    Table {
        /// The kernels' status bits (`STATUS_*` of [`crate::kernels::attention`]); 0 for a host check.
        status: u32,
        /// What was wrong.
        detail: TableDetail,
    },
    /// A device call failed (allocation, load, copy, launch): its own stage and cause.
    #[error(transparent)]
    Device(#[from] Error),
    /// A command list refused a launch: its own stage and cause.
    #[error(transparent)]
    List(Box<CmdListError>),
}

/// What a page table or length check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableDetail {
    /// The kernels' status word was not zero after the call.
    Flagged(u32),
    /// Sequence `seq`'s page `slot` names page `page`, outside the pool's `pages`.
    Page {
        /// The sequence.
        seq: u32,
        /// Its table slot.
        slot: u32,
        /// The page index found.
        page: i64,
        /// Pages in the pool.
        pages: u32,
    },
    /// Sequence `seq`'s length is negative or past its table's `cap` tokens.
    Length {
        /// The sequence.
        seq: u32,
        /// Its length.
        len: i64,
        /// Tokens its table holds.
        cap: u64,
    },
}

impl core::fmt::Display for TableDetail {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            TableDetail::Flagged(bits) => {
                write!(f, "the kernels flagged status {bits:#x} (")?;
                let names = [
                    (1, "a page index outside the pool: tile skipped"),
                    (2, "a length past the table: clamped"),
                    (4, "a negative length: taken as 0"),
                ];
                let hit: Vec<&str> = names.iter().filter(|(b, _)| bits & b != 0).map(|(_, n)| *n).collect();
                write!(f, "{})", hit.join("; "))
            }
            TableDetail::Page { seq, slot, page, pages } => {
                write!(f, "sequence {seq}'s table slot {slot} names page {page}, outside the pool's {pages} pages")
            }
            TableDetail::Length { seq, len, cap } => {
                write!(f, "sequence {seq} has length {len}, outside 0 ..= {cap} (its table's tokens)")
            }
        }
    }
}

impl From<CmdListError> for AttentionError {
    fn from(e: CmdListError) -> Self {
        AttentionError::List(Box::new(e))
    }
}

impl AttentionError {
    /// The failing stage.
    pub fn stage(&self) -> Stage {
        match self {
            AttentionError::Shape(_) => Stage::AttentionShape,
            AttentionError::Layout(_) => Stage::AttentionLayout,
            AttentionError::Table { .. } => Stage::AttentionTable,
            AttentionError::Device(e) => e.stage(),
            AttentionError::List(e) => e.stage(),
        }
    }

    /// True when this failure latched the process (its completion was uncertain).
    pub fn latched_the_process(&self) -> bool {
        match self {
            AttentionError::Device(e) => e.latched_the_process(),
            AttentionError::List(e) => e.latched_the_process(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_names_its_stage_first() {
        let cases = [
            AttentionError::from(ShapeError::Zero { what: "q_heads" }),
            AttentionError::from(LayoutError::PageTokens { page_tokens: 8 }),
            AttentionError::Table { status: 1, detail: TableDetail::Flagged(1) },
        ];
        for e in cases {
            assert!(e.to_string().starts_with(&format!("{}: ", e.stage())), "{e}");
        }
    }
}
