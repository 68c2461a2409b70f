//! Where malformed Kafka messages are copied with their reason: the dead-letter topic (headers
//! `fencewatch-reason`, `fencewatch-source`) or, without one, a JSON line each in
//! `<data_dir>/kafka/dead-letter.ndjson`. Copies are bounded: a file copy keeps 64 KiB of the
//! value (`payload_bytes`, `payload_truncated` say what was cut) and the file is rotated to
//! `dead-letter.ndjson.1` at 64 MiB; a topic copy keeps `max_line_bytes` (header
//! `fencewatch-truncated` with the original length).

use super::Error;
use rdkafka::message::{BorrowedMessage, Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord};
use std::io::Write;
use std::path::PathBuf;

/// A dead-letter file copy keeps at most this many bytes of the message's value (and of its
/// key); the line says how long the value was and that it was cut.
pub const DEAD_LETTER_FILE_VALUE_BYTES: usize = 64 * 1024;
/// The dead-letter file is rotated to `dead-letter.ndjson.1` (replacing the one before) when
/// it reaches this size: at most twice this on disk, however many messages are poison.
pub const DEAD_LETTER_FILE_BYTES: u64 = 64 * 1024 * 1024;
/// A dead-letter topic copy keeps at most this many bytes of the message's value (and never
/// more than `max_line_bytes`, beyond which the message was malformed for its length alone),
/// with a `fencewatch-truncated` header giving the original length.
const DEAD_LETTER_TOPIC_VALUE_BYTES: usize = 9_000_000;

/// Where malformed messages go.
pub(super) enum DeadLetter {
    Topic { topic: String },
    File(DeadFile),
}

impl DeadLetter {
    /// Copies `msg` (`source` is `topic/partition:offset`) with its reason `why`, its value
    /// cut to a bound. `Ok(false)`: the topic refused it (logged; consumption goes on).
    /// `Err`: the file cannot be written, which is fatal as a checkpoint is: offsets are not
    /// committed past a copy lost.
    pub(super) fn copy(
        &mut self,
        producer: Option<&BaseProducer>,
        msg: &BorrowedMessage<'_>,
        source: &str,
        why: &str,
        max_line_bytes: usize,
    ) -> Result<bool, Error> {
        let payload_len = msg.payload().map_or(0, <[u8]>::len);
        match self {
            DeadLetter::Topic { topic } => {
                let producer = producer.expect("a dead-letter topic has a producer");
                let max = DEAD_LETTER_TOPIC_VALUE_BYTES.min(max_line_bytes.max(1024));
                let original = payload_len.to_string();
                let mut headers = OwnedHeaders::new()
                    .insert(Header {
                        key: "fencewatch-reason",
                        value: Some(why),
                    })
                    .insert(Header {
                        key: "fencewatch-source",
                        value: Some(source),
                    });
                let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic);
                if let Some(k) = msg.key() {
                    record = record.key(cut(k, max).0);
                }
                if let Some(p) = msg.payload() {
                    let (value, truncated) = cut(p, max);
                    if truncated {
                        headers = headers.insert(Header {
                            key: "fencewatch-truncated",
                            value: Some(&original),
                        });
                    }
                    record = record.payload(value);
                }
                match producer.send(record.headers(headers)) {
                    Ok(()) => Ok(true),
                    Err((e, _)) => {
                        tracing::error!(source, error = %e, "kafka: dead-lettering failed");
                        Ok(false)
                    }
                }
            }
            DeadLetter::File(file) => {
                let key = msg.key().map(|k| cut(k, DEAD_LETTER_FILE_VALUE_BYTES).0);
                let value = msg.payload().map(|p| cut(p, DEAD_LETTER_FILE_VALUE_BYTES));
                let mut line = serde_json::json!({
                    "source": source,
                    "reason": why,
                    "key": key.map(String::from_utf8_lossy),
                    "payload": value.map(|(v, _)| String::from_utf8_lossy(v)),
                });
                if value.is_some_and(|(_, truncated)| truncated) {
                    line["payload_bytes"] = payload_len.into();
                    line["payload_truncated"] = true.into();
                }
                let mut bytes = serde_json::to_vec(&line).expect("a JSON value serializes");
                bytes.push(b'\n');
                file.append(&bytes).map_err(|e| Error::DeadLetterFile {
                    path: file.path.clone(),
                    source: e,
                    at: source.to_string(),
                })?;
                Ok(true)
            }
        }
    }

    /// Writes out what a file copy buffered (before offsets are committed past it).
    pub(super) fn flush(&mut self) -> Result<(), Error> {
        match self {
            DeadLetter::File(f) => f.flush(),
            DeadLetter::Topic { .. } => Ok(()),
        }
    }
}

/// The dead-letter file, `<data_dir>/kafka/dead-letter.ndjson`.
pub(super) struct DeadFile {
    path: PathBuf,
    out: Option<std::io::BufWriter<std::fs::File>>,
    /// Bytes in the file (written or buffered).
    len: u64,
    /// The size at which the file is rotated ([`DEAD_LETTER_FILE_BYTES`]).
    limit: u64,
}

impl DeadFile {
    pub(super) fn new(path: PathBuf) -> DeadFile {
        DeadFile {
            path,
            out: None,
            len: 0,
            limit: DEAD_LETTER_FILE_BYTES,
        }
    }

    /// Appends one line, rotating the file first when it is full.
    fn append(&mut self, line: &[u8]) -> std::io::Result<()> {
        if self.out.is_some() && self.len + line.len() as u64 > self.limit {
            let mut out = self.out.take().expect("open");
            out.flush()?;
            out.get_ref().sync_all()?;
            drop(out);
            let old = self.path.with_extension("ndjson.1");
            std::fs::rename(&self.path, &old)?;
            tracing::info!(file = %self.path.display(), rotated_to = %old.display(), bytes = self.len, "kafka: dead-letter file rotated");
        }
        if self.out.is_none() {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)?;
            self.len = f.metadata()?.len();
            self.out = Some(std::io::BufWriter::new(f));
        }
        let out = self.out.as_mut().expect("opened");
        out.write_all(line)?;
        self.len += line.len() as u64;
        Ok(())
    }

    /// Writes out what is buffered.
    fn flush(&mut self) -> Result<(), Error> {
        match &mut self.out {
            Some(out) => out.flush().map_err(|source| Error::DeadLetterFlush {
                path: self.path.clone(),
                source,
            }),
            None => Ok(()),
        }
    }
}

/// At most `max` bytes of `bytes`, cut at a UTF-8 boundary when it is text, and whether it
/// was cut.
fn cut(bytes: &[u8], max: usize) -> (&[u8], bool) {
    if bytes.len() <= max {
        return (bytes, false);
    }
    let mut end = max;
    // Back to a character boundary (at most 3 bytes) so that text stays text.
    while end > max.saturating_sub(3) && (bytes[end] & 0xC0) == 0x80 {
        end -= 1;
    }
    (&bytes[..end], true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dead_letter_file_is_rotated_at_its_limit_keeping_one_previous() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dead-letter.ndjson");
        let mut f = DeadFile::new(path.clone());
        f.limit = 100;
        for i in 0..25 {
            f.append(format!("line {i:03}\n").as_bytes()).unwrap();
        }
        f.flush().unwrap();
        let now = std::fs::read_to_string(&path).unwrap();
        let old = std::fs::read_to_string(dir.path().join("dead-letter.ndjson.1")).unwrap();
        assert!(now.len() <= 100 && old.len() <= 100, "{now:?} {old:?}");
        assert!(now.ends_with("line 024\n"), "{now:?}");
        assert!(old.ends_with(&format!("line {:03}\n", 24 - now.lines().count())));
        // Reopened (a restart), it goes on counting from the file's size.
        let mut f = DeadFile::new(path.clone());
        f.limit = 100;
        f.append(b"x\n").unwrap();
        f.flush().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), now + "x\n");
    }

    #[test]
    fn a_cut_value_ends_on_a_character_boundary() {
        assert_eq!(cut(b"short", 10), (&b"short"[..], false));
        let text = "ab\u{e9}\u{e9}".as_bytes(); // a b 0xC3 0xA9 0xC3 0xA9
        assert_eq!(cut(text, 3), (&b"ab"[..], true));
        assert_eq!(cut(text, 4), (&text[..4], true));
        assert_eq!(cut(&[0xff; 10], 4), (&[0xff; 4][..], true));
    }
}
