//! The ordering check shared by the simulator tests and the GPU suite.

/// Checks that two launches of the `timestamps` kernel did not overlap: every block of `second` started at
/// or after the moment the last block of `first` ended.
///
/// Each slice is what the kernel wrote: `[start, end]` per block (`%globaltimer` ns), two words per block.
/// Refused as malformed: an odd length, no blocks, a block whose end is before its start, or a zero stamp
/// (a block that never wrote — run the check on output poisoned with zeros, or any value the kernel cannot
/// produce, and a missing block shows up here instead of passing).
pub fn check_no_overlap(first: &[u64], second: &[u64]) -> Result<(), String> {
    let blocks = |name: &str, s: &[u64]| -> Result<(u64, u64), String> {
        if s.is_empty() || !s.len().is_multiple_of(2) {
            return Err(format!("{name} launch: {} stamp words (want 2 per block, at least one block)", s.len()));
        }
        let (mut first_start, mut last_end) = (u64::MAX, 0u64);
        for (b, pair) in s.chunks_exact(2).enumerate() {
            let (start, end) = (pair[0], pair[1]);
            if start == 0 || end == 0 {
                return Err(format!("{name} launch: block {b} wrote no stamp (start {start}, end {end})"));
            }
            if end < start {
                return Err(format!("{name} launch: block {b} ends at {end}, before its start {start}"));
            }
            first_start = first_start.min(start);
            last_end = last_end.max(end);
        }
        Ok((first_start, last_end))
    };
    let (_, first_end) = blocks("first", first)?;
    let (second_start, _) = blocks("second", second)?;
    if second_start < first_end {
        let early = second.chunks_exact(2).filter(|p| p[0] < first_end).count();
        return Err(format!(
            "the launches overlapped: {early} of {} blocks of the second launch started before the first launch \
             ended (earliest start {second_start}, {} ns before the first's last end {first_end})",
            second.len() / 2,
            first_end - second_start
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_no_overlap;

    #[test]
    fn ordered_launches_pass_and_touching_ends_count_as_ordered() {
        assert_eq!(check_no_overlap(&[10, 20, 12, 25], &[25, 30, 26, 40]), Ok(()));
    }

    #[test]
    fn one_early_block_is_an_overlap() {
        let e = check_no_overlap(&[10, 20, 12, 25], &[26, 30, 24, 40]).unwrap_err();
        assert!(e.contains("1 of 2 blocks"), "{e}");
        assert!(e.contains("1 ns before"), "{e}");
    }

    #[test]
    fn malformed_stamps_are_refused_not_passed() {
        assert!(check_no_overlap(&[], &[1, 2]).unwrap_err().contains("first launch"));
        assert!(check_no_overlap(&[1, 2, 3], &[4, 5]).unwrap_err().contains("3 stamp words"));
        assert!(check_no_overlap(&[1, 2], &[0, 5]).unwrap_err().contains("wrote no stamp"));
        assert!(check_no_overlap(&[5, 2], &[6, 7]).unwrap_err().contains("before its start"));
    }
}
