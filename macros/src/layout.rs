//! The contract's parameter layout: each parameter at its natural alignment, in signature order (a
//! 64-bit device address is 8 bytes at an 8-byte offset, written low word first). The same math as
//! `omega::ArgBlock::push` and `omega::kernels::HostSpec::params`; omega's tests check they agree.

/// One parameter's place in the block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub ordinal: u32,
    pub offset: u32,
    pub size: u32,
}

/// The slots of parameters of `sizes` bytes, in order.
pub fn natural(sizes: impl IntoIterator<Item = u32>) -> Vec<Slot> {
    let mut end = 0u32;
    sizes
        .into_iter()
        .enumerate()
        .map(|(i, size)| {
            let offset = end.next_multiple_of(size.max(1));
            end = offset + size;
            Slot { ordinal: i as u32, offset, size }
        })
        .collect()
}

/// Bytes the parameters take (the end of the last one).
pub fn bytes(slots: &[Slot]) -> u32 {
    slots.last().map_or(0, |s| s.offset + s.size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_each_parameter_to_its_own_size() {
        let s = natural([4, 8, 2, 1, 8, 4]);
        let offsets: Vec<u32> = s.iter().map(|s| s.offset).collect();
        assert_eq!(offsets, [0, 8, 16, 18, 24, 32]);
        assert_eq!(bytes(&s), 36);
        assert_eq!(natural([]), []);
        // vector_add: three device addresses and a count.
        assert_eq!(bytes(&natural([8, 8, 8, 4])), 28);
    }
}
