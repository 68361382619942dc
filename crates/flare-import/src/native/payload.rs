//! The decompressed payload of a native file, read with its position for messages.

use super::NativeError;
use crate::limits::{LimitError, Limits};
use std::io::{self, BufRead, Read};

/// Reads until `buf` is full or the input ends; returns how many bytes were read.
pub(super) fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

pub(super) fn describe_bytes(b: &[u8]) -> String {
    if b.is_empty() {
        return "an empty file".into();
    }
    let hex: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("bytes {}", hex.join(" "))
}

/// Notes whether the input ran out. lz4_flex reads exactly the frame's bytes and treats an
/// input that ends where the next block header (or the end mark) should be as a clean end
/// of frame, so this is how a file cut there is told from a complete one.
pub(super) struct EofWatch<R> {
    pub inner: R,
    pub hit_eof: bool,
    /// Bytes read so far (after the 12-byte preamble).
    pub consumed: u64,
    /// The most bytes that may be read after the preamble ([`Limits::max_input_bytes`]).
    pub cap: u64,
    /// The input went on past `cap`.
    pub over: bool,
}

impl<R: Read> Read for EofWatch<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let room = self.cap.saturating_sub(self.consumed);
        if room == 0 && !buf.is_empty() {
            // At the cap: only the end of the input may follow.
            let mut one = [0u8; 1];
            if self.inner.read(&mut one)? != 0 {
                self.over = true;
                return Err(io::Error::other("the input is over the size limit"));
            }
            self.hit_eof = true;
            return Ok(0);
        }
        let want = buf.len().min(room.min(usize::MAX as u64) as usize);
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 && !buf.is_empty() {
            self.hit_eof = true;
        }
        self.consumed += n as u64;
        Ok(n)
    }
}

/// The decompressed payload, with its position for error messages.
pub(super) struct Decompressed<R: Read> {
    pub inner: lz4_flex::frame::FrameDecoder<EofWatch<R>>,
    pub offset: u64,
    pub file: String,
    pub limits: Limits,
}

impl<R: Read> Decompressed<R> {
    /// Where the reader stands, for messages: the file offset of the compressed bytes read
    /// so far and the offset in the decompressed payload.
    pub(super) fn place(&self, location: &str) -> String {
        format!(
            "at byte offset {} of the file, {location} (decompressed offset {})",
            12 + self.inner.get_ref().consumed,
            self.offset
        )
    }

    /// The limit hit by reading `more` decompressed bytes from here, if any.
    pub(super) fn over_inflated(&self, more: u64) -> Option<NativeError> {
        (self.offset.saturating_add(more) > self.limits.max_inflated_bytes).then(|| {
            NativeError::Limit(LimitError::Inflated {
                path: self.file.to_string(),
                codec: "LZ4",
                limit: self.limits.max_inflated_bytes,
            })
        })
    }

    pub(super) fn fail(&self, e: io::Error, location: &str, expected: &str) -> NativeError {
        let file = self.file.to_string();
        if self.inner.get_ref().over {
            return NativeError::Limit(LimitError::ReadPastLimit {
                path: file,
                limit: self.limits.max_input_bytes,
            });
        }
        let location = self.place(location);
        match e.kind() {
            io::ErrorKind::UnexpectedEof => NativeError::Truncated {
                file,
                location,
                expected: expected.to_string(),
            },
            io::ErrorKind::InvalidData | io::ErrorKind::Other => {
                // lz4_flex reports bad frames, blocks and checksums this way. A frame
                // header or block cut short is reported as "unexpected end" by some
                // versions: call it truncation, which is what the user needs to hear.
                let detail = format!("lz4: {e}");
                if detail.to_ascii_lowercase().contains("eof")
                    || detail.to_ascii_lowercase().contains("unexpected end")
                {
                    NativeError::Truncated {
                        file,
                        location,
                        expected: expected.to_string(),
                    }
                } else {
                    NativeError::Compression {
                        file,
                        location,
                        detail,
                    }
                }
            }
            _ => NativeError::Io { file, source: e },
        }
    }

    pub(super) fn exact(
        &mut self,
        buf: &mut [u8],
        location: &str,
        expected: &str,
    ) -> Result<(), NativeError> {
        if let Some(e) = self.over_inflated(buf.len() as u64) {
            return Err(e);
        }
        let n = read_full(&mut self.inner, buf).map_err(|e| self.fail(e, location, expected))?;
        self.offset += n as u64;
        if n < buf.len() {
            return Err(NativeError::Truncated {
                file: self.file.to_string(),
                location: self.place(location),
                expected: expected.to_string(),
            });
        }
        Ok(())
    }

    /// Reads `len` bytes without trusting `len` for the allocation: a corrupt length on a
    /// short input ends in a truncation error, not an out-of-memory abort.
    pub(super) fn chunk(
        &mut self,
        len: u64,
        location: &str,
        expected: &str,
    ) -> Result<Vec<u8>, NativeError> {
        let mut buf = Vec::new();
        self.chunk_into(&mut buf, len, location, expected)?;
        Ok(buf)
    }

    /// [`Self::chunk`], appended to `buf`; never inflates past `limits.max_inflated_bytes`.
    pub(super) fn chunk_into(
        &mut self,
        buf: &mut Vec<u8>,
        len: u64,
        location: &str,
        expected: &str,
    ) -> Result<(), NativeError> {
        let room = self
            .limits
            .max_inflated_bytes
            .saturating_sub(self.offset)
            .min(len);
        buf.reserve(room.min(1 << 24) as usize);
        // Straight from the decoder's buffer: no zeroing of `buf`, one copy.
        let mut n = 0u64;
        while n < room {
            let avail = match self.inner.fill_buf() {
                Ok(avail) => avail,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.fail(e, location, expected)),
            };
            if avail.is_empty() {
                break;
            }
            let take = avail.len().min((room - n) as usize);
            buf.extend_from_slice(&avail[..take]);
            self.inner.consume(take);
            n += take as u64;
        }
        self.offset += n;
        if n == room && room < len {
            return Err(self
                .over_inflated(len - room)
                .unwrap_or_else(|| NativeError::Truncated {
                    file: self.file.to_string(),
                    location: self.place(location),
                    expected: expected.to_string(),
                }));
        }
        if n < len {
            return Err(NativeError::Truncated {
                file: self.file.to_string(),
                location: self.place(location),
                expected: expected.to_string(),
            });
        }
        Ok(())
    }

    pub(super) fn varint(&mut self, location: &str, expected: &str) -> Result<u64, NativeError> {
        let start = self.offset;
        let mut v: u64 = 0;
        for i in 0..10u32 {
            let mut b = [0u8; 1];
            self.exact(&mut b, location, expected)?;
            let b = b[0];
            if i == 9 && b > 1 {
                break;
            }
            v |= ((b & 0x7f) as u64) << (7 * i);
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(NativeError::Corrupt {
            file: self.file.to_string(),
            offset: start,
            location: location.to_string(),
            expected: "a LEB128 varint of at most 10 bytes".into(),
        })
    }

    /// The payload must end here, with the frame's end mark and content checksum (which
    /// reading on verifies), and nothing may follow the frame.
    pub(super) fn expect_end(&mut self) -> Result<(), NativeError> {
        let expected = "the end mark of the LZ4 frame and its content checksum";
        let mut b = [0u8; 1];
        let n = read_full(&mut self.inner, &mut b)
            .map_err(|e| self.fail(e, "after the last rank block", expected))?;
        if n != 0 {
            return Err(NativeError::Corrupt {
                file: self.file.to_string(),
                offset: self.offset,
                location: "after the last rank block".into(),
                expected: "the end of the payload (found extra data)".into(),
            });
        }
        if self.inner.get_ref().hit_eof {
            return Err(NativeError::Truncated {
                file: self.file.to_string(),
                location: self.place("after the last rank block"),
                expected: expected.into(),
            });
        }
        let raw = self.inner.get_mut();
        let extra = read_full(&mut raw.inner, &mut b).map_err(|source| NativeError::Io {
            file: self.file.to_string(),
            source,
        })?;
        if extra != 0 {
            return Err(NativeError::TrailingData {
                file: self.file.to_string(),
                offset: 12 + raw.consumed,
            });
        }
        Ok(())
    }
}
