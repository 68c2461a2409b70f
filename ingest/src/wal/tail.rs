//! Telling a torn tail from corruption: pure functions over the bytes of a segment, shared by
//! [`Wal::open`](super::Wal::open), [`inspect`](super::inspect) and
//! [`repair`](super::repair). The rule is in the [module docs](super).

use super::{HEADER_BYTES, MAGIC};

/// A zero fill that does not start at a record boundary must start at a multiple of this:
/// what a filesystem leaves is whole blocks it allocated and never wrote, and every block
/// size is a multiple of a 512-byte sector.
pub(crate) const SECTOR: u64 = 512;

/// A record header as written, not yet verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) magic_ok: bool,
    pub(crate) len: u64,
    pub(crate) base: u64,
    pub(crate) items: u32,
    pub(crate) crc: u32,
}

impl Header {
    pub(crate) fn parse(h: &[u8]) -> Header {
        let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
        Header {
            magic_ok: h[0..4] == MAGIC,
            len: u64::from(u32_at(4)),
            base: u64::from_le_bytes(h[8..16].try_into().expect("8 bytes")),
            items: u32_at(16),
            crc: u32_at(20),
        }
    }
}

/// A record found whole and verified in a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Found {
    /// Its byte position in the buffer.
    pub(crate) at: usize,
    /// Its header.
    pub(crate) header: Header,
}

impl Found {
    /// Bytes it takes, header included.
    pub(crate) fn bytes(&self) -> usize {
        HEADER_BYTES as usize + self.header.len as usize
    }
}

/// Why the bytes at a position are not a whole valid record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Invalid {
    PartialHeader,
    BadMagic,
    ShortPayload,
    CrcMismatch,
}

impl Invalid {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Invalid::PartialHeader => "partial header",
            Invalid::BadMagic => "bad magic",
            Invalid::ShortPayload => "short payload",
            Invalid::CrcMismatch => "crc mismatch",
        }
    }
}

fn crc(h: &[u8], payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&h[8..20]);
    hasher.update(payload);
    hasher.finalize()
}

/// The record at `at` in `buf`, if it is whole (within `buf`) and its magic and crc verify.
/// Offsets (base, items) are not checked here.
pub(crate) fn record_at(buf: &[u8], at: usize) -> Result<Found, Invalid> {
    let rest = &buf[at..];
    if rest.len() < HEADER_BYTES as usize {
        return Err(Invalid::PartialHeader);
    }
    let h = &rest[..HEADER_BYTES as usize];
    let header = Header::parse(h);
    if !header.magic_ok {
        return Err(Invalid::BadMagic);
    }
    let end = HEADER_BYTES as usize + header.len as usize;
    if rest.len() < end {
        return Err(Invalid::ShortPayload);
    }
    if crc(h, &rest[HEADER_BYTES as usize..end]) != header.crc {
        return Err(Invalid::CrcMismatch);
    }
    Ok(Found { at, header })
}

/// The first whole valid record starting at any byte position at or after `from`.
pub(crate) fn next_valid(buf: &[u8], from: usize) -> Option<Found> {
    let hay = buf.get(from..)?;
    memchr::memmem::find_iter(hay, &MAGIC)
        .map(|i| from + i)
        .find_map(|at| record_at(buf, at).ok())
}

/// How an invalid stretch at the end of the last segment came about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tail {
    /// What an interrupted append leaves: cut it.
    Torn(&'static str),
    /// Anything else: keep it, refuse, name it.
    Corrupt(String),
}

/// Classifies `tail`, the bytes from the first invalid record of the last segment (at file
/// position `pos`) to the end of the file, where that record must have base `next_base`.
pub(crate) fn classify(tail: &[u8], pos: u64, next_base: u64) -> Tail {
    let first = match record_at(tail, 0) {
        // Valid but out of place: written so, no torn write explains it.
        Ok(f) => {
            return Tail::Corrupt(format!(
                "record at offset {} with {} items, expected {next_base}",
                f.header.base, f.header.items
            ));
        }
        Err(why) => why,
    };
    if let Some(f) = next_valid(tail, 1) {
        let at = pos + f.at as u64;
        return Tail::Corrupt(format!(
            "{}, and a valid record (offset {}) follows at byte {at}",
            first.as_str(),
            f.header.base
        ));
    }
    // A zero fill: from the record's start, or whole sectors from inside the record.
    let nonzero_end = match tail.iter().rposition(|&b| b != 0) {
        None => return Tail::Torn("zero-filled tail"),
        Some(i) => i + 1,
    };
    let aligned = (pos + nonzero_end as u64).div_ceil(SECTOR) * SECTOR - pos;
    let (end, zero_filled) = match usize::try_from(aligned) {
        Ok(a) if a < tail.len() => (a, true),
        _ => (tail.len(), false),
    };
    match short(tail, end, next_base) {
        Ok(why) if zero_filled => Tail::Torn(match why {
            "partial header" => "partial header, then zero-filled sectors",
            _ => "short record, then zero-filled sectors",
        }),
        Ok(why) => Tail::Torn(why),
        Err(why) => Tail::Corrupt(why),
    }
}

/// Whether `tail[..end]` is a proper prefix of a record as this log writes them: a partial
/// header agreeing with the magic, or a header with the magic, the expected base and items,
/// whose declared length runs past `end`, and whose length field was not merely damaged.
fn short(tail: &[u8], end: usize, next_base: u64) -> Result<&'static str, String> {
    let data = &tail[..end];
    let h = HEADER_BYTES as usize;
    if data.len() < h {
        let n = data.len().min(MAGIC.len());
        return if data[..n] == MAGIC[..n] {
            Ok("partial header")
        } else {
            Err("bad magic".into())
        };
    }
    let header = Header::parse(&data[..h]);
    if !header.magic_ok {
        return Err("bad magic".into());
    }
    let declared = h as u64 + header.len;
    if declared <= end as u64 {
        // Whole within the written data: the crc (or the base) is wrong.
        return Err(match record_at(data, 0) {
            Err(why) => why.as_str().to_string(),
            Ok(_) => "record does not continue the log".to_string(),
        });
    }
    if header.base != next_base || header.items == 0 {
        return Err(format!(
            "torn-looking record at offset {} with {} items, expected offset {next_base}",
            header.base, header.items
        ));
    }
    // A length field with one byte changed would end the record inside the file: if the
    // record verifies at that length, it was written whole and its length was damaged.
    let payload = &tail[h..];
    for byte in 0..4 {
        for v in 0..=255u32 {
            let shift = 8 * byte;
            let len = (header.len & !(0xff << shift)) | (u64::from(v) << shift);
            if len != header.len
                && (len as usize) <= payload.len()
                && crc(&tail[..h], &payload[..len as usize]) == header.crc
            {
                return Err(format!(
                    "damaged length field: the record verifies with a length of {len} bytes, not {}",
                    header.len
                ));
            }
        }
    }
    Ok("short record")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(base: u64, items: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = super::super::encode_header(base, items, payload).to_vec();
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn short_records_and_zero_fills_are_torn() {
        let r = record(7, 2, &[b'x'; 2000]);
        for cut in 1..r.len() {
            assert!(
                matches!(classify(&r[..cut], 0, 7), Tail::Torn(_)),
                "cut at {cut}"
            );
        }
        assert_eq!(classify(&[0; 100], 30, 7), Tail::Torn("zero-filled tail"));
        // Written up to byte 700, then whole zero sectors past the record's end.
        let mut z = r[..700].to_vec();
        z.resize(3000, 0);
        assert_eq!(
            classify(&z, 0, 7),
            Tail::Torn("short record, then zero-filled sectors")
        );
        // The record is whole but for zeros from a sector boundary.
        let mut z = r.clone();
        z[1024..].fill(0);
        assert!(matches!(classify(&z, 0, 7), Tail::Torn(_)));
        // Zeros at the end that cover no sector boundary: a damaged whole record.
        let mut z = r.clone();
        z[2000..].fill(0);
        assert!(matches!(classify(&z, 0, 7), Tail::Corrupt(_)));
        // The same bytes 48 bytes further into the file: their zeros start at byte 2048.
        assert!(matches!(classify(&z, 48, 7), Tail::Torn(_)));
    }

    #[test]
    fn damage_of_whole_records_is_corruption() {
        let r = record(7, 2, &[b'x'; 300]);
        for i in 0..r.len() {
            let mut bad = r.clone();
            bad[i] ^= 0x10;
            let got = classify(&bad, 0, 7);
            assert!(matches!(got, Tail::Corrupt(_)), "byte {i}: {got:?}");
        }
        let mut bad = r.clone();
        bad[6] = 1; // 300 + 65536 bytes
        let got = classify(&bad, 0, 7);
        assert!(
            matches!(&got, Tail::Corrupt(w) if w.contains("damaged length field")),
            "{got:?}"
        );
        // A bad record followed by a valid one, even inside its own declared length.
        let mut two = [&r[..], &record(9, 1, b"next")[..]].concat();
        two[30] ^= 1;
        let got = classify(&two, 100, 7);
        assert!(
            matches!(&got, Tail::Corrupt(w) if w.contains("follows at byte 424")),
            "{got:?}"
        );
        two[4..8].copy_from_slice(&100_000u32.to_le_bytes());
        assert!(matches!(classify(&two, 0, 7), Tail::Corrupt(_)));
        assert_eq!(
            classify(b"garbage that is longer than a header", 0, 7),
            Tail::Corrupt("bad magic".into())
        );
        assert_eq!(classify(b"FWX", 0, 7), Tail::Corrupt("bad magic".into()));
        // A torn record that does not continue the log was not written by it.
        let got = classify(&r[..100], 0, 8);
        assert!(matches!(got, Tail::Corrupt(_)), "{got:?}");
    }
}
