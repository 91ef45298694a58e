//! A safetensors reader: an 8-byte little-endian header length, that many bytes of JSON (`name ->
//! {dtype, shape, data_offsets: [begin, end]}`, plus an optional `__metadata__` of strings), then the raw
//! tensors, row-major and little-endian, at their offsets from the end of the header. bf16 and f32 are
//! read (what a Qwen3 checkpoint holds); another dtype is refused by name. Everything is checked before a
//! tensor is handed out: the header's length, each tensor's bytes against its shape and dtype, its
//! offsets inside the data and not overlapping another's.

use std::collections::BTreeMap;

/// A tensor's element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    /// bfloat16, two bytes.
    Bf16,
    /// IEEE f32, four bytes.
    F32,
}

impl Dtype {
    /// Bytes per element.
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::Bf16 => 2,
            Dtype::F32 => 4,
        }
    }

    /// The header's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Bf16 => "BF16",
            Dtype::F32 => "F32",
        }
    }
}

/// One tensor of a file: its type, shape and bytes (borrowed from the file's bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorView<'a> {
    /// Element type.
    pub dtype: Dtype,
    /// Sides, outermost first.
    pub shape: Vec<u64>,
    /// The raw little-endian elements.
    pub bytes: &'a [u8],
}

/// Why a file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SafetensorsError {
    /// Shorter than its header says.
    #[error("safetensors: {len} bytes, the header needs {needs}")]
    Truncated {
        /// The file's bytes.
        len: u64,
        /// What the header length asks.
        needs: u64,
    },
    /// The header is not the JSON object the format says.
    #[error("safetensors: header: {0}")]
    Header(String),
    /// A dtype this reader does not read.
    #[error("safetensors: tensor {name}: dtype {dtype} (this reader reads BF16 and F32)")]
    Dtype {
        /// The tensor.
        name: String,
        /// Its dtype.
        dtype: String,
    },
    /// A tensor's offsets disagree with its shape or fall outside the data.
    #[error("safetensors: tensor {name}: bytes {begin}..{end} of {data}, its shape needs {needs}")]
    Extent {
        /// The tensor.
        name: String,
        /// First byte.
        begin: u64,
        /// One past the last.
        end: u64,
        /// The data's bytes.
        data: u64,
        /// What its shape and dtype need.
        needs: u64,
    },
    /// Two tensors share bytes.
    #[error("safetensors: tensors {0} and {1} overlap")]
    Overlap(String, String),
}

/// A parsed file: every tensor by name, and the metadata.
#[derive(Clone, Debug, Default)]
pub struct Safetensors<'a> {
    /// The tensors, by name.
    pub tensors: BTreeMap<String, TensorView<'a>>,
    /// `__metadata__`, when present.
    pub metadata: BTreeMap<String, String>,
}

fn header_err(what: impl std::fmt::Display) -> SafetensorsError {
    SafetensorsError::Header(what.to_string())
}

/// Reads `bytes` (a whole file).
pub fn parse(bytes: &[u8]) -> Result<Safetensors<'_>, SafetensorsError> {
    let len = bytes.len() as u64;
    let Some(head) = bytes.get(..8) else { return Err(SafetensorsError::Truncated { len, needs: 8 }) };
    let n = u64::from_le_bytes(head.try_into().expect("8 bytes"));
    let end = n
        .checked_add(8)
        .filter(|&e| e <= len)
        .ok_or(SafetensorsError::Truncated { len, needs: n.saturating_add(8) })?;
    let data = &bytes[end as usize..];
    let json: serde_json::Value = serde_json::from_slice(&bytes[8..end as usize]).map_err(header_err)?;
    let obj = json.as_object().ok_or_else(|| header_err("not an object"))?;
    let mut out = Safetensors::default();
    let mut extents = Vec::new();
    for (name, entry) in obj {
        if name == "__metadata__" {
            for (k, v) in entry.as_object().ok_or_else(|| header_err("__metadata__ is not an object"))? {
                let v = v.as_str().ok_or_else(|| header_err(format!("__metadata__.{k} is not a string")))?;
                out.metadata.insert(k.clone(), v.to_owned());
            }
            continue;
        }
        let t = tensor(name, entry, data)?;
        extents.push((t.bytes.as_ptr() as usize - data.as_ptr() as usize, t.bytes.len(), name.clone()));
        out.tensors.insert(name.clone(), t);
    }
    extents.sort();
    for w in extents.windows(2) {
        if w[0].0 + w[0].1 > w[1].0 {
            return Err(SafetensorsError::Overlap(w[0].2.clone(), w[1].2.clone()));
        }
    }
    Ok(out)
}

fn tensor<'a>(name: &str, entry: &serde_json::Value, data: &'a [u8]) -> Result<TensorView<'a>, SafetensorsError> {
    let field = |f: &str| entry.get(f).ok_or_else(|| header_err(format!("tensor {name}: no {f}")));
    let dtype = match field("dtype")?.as_str() {
        Some("BF16") => Dtype::Bf16,
        Some("F32") => Dtype::F32,
        other => {
            let dtype = other.map_or_else(|| "(not a string)".to_owned(), str::to_owned);
            return Err(SafetensorsError::Dtype { name: name.to_owned(), dtype });
        }
    };
    let ints = |f: &str| -> Result<Vec<u64>, SafetensorsError> {
        let v = field(f)?.as_array().ok_or_else(|| header_err(format!("tensor {name}: {f} is not a list")))?;
        v.iter().map(|x| x.as_u64().ok_or_else(|| header_err(format!("tensor {name}: {f} holds {x}")))).collect()
    };
    let shape = ints("shape")?;
    let offsets = ints("data_offsets")?;
    let [begin, end] = offsets[..] else { return Err(header_err(format!("tensor {name}: data_offsets {offsets:?}"))) };
    let needs = shape.iter().try_fold(dtype.bytes(), |a, &s| a.checked_mul(s)).unwrap_or(u64::MAX);
    let data_len = data.len() as u64;
    if begin > end || end > data_len || end - begin != needs {
        return Err(SafetensorsError::Extent { name: name.to_owned(), begin, end, data: data_len, needs });
    }
    Ok(TensorView { dtype, shape, bytes: &data[begin as usize..end as usize] })
}

/// A file of `tensors` (name, dtype, shape, bytes), in the order given, with `metadata`: what [`parse`]
/// reads back. The header is padded with spaces to a multiple of 8 bytes, as the reference writer does.
pub fn write(tensors: &[(&str, Dtype, &[u64], &[u8])], metadata: &[(&str, &str)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    if !metadata.is_empty() {
        let m = metadata.iter().map(|(k, v)| ((*k).to_owned(), serde_json::Value::from(*v))).collect();
        header.insert("__metadata__".into(), serde_json::Value::Object(m));
    }
    let mut at = 0u64;
    for (name, dtype, shape, bytes) in tensors {
        let end = at + bytes.len() as u64;
        let entry = serde_json::json!({ "dtype": dtype.name(), "shape": shape, "data_offsets": [at, end] });
        header.insert((*name).to_owned(), entry);
        at = end;
    }
    let mut json = serde_json::Value::Object(header).to_string().into_bytes();
    json.resize(json.len().next_multiple_of(8), b' ');
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    for (.., bytes) in tensors {
        out.extend_from_slice(bytes);
    }
    out
}
