//! LEB128 varints and zigzag mapping, the integer encoding of the native format.
//!
//! Unsigned LEB128: seven bits per byte, least significant group first, high bit set on
//! every byte but the last. A `u64` takes 1 to 10 bytes. Signed values are zigzag-mapped
//! first (0, -1, 1, -2, ... to 0, 1, 2, 3, ...) so that small magnitudes stay short.

/// Appends `v` as unsigned LEB128.
#[inline]
pub fn put_u64(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends `v` zigzag-mapped, then as unsigned LEB128.
#[inline]
pub fn put_i64(out: &mut Vec<u8>, v: i64) {
    put_u64(out, zigzag(v));
}

#[inline]
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[inline]
pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Why a varint could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarintError {
    /// The input ended inside the varint (or before it).
    Eof,
    /// More than ten bytes, or a tenth byte with bits beyond 64.
    Overflow,
}

/// A forward-only reader over a byte slice that knows its position.
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    #[inline(always)]
    pub fn u8(&mut self) -> Result<u8, VarintError> {
        let b = *self.buf.get(self.pos).ok_or(VarintError::Eof)?;
        self.pos += 1;
        Ok(b)
    }

    #[inline(always)]
    pub fn u64(&mut self) -> Result<u64, VarintError> {
        if let Some(&b) = self.buf.get(self.pos) {
            // One byte: the common case for kinds, names, flags and small deltas.
            if b < 0x80 {
                self.pos += 1;
                return Ok(b as u64);
            }
            // Ten bytes or more left: no bounds check per byte.
            if let Some(w) = self.buf.get(self.pos..self.pos + 10) {
                let mut v = (b & 0x7f) as u64;
                for (i, &b) in w.iter().enumerate().skip(1) {
                    if i == 9 && b > 1 {
                        self.pos += 10;
                        return Err(VarintError::Overflow);
                    }
                    v |= ((b & 0x7f) as u64) << (7 * i);
                    if b < 0x80 {
                        self.pos += i + 1;
                        return Ok(v);
                    }
                }
                unreachable!("a tenth byte below 0x80 ends the varint");
            }
        }
        self.u64_near_end()
    }

    /// [`Self::u64`] byte by byte, for the last bytes of the buffer.
    #[cold]
    #[inline(never)]
    fn u64_near_end(&mut self) -> Result<u64, VarintError> {
        let mut v: u64 = 0;
        let mut shift = 0u32;
        loop {
            let b = *self.buf.get(self.pos).ok_or(VarintError::Eof)?;
            self.pos += 1;
            if shift == 63 && b > 1 {
                return Err(VarintError::Overflow);
            }
            v |= ((b & 0x7f) as u64) << shift;
            if b < 0x80 {
                return Ok(v);
            }
            shift += 7;
            if shift > 63 {
                return Err(VarintError::Overflow);
            }
        }
    }

    #[inline(always)]
    pub fn i64(&mut self) -> Result<i64, VarintError> {
        self.u64().map(unzigzag)
    }

    /// A varint that must fit in 32 bits.
    #[inline(always)]
    pub fn u32(&mut self) -> Result<u32, VarintError> {
        let v = self.u64()?;
        u32::try_from(v).map_err(|_| VarintError::Overflow)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_edges() {
        let values = [
            0u64,
            1,
            127,
            128,
            300,
            u32::MAX as u64,
            u64::MAX - 1,
            u64::MAX,
        ];
        let mut buf = Vec::new();
        for &v in &values {
            put_u64(&mut buf, v);
        }
        for &v in &[0i64, -1, 1, i64::MIN, i64::MAX, -300] {
            put_i64(&mut buf, v);
        }
        let mut c = Cursor::new(&buf);
        for &v in &values {
            assert_eq!(c.u64(), Ok(v));
        }
        for &v in &[0i64, -1, 1, i64::MIN, i64::MAX, -300] {
            assert_eq!(c.i64(), Ok(v));
        }
        assert_eq!(c.u64(), Err(VarintError::Eof));
    }

    #[test]
    fn fast_path_and_near_end_agree() {
        // The same bytes read with ten or more bytes after them (the fast path) and at
        // the end of the buffer: same value or error, same position.
        let mut cases: Vec<Vec<u8>> = vec![vec![0x80, 0x80], vec![0xff; 11]];
        let mut over = vec![0xffu8; 9];
        over.push(0x02);
        cases.push(over);
        let mut values = vec![0u64, 127, 128, 1 << 20, u32::MAX as u64, 1 << 62, u64::MAX];
        // Every length from 1 to 10 bytes, at both ends of each length's range.
        for bits in 1..64u32 {
            values.push((1u64 << bits) - 1);
            values.push(1u64 << bits);
            values.push((1u64 << bits) | 0x55);
        }
        for v in values {
            let mut b = Vec::new();
            put_u64(&mut b, v);
            cases.push(b);
        }
        for case in cases {
            let mut padded = case.clone();
            padded.extend_from_slice(&[0u8; 12]);
            let mut near = Cursor::new(&case);
            let mut fast = Cursor::new(&padded);
            let (a, b) = (near.u64(), fast.u64());
            if a != Err(VarintError::Eof) {
                assert_eq!(a, b, "{case:02x?}");
                assert_eq!(near.pos(), fast.pos(), "{case:02x?}");
            }
        }
    }

    #[test]
    fn rejects_overlong() {
        let buf = [0xffu8; 11];
        assert_eq!(Cursor::new(&buf).u64(), Err(VarintError::Overflow));
        let mut ten = vec![0xffu8; 9];
        ten.push(0x02);
        assert_eq!(Cursor::new(&ten).u64(), Err(VarintError::Overflow));
        let truncated = [0x80u8, 0x80];
        assert_eq!(Cursor::new(&truncated).u64(), Err(VarintError::Eof));
    }
}
