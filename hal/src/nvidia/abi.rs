//! The driver ABI table, keyed by the kernel driver's version.
//!
//! The RM ioctl structs change between driver branches without any version field inside them, so a
//! struct laid out for one branch can be silently misread by another. The version is read first
//! (SYSTEM_GET_BUILD_VERSION_V2, before any device object exists) and looked up here; a branch this build
//! has not verified is refused with its version named, never guessed at.

use crate::error::HalError;

/// A kernel driver version as the driver prints it ("580.159.04").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverVersion {
    /// Branch (major) number: 580.
    pub major: u32,
    /// Minor number: 159.
    pub minor: u32,
    /// Patch number, when the driver prints one: 4.
    pub patch: Option<u32>,
    /// The text as the driver gave it.
    pub text: String,
}

/// Why a version string could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unreadable driver version {0:?}")]
pub struct BadVersion(pub String);

/// Parses "580.159.04", "580.142" or "580.159.04 (something)"; leading and trailing blanks and NULs are
/// ignored.
pub fn parse_version(text: &str) -> Result<DriverVersion, BadVersion> {
    let clean = text.trim_matches(|c: char| c.is_whitespace() || c == '\0');
    let token = clean.split_whitespace().next().unwrap_or("");
    let bad = || BadVersion(text.to_owned());
    let mut parts = token.split('.');
    let num = |s: Option<&str>| -> Option<u32> {
        let s = s?;
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten()
    };
    let major = num(parts.next()).ok_or_else(bad)?;
    let minor = num(parts.next()).ok_or_else(bad)?;
    let patch = match parts.next() {
        None => None,
        p => Some(num(p).ok_or_else(bad)?),
    };
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok(DriverVersion { major, minor, patch, text: token.to_owned() })
}

/// How far a table entry has been checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbiStatus {
    /// The whole open sequence, memory, launches and faults ran on hardware with this branch.
    Verified,
}

/// What this build knows about one driver branch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverAbi {
    /// The branch number the entry covers (every minor and patch of it).
    pub major: u32,
    /// How far it was checked.
    pub status: AbiStatus,
    /// The exact build it was verified with.
    pub verified_with: &'static str,
    /// Bytes of NV_CHANNEL_ALLOC_PARAMS on this branch.
    pub channel_alloc_params_bytes: usize,
    /// Bytes of NV_MEMORY_ALLOCATION_PARAMS on this branch.
    pub memory_alloc_params_bytes: usize,
    /// Bytes of UVM_MAP_EXTERNAL_ALLOCATION_PARAMS on this branch.
    pub uvm_map_external_bytes: usize,
}

/// Every branch this build speaks. The struct sizes are those of `sys`, which is laid out for 580.
pub const TABLE: &[DriverAbi] = &[DriverAbi {
    major: 580,
    status: AbiStatus::Verified,
    verified_with: "580.159.04",
    channel_alloc_params_bytes: size_of::<super::sys::ChannelAlloc>(),
    memory_alloc_params_bytes: size_of::<super::sys::MemoryAlloc>(),
    uvm_map_external_bytes: size_of::<super::sys::UvmMapExternalAllocation>(),
}];

/// The table entry for the driver that printed `text`, or the refusal naming the version found.
pub fn lookup(text: &str) -> Result<&'static DriverAbi, HalError> {
    let v = parse_version(text).map_err(|e| HalError::UnsupportedDriver(e.to_string()))?;
    TABLE.iter().find(|a| a.major == v.major).ok_or_else(|| {
        let known: Vec<String> = TABLE.iter().map(|a| format!("{}.x", a.major)).collect();
        HalError::UnsupportedDriver(format!(
            "kernel driver {} (branch {}) is not one this build knows the ioctl ABI of; supported: {}",
            v.text,
            v.major,
            known.join(", ")
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_with_and_without_patch() {
        let v = parse_version("580.159.04").unwrap();
        assert_eq!((v.major, v.minor, v.patch), (580, 159, Some(4)));
        assert_eq!(v.text, "580.159.04");
        let v = parse_version("  580.142\0\0\0").unwrap();
        assert_eq!((v.major, v.minor, v.patch), (580, 142, None));
        let v = parse_version("575.57.08 (open kernel module)").unwrap();
        assert_eq!(v.major, 575);
        assert_eq!(v.text, "575.57.08");
    }

    #[test]
    fn garbage_versions_are_refused() {
        for bad in ["", "580", "580.", ".159", "580.x.1", "rel580.1", "580.1.2.3", "580.-1"] {
            assert!(parse_version(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn the_580_branch_is_verified_and_others_are_refused_by_name() {
        let abi = lookup("580.159.04").unwrap();
        assert_eq!(abi.major, 580);
        assert_eq!(abi.status, AbiStatus::Verified);
        assert!(lookup("580.65.06").is_ok(), "every 580 minor shares the branch ABI");
        for other in ["575.57.08", "590.12", "610.1.1"] {
            match lookup(other) {
                Err(HalError::UnsupportedDriver(msg)) => {
                    assert!(msg.contains(other), "{msg}");
                    assert!(msg.contains("580.x"), "{msg}");
                }
                r => panic!("{other}: {r:?}"),
            }
        }
        assert!(matches!(lookup("nonsense"), Err(HalError::UnsupportedDriver(m)) if m.contains("nonsense")));
    }

    #[test]
    fn table_sizes_match_the_fact_sheet() {
        let abi = lookup("580.159.04").unwrap();
        assert_eq!(abi.channel_alloc_params_bytes, 368);
        assert_eq!(abi.memory_alloc_params_bytes, 128);
        assert_eq!(abi.uvm_map_external_bytes, 9264);
    }
}
