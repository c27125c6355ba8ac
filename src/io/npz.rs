//! NumPy `.npy` arrays and `.npz` archives (a zip of `.npy` members), read and written without NumPy.
//!
//! Reading accepts what NumPy writes: stored or deflated members, zip64 extra fields (NumPy forces them), npy
//! format versions 1–3, little-endian f32/f64/i32/i64/u8/bool and 0-d unicode strings. Writing produces
//! stored members with npy 1.0 headers, which every NumPy reads. Files are written atomically.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};

/// The element data of an array.
#[derive(Debug, Clone, PartialEq)]
pub enum NpyData {
    /// `<f4`
    F32(Vec<f32>),
    /// `<f8`
    F64(Vec<f64>),
    /// `<i4`
    I32(Vec<i32>),
    /// `<i8`
    I64(Vec<i64>),
    /// `|u1` or `|b1`
    U8(Vec<u8>),
    /// `<U{n}`: one string per element (UTF-32 in the file).
    Str(Vec<String>),
}

/// One array: a shape and its elements in C order.
#[derive(Debug, Clone, PartialEq)]
pub struct NpyArray {
    /// The shape (empty for a 0-d scalar).
    pub shape: Vec<usize>,
    /// The elements.
    pub data: NpyData,
}

impl NpyArray {
    /// An f32 array.
    pub fn f32(shape: &[usize], data: Vec<f32>) -> Self {
        NpyArray {
            shape: shape.to_vec(),
            data: NpyData::F32(data),
        }
    }

    /// A 0-d unicode scalar (how netcl stores its JSON metadata).
    pub fn string(s: &str) -> Self {
        NpyArray {
            shape: Vec::new(),
            data: NpyData::Str(vec![s.to_owned()]),
        }
    }

    /// The elements as f32 (converting f64 and integers), or an error naming the dtype.
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        Ok(match &self.data {
            NpyData::F32(v) => v.clone(),
            NpyData::F64(v) => v.iter().map(|&x| x as f32).collect(),
            NpyData::I32(v) => v.iter().map(|&x| x as f32).collect(),
            NpyData::I64(v) => v.iter().map(|&x| x as f32).collect(),
            NpyData::U8(v) => v.iter().map(|&x| x as f32).collect(),
            NpyData::Str(_) => {
                return Err(Error::DType("a string array has no numeric values".into()));
            }
        })
    }

    /// The single string of a 0-d unicode scalar.
    pub fn as_str(&self) -> Option<&str> {
        match &self.data {
            NpyData::Str(v) if v.len() == 1 => Some(&v[0]),
            _ => None,
        }
    }
}

fn bad(path: &Path, msg: impl Into<String>) -> Error {
    Error::Format {
        path: path.to_owned(),
        message: msg.into(),
    }
}

fn u16le(b: &[u8], at: usize) -> Option<u16> {
    b.get(at..at + 2).map(|s| u16::from_le_bytes([s[0], s[1]]))
}
fn u32le(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}
fn u64le(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at + 8)
        .map(|s| u64::from_le_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]]))
}

/// The little-endian values of width `N` in `b`, decoded by `f` (`f32::from_le_bytes`, …).
fn le<T, const N: usize>(b: &[u8], f: fn([u8; N]) -> T) -> Vec<T> {
    // `chunks_exact` yields N bytes a chunk, so the conversion cannot fail.
    b.chunks_exact(N)
        .map(|c| f(c.try_into().unwrap_or([0; N])))
        .collect()
}

/// The little-endian bytes of `v`, each value encoded by `f` (`f32::to_le_bytes`, …).
fn to_le<T: Copy, const N: usize>(v: &[T], f: fn(T) -> [u8; N]) -> Vec<u8> {
    v.iter().flat_map(|x| f(*x)).collect()
}

/// Reads every member of an `.npz` file; member names lose their `.npy` suffix.
pub fn read_npz(path: &Path) -> Result<BTreeMap<String, NpyArray>> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    read_npz_bytes(&bytes).map_err(|m| bad(path, m))
}

/// Parses an `.npz` archive held in memory.
pub fn read_npz_bytes(b: &[u8]) -> std::result::Result<BTreeMap<String, NpyArray>, String> {
    // End of central directory: signature 0x06054b50 within the last 64 KiB + 22 bytes.
    let min = b.len().saturating_sub(22 + 65_535);
    let eocd = (min..b.len().saturating_sub(21))
        .rev()
        .find(|&i| u32le(b, i) == Some(0x0605_4b50))
        .ok_or(
            "not a zip archive (no end-of-central-directory record); the file may be truncated",
        )?;
    let mut count = u16le(b, eocd + 10).ok_or("truncated")? as u64;
    let mut cd = u32le(b, eocd + 16).ok_or("truncated")? as u64;
    if (count == 0xffff || cd == 0xffff_ffff)
        && eocd >= 20
        && u32le(b, eocd - 20) == Some(0x0706_4b50)
    {
        let z64 = u64le(b, eocd - 12).ok_or("truncated zip64 locator")? as usize;
        if u32le(b, z64) != Some(0x0606_4b50) {
            return Err("bad zip64 end-of-central-directory record".into());
        }
        count = u64le(b, z64 + 32).ok_or("truncated")?;
        cd = u64le(b, z64 + 48).ok_or("truncated")?;
    }
    let mut out = BTreeMap::new();
    let mut p = cd as usize;
    for _ in 0..count {
        if u32le(b, p) != Some(0x0201_4b50) {
            return Err("bad central directory entry; the file may be truncated".into());
        }
        let method = u16le(b, p + 10).ok_or("truncated")?;
        let mut csize = u32le(b, p + 20).ok_or("truncated")? as u64;
        let mut usize_ = u32le(b, p + 24).ok_or("truncated")? as u64;
        let nlen = u16le(b, p + 28).ok_or("truncated")? as usize;
        let xlen = u16le(b, p + 30).ok_or("truncated")? as usize;
        let clen = u16le(b, p + 32).ok_or("truncated")? as usize;
        let mut local = u32le(b, p + 42).ok_or("truncated")? as u64;
        let name = String::from_utf8_lossy(b.get(p + 46..p + 46 + nlen).ok_or("truncated name")?)
            .into_owned();
        // Zip64 extra field: the 64-bit values appear in order for each 32-bit field that is 0xffffffff.
        let mut x = p + 46 + nlen;
        let xend = x + xlen;
        while x + 4 <= xend {
            let id = u16le(b, x).ok_or("truncated")?;
            let len = u16le(b, x + 2).ok_or("truncated")? as usize;
            if id == 1 {
                let mut q = x + 4;
                for field in [&mut usize_, &mut csize, &mut local] {
                    if *field == 0xffff_ffff {
                        *field = u64le(b, q).ok_or("truncated zip64 field")?;
                        q += 8;
                    }
                }
            }
            x += 4 + len;
        }
        p = xend + clen;
        let l = local as usize;
        if u32le(b, l) != Some(0x0403_4b50) {
            return Err(format!("member `{name}`: bad local header"));
        }
        let start = l
            + 30
            + u16le(b, l + 26).ok_or("truncated")? as usize
            + u16le(b, l + 28).ok_or("truncated")? as usize;
        let end = usize::try_from(csize)
            .ok()
            .and_then(|c| start.checked_add(c))
            .ok_or_else(|| format!("member `{name}` is truncated"))?;
        let raw = b
            .get(start..end)
            .ok_or_else(|| format!("member `{name}` is truncated"))?;
        let data = match method {
            0 => raw.to_vec(),
            8 => {
                // The size the archive claims is a hint, not a promise: a damaged or hostile file may claim
                // more than could ever be allocated.
                let mut v = Vec::with_capacity(usize::try_from(usize_).unwrap_or(0).min(1 << 24));
                flate2::read::DeflateDecoder::new(raw)
                    .read_to_end(&mut v)
                    .map_err(|e| format!("member `{name}`: {e}"))?;
                v
            }
            m => {
                return Err(format!(
                    "member `{name}` uses zip compression method {m}; only stored and deflate are read"
                ));
            }
        };
        let key = name.strip_suffix(".npy").unwrap_or(&name).to_owned();
        out.insert(
            key,
            parse_npy(&data).map_err(|e| format!("member `{name}`: {e}"))?,
        );
    }
    Ok(out)
}

/// Parses one `.npy` file held in memory.
pub fn parse_npy(b: &[u8]) -> std::result::Result<NpyArray, String> {
    if b.get(..6) != Some(b"\x93NUMPY") {
        return Err("not an npy array (bad magic)".into());
    }
    let major = *b.get(6).ok_or("truncated")?;
    let (hlen, hstart) = match major {
        1 => (u16le(b, 8).ok_or("truncated")? as usize, 10),
        2 | 3 => (u32le(b, 8).ok_or("truncated")? as usize, 12),
        v => return Err(format!("npy format version {v} is not supported")),
    };
    let header = std::str::from_utf8(b.get(hstart..hstart + hlen).ok_or("truncated header")?)
        .map_err(|_| "header is not text")?;
    let descr = dict_str(header, "descr").ok_or("header has no descr")?;
    if header.contains("'fortran_order': True") {
        return Err("Fortran-ordered arrays are not supported".into());
    }
    let shape = dict_shape(header).ok_or("header has no shape")?;
    let n: usize = shape.iter().product();
    let body = &b[hstart + hlen..];
    let need = |w: usize| -> std::result::Result<&[u8], String> {
        body.get(..n * w).ok_or_else(|| {
            format!(
                "data holds {} bytes, shape {shape:?} needs {}",
                body.len(),
                n * w
            )
        })
    };
    let data = match descr.as_str() {
        "<f4" => NpyData::F32(le(need(4)?, f32::from_le_bytes)),
        "<f8" => NpyData::F64(le(need(8)?, f64::from_le_bytes)),
        "<i4" => NpyData::I32(le(need(4)?, i32::from_le_bytes)),
        "<i8" => NpyData::I64(le(need(8)?, i64::from_le_bytes)),
        "|u1" | "|b1" => NpyData::U8(need(1)?.to_vec()),
        d if d.starts_with("<U") => {
            let w: usize = d[2..].parse().map_err(|_| format!("bad dtype {d}"))?;
            let raw = need(4 * w)?;
            let strs = raw
                .chunks_exact(4 * w.max(1))
                .map(|c| {
                    c.chunks_exact(4)
                        .map(|u| u32::from_le_bytes([u[0], u[1], u[2], u[3]]))
                        .take_while(|&u| u != 0)
                        .filter_map(char::from_u32)
                        .collect::<String>()
                })
                .collect();
            NpyData::Str(if w == 0 { vec![String::new(); n] } else { strs })
        }
        d => {
            return Err(format!(
                "dtype {d} is not supported (f4, f8, i4, i8, u1, b1 and U are)"
            ));
        }
    };
    Ok(NpyArray { shape, data })
}

fn dict_str(h: &str, key: &str) -> Option<String> {
    let i = h.find(&format!("'{key}'"))?;
    let rest = &h[i + key.len() + 2..];
    let q = rest.find('\'')?;
    let rest = &rest[q + 1..];
    Some(rest[..rest.find('\'')?].to_owned())
}

fn dict_shape(h: &str) -> Option<Vec<usize>> {
    let i = h.find("'shape'")?;
    let rest = &h[i..];
    let open = rest.find('(')?;
    let close = rest.find(')')?;
    rest[open + 1..close]
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().ok())
        .collect()
}

/// Serialises one array as npy 1.0.
pub fn npy_bytes(a: &NpyArray) -> Vec<u8> {
    let (descr, body): (String, Vec<u8>) = match &a.data {
        NpyData::F32(v) => ("<f4".into(), to_le(v, f32::to_le_bytes)),
        NpyData::F64(v) => ("<f8".into(), to_le(v, f64::to_le_bytes)),
        NpyData::I32(v) => ("<i4".into(), to_le(v, i32::to_le_bytes)),
        NpyData::I64(v) => ("<i8".into(), to_le(v, i64::to_le_bytes)),
        NpyData::U8(v) => ("|u1".into(), v.clone()),
        NpyData::Str(v) => {
            let w = v
                .iter()
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
                .max(1);
            let mut body = Vec::with_capacity(v.len() * w * 4);
            for s in v {
                let mut k = 0;
                for c in s.chars() {
                    body.extend_from_slice(&(c as u32).to_le_bytes());
                    k += 1;
                }
                body.extend(std::iter::repeat_n(0u8, (w - k) * 4));
            }
            (format!("<U{w}"), body)
        }
    };
    let shape = match a.shape.len() {
        0 => "()".to_owned(),
        1 => format!("({},)", a.shape[0]),
        _ => format!(
            "({})",
            a.shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // Pad so that the data starts on a 64-byte boundary, ending the header with a newline.
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + body.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&body);
    out
}

/// Builds an `.npz` archive (stored members named `<name>.npy`) in memory.
pub fn npz_bytes(members: &[(String, NpyArray)]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, arr) in members {
        let fname = format!("{name}.npy");
        let data = npy_bytes(arr);
        if data.len() > u32::MAX as usize || out.len() > u32::MAX as usize {
            return Err(Error::Limit(format!(
                "member `{name}` is too large for a zip without zip64 (4 GiB)"
            )));
        }
        let crc = crate::codec::crc32(&data);
        let offset = out.len() as u32;
        let mut local = Vec::new();
        local.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        local.extend_from_slice(&20u16.to_le_bytes()); // version needed
        local.extend_from_slice(&0u16.to_le_bytes()); // flags
        local.extend_from_slice(&0u16.to_le_bytes()); // stored
        local.extend_from_slice(&0u16.to_le_bytes()); // time
        local.extend_from_slice(&0x21u16.to_le_bytes()); // date 1980-01-01
        local.extend_from_slice(&crc.to_le_bytes());
        local.extend_from_slice(&(data.len() as u32).to_le_bytes());
        local.extend_from_slice(&(data.len() as u32).to_le_bytes());
        local.extend_from_slice(&(fname.len() as u16).to_le_bytes());
        local.extend_from_slice(&0u16.to_le_bytes());
        local.extend_from_slice(fname.as_bytes());
        out.extend_from_slice(&local);
        out.extend_from_slice(&data);
        central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        central.extend_from_slice(&20u16.to_le_bytes()); // made by
        central.extend_from_slice(&local[4..30]); // shared fields from "version needed" to "extra length"
        central.extend_from_slice(&0u16.to_le_bytes()); // comment length
        central.extend_from_slice(&0u16.to_le_bytes()); // disk
        central.extend_from_slice(&0u16.to_le_bytes()); // internal attributes
        central.extend_from_slice(&(0o100644u32 << 16).to_le_bytes()); // external attributes
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(fname.as_bytes());
    }
    let cd_offset = out.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&(members.len() as u16).to_le_bytes());
    out.extend_from_slice(&(members.len() as u16).to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&cd_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    Ok(out)
}

/// Writes an `.npz` archive to exactly `path`, atomically (a temporary file, then a rename).
pub fn write_npz(path: &Path, members: &[(String, NpyArray)]) -> Result<()> {
    let bytes = npz_bytes(members)?;
    crate::fsio::write_atomic(path, &bytes).map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_round_trip_through_an_archive() {
        let members = vec![
            (
                "0:weight".to_owned(),
                NpyArray::f32(&[2, 3], vec![1.0, -2.0, 3.5, 0.0, f32::INFINITY, 6.0]),
            ),
            (
                "1:bias".to_owned(),
                NpyArray {
                    shape: vec![3],
                    data: NpyData::I64(vec![1, 2, -3]),
                },
            ),
            (
                "__netcl_meta__".to_owned(),
                NpyArray::string("{\"type\":\"Sequential\",\"é\":1}"),
            ),
            ("empty".to_owned(), NpyArray::f32(&[0, 4], vec![])),
        ];
        let bytes = npz_bytes(&members).expect("write");
        let back = read_npz_bytes(&bytes).expect("read");
        assert_eq!(back.len(), 4);
        for (k, v) in &members {
            assert_eq!(&back[k], v, "{k}");
        }
        assert_eq!(
            back["__netcl_meta__"].as_str(),
            Some("{\"type\":\"Sequential\",\"é\":1}")
        );
    }

    #[test]
    fn truncated_archives_are_errors() {
        let bytes =
            npz_bytes(&[("a".to_owned(), NpyArray::f32(&[4], vec![1.0; 4]))]).expect("write");
        for cut in [0, 10, bytes.len() / 2, bytes.len() - 1] {
            assert!(read_npz_bytes(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        assert!(parse_npy(b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4',").is_err());
    }
}
