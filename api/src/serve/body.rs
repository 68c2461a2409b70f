//! Ingest request bodies: read under the ingest budget, and decompressed with the body limit
//! applied to what comes out.
//!
//! `Content-Encoding: gzip` (every member of a multi-member body, as RFC 1952 allows) and
//! `deflate` (the zlib format, RFC 9110) and `zstd` (RFC 8878, every frame) are decoded here,
//! whole, before anything is stored: a body that does not decode to the end — a truncated
//! member or frame, garbage after the last one, bytes after the deflate stream — is refused with 400 and nothing of it is kept, never
//! stored in part under a 2xx. Any other encoding is 415. What comes out counts against
//! `max_body_bytes` (413 beyond) and against the ingest budget (`max_pending_bytes`, 503).

use crate::serve::error::ApiError;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use fencewatch_ingest::source::wal::Reservation;
use std::io::Read;

/// How a body is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// As it is.
    Identity,
    /// One or more gzip members.
    Gzip,
    /// A zlib stream.
    Deflate,
    /// One or more zstd frames.
    Zstd,
}

/// The body's `Content-Encoding`; 415 for one this service does not decode.
pub fn encoding(headers: &HeaderMap) -> Result<Encoding, ApiError> {
    let Some(v) = headers.get(header::CONTENT_ENCODING) else {
        return Ok(Encoding::Identity);
    };
    let s = v.to_str().unwrap_or("").trim().to_ascii_lowercase();
    match s.as_str() {
        "" | "identity" => Ok(Encoding::Identity),
        "gzip" | "x-gzip" => Ok(Encoding::Gzip),
        "deflate" => Ok(Encoding::Deflate),
        "zstd" => Ok(Encoding::Zstd),
        _ => Err(ApiError::UnsupportedEncoding {
            got: String::from_utf8_lossy(v.as_bytes())
                .chars()
                .take(64)
                .collect(),
        }),
    }
}

/// The capacity to read a body into: its `Content-Length`, up to 1 MiB (what the buffer may
/// grow to is the budget's and the limit's to say, not the header's); 0 without one.
pub fn length_hint(headers: &HeaderMap) -> usize {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
        .unwrap_or(0)
        .min(1 << 20)
}

/// The largest zstd window a body may use: 2^23 bytes (8 MiB).
const ZSTD_WINDOW_LOG_MAX: u32 = 23;

/// Why a body was not taken; nothing of it is stored.
#[derive(Debug)]
pub enum Refused {
    /// Over `max_body_bytes` (after decompression): a bare 413, which the problem layer words
    /// with the limit.
    TooLarge,
    /// Cut short, or not valid in its encoding (400).
    Bad(String),
    /// The ingest budget is spent (503 with `Retry-After`).
    Saturated(u64),
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        match self {
            Refused::TooLarge => StatusCode::PAYLOAD_TOO_LARGE.into_response(),
            Refused::Bad(detail) => ApiError::BadRequest { detail }.into_response(),
            Refused::Saturated(max) => ApiError::Saturated {
                detail: format!(
                    "ingest is saturated: more than max_pending_bytes ({max}) of request bodies are in flight; nothing of this body was stored, retry shortly"
                ),
            }
            .into_response(),
        }
    }
}

/// Reads a request body into `out` (after what it holds), taking each chunk from the ingest
/// budget first: a body that would pass `max_pending_bytes` is answered 503 before more of it
/// is read. The raw body limit (`max_body_bytes`) is the router's.
pub async fn read(
    body: axum::body::Body,
    out: &mut Vec<u8>,
    held: &mut Reservation,
    max_pending_bytes: u64,
) -> Result<(), Refused> {
    use http_body_util::BodyExt;
    let mut body = body;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(read_error)?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        if !held.grow(data.len() as u64) {
            return Err(Refused::Saturated(max_pending_bytes));
        }
        out.extend_from_slice(&data);
    }
    Ok(())
}

/// Why a body could not be read: over the limit, or cut short.
fn read_error(e: axum::Error) -> Refused {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(s) = source {
        if s.is::<http_body_util::LengthLimitError>() {
            return Refused::TooLarge;
        }
        source = s.source();
    }
    Refused::Bad(format!(
        "the request body could not be read (nothing of it was stored): {e}"
    ))
}

/// Decodes `raw` (encoded as `enc`) onto the end of `out`, at most `limit` bytes of it, taking
/// what comes out from the ingest budget. Blocking: run it off the async workers.
pub fn decode(
    enc: Encoding,
    raw: &[u8],
    out: &mut Vec<u8>,
    limit: u64,
    held: &mut Reservation,
    max_pending_bytes: u64,
) -> Result<(), Refused> {
    let bad = |what: String| {
        Refused::Bad(format!(
            "the body is not valid {what}; nothing of it was stored"
        ))
    };
    let start = out.len();
    let mut copy = |reader: &mut dyn Read, name: &str| -> Result<(), Refused> {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) => return Err(bad(format!("{name} ({e})"))),
            };
            if (out.len() - start + n) as u64 > limit {
                return Err(Refused::TooLarge);
            }
            if !held.grow(n as u64) {
                return Err(Refused::Saturated(max_pending_bytes));
            }
            out.extend_from_slice(&buf[..n]);
        }
    };
    match enc {
        Encoding::Identity => {
            out.extend_from_slice(raw);
            Ok(())
        }
        // Every member, to the end of the body: garbage after the last one is an error.
        Encoding::Gzip => copy(&mut flate2::read::MultiGzDecoder::new(raw), "gzip"),
        Encoding::Deflate => {
            let mut d = flate2::read::ZlibDecoder::new(raw);
            copy(&mut d, "deflate (zlib)")?;
            if d.total_in() < raw.len() as u64 {
                return Err(bad(format!(
                    "deflate (zlib): {} bytes after the end of the stream",
                    raw.len() as u64 - d.total_in()
                )));
            }
            Ok(())
        }
        // Every frame, to the end of the body (a truncated frame or trailing bytes are errors).
        // A frame may ask for a window of up to 2 GiB (128 MiB by the library's default), which
        // the decoder allocates: capped at 8 MiB (every compression level up to 19 fits), so a
        // request costs bounded memory whatever its header says.
        Encoding::Zstd => {
            let mut d = zstd::stream::read::Decoder::with_buffer(raw)
                .map_err(|e| bad(format!("zstd: {e}")))?;
            d.window_log_max(ZSTD_WINDOW_LOG_MAX)
                .map_err(|e| bad(format!("zstd: {e}")))?;
            copy(&mut d, "zstd")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fencewatch_ingest::source::wal::Budget;
    use std::io::Write;

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn zst(data: &[u8]) -> Vec<u8> {
        zstd::stream::encode_all(data, 3).unwrap()
    }

    #[test]
    fn every_zstd_frame_is_decoded_and_a_cut_or_trailing_byte_refused() {
        let two = [zst(b"one\n"), zst(b"two\nthree\n")].concat();
        assert_eq!(
            run(Encoding::Zstd, &two, 100).unwrap(),
            b"one\ntwo\nthree\n"
        );
        let cut = &two[..two.len() - 3];
        assert_eq!(run(Encoding::Zstd, cut, 100), Err(StatusCode::BAD_REQUEST));
        let trailing = [zst(b"one\n"), b"not zstd".to_vec()].concat();
        assert_eq!(
            run(Encoding::Zstd, &trailing, 100),
            Err(StatusCode::BAD_REQUEST)
        );
        // The limit applies to what comes out: 1 MiB of zeros is a few bytes of zstd.
        let bomb = zst(&vec![0u8; 1 << 20]);
        assert!(bomb.len() < 1024);
        assert_eq!(
            run(Encoding::Zstd, &bomb, 1000),
            Err(StatusCode::PAYLOAD_TOO_LARGE)
        );
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_ENCODING, "zstd".parse().unwrap());
        assert_eq!(encoding(&h).unwrap(), Encoding::Zstd);
        // A frame asking for a 16 MiB window is refused, under any body limit: the decoder
        // would allocate it. The same data in 8 MiB windows is taken.
        let data = vec![7u8; 12 << 20];
        let wide = |log: u32| {
            let mut e = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
            e.window_log(log).unwrap();
            e.write_all(&data).unwrap();
            e.finish().unwrap()
        };
        assert_eq!(
            run(Encoding::Zstd, &wide(24), 1 << 30),
            Err(StatusCode::BAD_REQUEST)
        );
        assert_eq!(
            run(Encoding::Zstd, &wide(23), 1 << 30).unwrap().len(),
            data.len()
        );
    }

    fn run(enc: Encoding, raw: &[u8], limit: u64) -> Result<Vec<u8>, StatusCode> {
        let budget = Budget::new(1 << 30);
        let mut held = budget.reserve();
        let mut out = b"head:".to_vec();
        decode(enc, raw, &mut out, limit, &mut held, 1 << 30)
            .map_err(|r| r.into_response().status())?;
        Ok(out[5..].to_vec())
    }

    #[test]
    fn every_gzip_member_is_decoded_and_anything_else_refused() {
        let two = [gz(b"one\n"), gz(b"two\nthree\n")].concat();
        assert_eq!(
            run(Encoding::Gzip, &two, 100).unwrap(),
            b"one\ntwo\nthree\n"
        );
        let garbage = [gz(b"one\n"), b"not gzip".to_vec()].concat();
        assert_eq!(
            run(Encoding::Gzip, &garbage, 100),
            Err(StatusCode::BAD_REQUEST)
        );
        let second = gz(b"two\n");
        let cut = [gz(b"one\n"), second[..second.len() - 3].to_vec()].concat();
        assert_eq!(run(Encoding::Gzip, &cut, 100), Err(StatusCode::BAD_REQUEST));
        assert_eq!(
            run(Encoding::Gzip, &gz(&[b'\n'; 1000]), 999),
            Err(StatusCode::PAYLOAD_TOO_LARGE)
        );
        assert_eq!(run(Encoding::Deflate, &zlib(b"x\n"), 100).unwrap(), b"x\n");
        let trailing = [zlib(b"x\n"), b"junk".to_vec()].concat();
        assert_eq!(
            run(Encoding::Deflate, &trailing, 100),
            Err(StatusCode::BAD_REQUEST)
        );
    }

    #[test]
    fn what_comes_out_is_taken_from_the_budget() {
        let budget = Budget::new(500);
        let mut held = budget.reserve();
        let mut out = Vec::new();
        let r = decode(
            Encoding::Gzip,
            &gz(&[b'x'; 1000]),
            &mut out,
            10_000,
            &mut held,
            500,
        );
        assert_eq!(
            r.unwrap_err().into_response().status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }

    #[test]
    fn encodings() {
        let mut h = HeaderMap::new();
        assert_eq!(encoding(&h).unwrap(), Encoding::Identity);
        for (v, want) in [
            ("gzip", Encoding::Gzip),
            ("X-GZIP", Encoding::Gzip),
            ("deflate", Encoding::Deflate),
            ("identity", Encoding::Identity),
            ("zstd", Encoding::Zstd),
        ] {
            h.insert(header::CONTENT_ENCODING, v.parse().unwrap());
            assert_eq!(encoding(&h).unwrap(), want, "{v}");
        }
        for v in ["br", "gzip, gzip", "zstd, gzip"] {
            h.insert(header::CONTENT_ENCODING, v.parse().unwrap());
            assert!(encoding(&h).is_err(), "{v}");
        }
    }
}
