//! Typed tuning keys: an op's name, its shape class as named fields, and a checksum of the kernel sources the
//! candidates run, so that an edited kernel never keeps a winner measured for the old one.
//!
//! The persistent form is `"{device}|{driver}::{kernel}@{checksum}::{shape_key}"`, where the shape key keeps
//! netcl's Python-tuple format and the checksum (16 hex digits) covers the kernel sources and the candidate set.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::OnceLock;

/// Shape fields held inline: keys are built on every call of a tuned op, so a key of up to this many fields
/// allocates nothing.
const INLINE: usize = 16;

/// The named shape fields of a key. The inline variant is large on purpose: a key lives on the stack of the
/// call that asks, and boxing it would bring back the allocation it exists to avoid.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
enum Fields {
    Inline(u8, [(&'static str, i64); INLINE]),
    Heap(Vec<(&'static str, i64)>),
}

impl Fields {
    fn new(fields: &[(&'static str, i64)]) -> Fields {
        if fields.len() <= INLINE {
            let mut a = [("", 0i64); INLINE];
            a[..fields.len()].copy_from_slice(fields);
            Fields::Inline(fields.len() as u8, a)
        } else {
            Fields::Heap(fields.to_vec())
        }
    }

    fn as_slice(&self) -> &[(&'static str, i64)] {
        match self {
            Fields::Inline(n, a) => &a[..*n as usize],
            Fields::Heap(v) => v,
        }
    }
}

/// An op's tuning question: which candidate for this kernel and this shape class.
///
/// Building one allocates nothing for a static kernel name and up to 16 fields; the shape key text is written
/// only when it is read (a decision is logged or the persistent key is needed).
#[derive(Debug, Clone)]
pub struct TuneKey {
    kernel: Cow<'static, str>,
    fields: Fields,
    shape: OnceLock<String>,
    source: u64,
}

impl PartialEq for TuneKey {
    fn eq(&self, other: &TuneKey) -> bool {
        self.kernel == other.kernel
            && self.source == other.source
            && self.fields() == other.fields()
            && self.shape_key() == other.shape_key()
    }
}

impl Eq for TuneKey {}

impl TuneKey {
    /// A key for `kernel` over the named shape fields (bucket sizes with [`bucket`] where netcl does).
    pub fn new(kernel: impl Into<Cow<'static, str>>, fields: &[(&'static str, i64)]) -> TuneKey {
        TuneKey {
            kernel: kernel.into(),
            fields: Fields::new(fields),
            shape: OnceLock::new(),
            source: FNV_OFFSET,
        }
    }

    /// A key whose shape class a lower layer already wrote in netcl's tuple form (a GEMM descriptor carries
    /// the key of the op that asked for the product); it has no named fields.
    pub fn from_shape_key(
        kernel: impl Into<Cow<'static, str>>,
        shape_key: impl Into<String>,
    ) -> TuneKey {
        TuneKey {
            kernel: kernel.into(),
            fields: Fields::new(&[]),
            shape: OnceLock::from(shape_key.into()),
            source: FNV_OFFSET,
        }
    }

    /// Folds a kernel source text into the key's checksum (call once per source the candidates run).
    pub fn source(mut self, text: &'static str) -> TuneKey {
        self.source = mix(self.source, text_checksum(text));
        self
    }

    /// The kernel or op name.
    pub fn kernel(&self) -> &str {
        &self.kernel
    }

    /// The shape class in netcl's tuple form, e.g. `(2, 8, 256)`.
    pub fn shape_key(&self) -> &str {
        self.shape.get_or_init(|| {
            let values: Vec<i64> = self.fields().iter().map(|f| f.1).collect();
            shape_key(&values)
        })
    }

    /// The named shape fields.
    pub fn fields(&self) -> &[(&'static str, i64)] {
        self.fields.as_slice()
    }

    /// The checksum of the kernel sources folded in with [`TuneKey::source`].
    pub fn source_checksum(&self) -> u64 {
        self.source
    }

    /// The persistent key for a device and a candidate-set checksum.
    pub fn persistent(&self, tune_id: &str, candidates: u64) -> String {
        format!(
            "{tune_id}::{}@{:016x}::{}",
            self.kernel,
            mix(self.source, candidates),
            self.shape_key()
        )
    }

    /// A 64-bit digest of (device, kernel, source checksum, shape) for the in-process memo, computed without
    /// allocating; [`TuneKey::same_question`] confirms a hit.
    pub(crate) fn memo_hash(&self, tune_id: &str) -> u64 {
        let mut h = fnv(FNV_OFFSET, tune_id.as_bytes());
        h = fnv(h, b"\x1f");
        h = fnv(h, self.kernel.as_bytes());
        h = mix(h, self.source);
        match self.fields.as_slice() {
            [] => fnv(h, self.shape_key().as_bytes()),
            fields => fields.iter().fold(h, |h, f| mix(h, f.1 as u64)),
        }
    }

    /// Whether `self` asks the same question as `other` (kernel, source checksum and shape values).
    pub(crate) fn same_question(&self, other: &TuneKey) -> bool {
        self.kernel == other.kernel
            && self.source == other.source
            && self.fields.as_slice().len() == other.fields.as_slice().len()
            && self
                .fields
                .as_slice()
                .iter()
                .zip(other.fields.as_slice())
                .all(|(a, b)| a.1 == b.1)
            && (!self.fields.as_slice().is_empty() || self.shape_key() == other.shape_key())
    }
}

/// The parts of a persistent key: device (`name|driver`), kernel, checksum (when present) and shape key.
pub fn split_key(key: &str) -> (&str, &str, Option<&str>, &str) {
    let mut parts = key.splitn(3, "::");
    let device = parts.next().unwrap_or_default();
    let kernel = parts.next().unwrap_or_default();
    let shape = parts.next().unwrap_or_default();
    match kernel.split_once('@') {
        Some((k, sum)) => (device, k, Some(sum), shape),
        None => (device, kernel, None, shape),
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a over bytes, continuing from `h`.
pub(crate) fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A checksum of a list of serialised candidates (order matters: the default is an index into it).
pub(crate) fn candidates_checksum(values: &[serde_json::Value]) -> u64 {
    let mut h = FNV_OFFSET;
    for v in values {
        h = fnv(h, v.to_string().as_bytes());
        h = fnv(h, b"\x1f");
    }
    h
}

fn mix(a: u64, b: u64) -> u64 {
    fnv(a, &b.to_le_bytes())
}

/// The checksum of a static source text, computed once per text per thread (keys are built on every call).
fn text_checksum(text: &'static str) -> u64 {
    thread_local! {
        static SUMS: RefCell<HashMap<(usize, usize), u64>> = RefCell::new(HashMap::new());
    }
    let id = (text.as_ptr() as usize, text.len());
    SUMS.with(|s| {
        *s.borrow_mut()
            .entry(id)
            .or_insert_with(|| fnv(FNV_OFFSET, text.as_bytes()))
    })
}

/// netcl's shape-key format: a Python tuple of the values, e.g. `(2, 8, 256, 16, 1, 0)`.
pub fn shape_key(parts: &[i64]) -> String {
    let mut s = String::with_capacity(2 + parts.len() * 8);
    s.push('(');
    for (i, &p) in parts.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        push_int(&mut s, p);
    }
    if parts.len() == 1 {
        s.push(',');
    }
    s.push(')');
    s
}

/// Appends `v` in decimal (as `{v}` would, without the formatting machinery: keys are built on every call).
fn push_int(s: &mut String, v: i64) {
    if v < 0 {
        s.push('-');
    }
    let mut n = v.unsigned_abs();
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[at..] {
        s.push(d as char);
    }
}

/// The power of two at or above `n` (netcl's bucketing of batch and spatial sizes).
pub fn bucket(n: usize) -> i64 {
    n.max(1).next_power_of_two() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_key_matches_python_tuple() {
        assert_eq!(shape_key(&[2, 8, 256, 16, 1, 0]), "(2, 8, 256, 16, 1, 0)");
        assert_eq!(shape_key(&[5]), "(5,)");
        assert_eq!(
            shape_key(&[0, -7, 10, i64::MIN, i64::MAX]),
            format!("(0, -7, 10, {}, {})", i64::MIN, i64::MAX)
        );
        assert_eq!(bucket(3), 4);
        assert_eq!(bucket(0), 1);
    }

    #[test]
    fn the_persistent_key_carries_source_and_candidate_checksums() {
        let k = TuneKey::new("reduce", &[("o", 1), ("r", 64)]).source("kernel void a() {}");
        let edited = TuneKey::new("reduce", &[("o", 1), ("r", 64)]).source("kernel void a() { }");
        assert_ne!(k.persistent("d|1", 7), edited.persistent("d|1", 7));
        assert_ne!(k.persistent("d|1", 7), k.persistent("d|1", 8));
        let p = k.persistent("d|1", 7);
        let (dev, kernel, sum, shape) = split_key(&p);
        assert_eq!((dev, kernel, shape), ("d|1", "reduce", "(1, 64)"));
        assert_eq!(sum.map(str::len), Some(16));
        assert_eq!(split_key("d|1::k::(1,)"), ("d|1", "k", None, "(1,)"));
    }
}
