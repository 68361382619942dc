//! A content line split on whitespace and masked, token by token, into a buffer reused
//! from line to line, with a 64-bit hash per token so that the tree and the clusters
//! compare integers, not strings, and keep no per-token strings of their own.

use crate::mask::mask_token;

/// The hash of the wildcard token `<*>`, whatever its context.
pub const WILD: u64 = 0x9e37_79b9_7f4a_7c15;

/// A masked line: its tokens' text (in `text`, at `spans`) and hashes.
#[derive(Default, Debug)]
pub struct MaskedLine {
    text: String,
    spans: Vec<(u32, u32)>,
    /// Token hashes; `WILD` where the whole token is a wildcard.
    pub hashes: Vec<u64>,
    /// Whether the token holds a wildcard anywhere (`blk_<*>` as well as `<*>`).
    pub has_wild: Vec<bool>,
}

impl MaskedLine {
    /// Masks `line` into this buffer. Past `max_tokens`, the rest of the line is one last
    /// token, which bounds the work and memory a very long line can cost.
    pub fn fill(&mut self, line: &str, max_tokens: usize) {
        self.text.clear();
        self.spans.clear();
        self.hashes.clear();
        self.has_wild.clear();
        let max_tokens = max_tokens.max(1);
        let mut words = Tokens { rest: line };
        while let Some(word) = words.next() {
            if self.spans.len() + 1 == max_tokens {
                // Fold the rest: this word and all after it, masked, space-separated.
                let start = self.text.len();
                let mut wild = mask_token(word, &mut self.text);
                for w in words.by_ref() {
                    self.text.push(' ');
                    wild |= mask_token(w, &mut self.text);
                }
                self.push_span(start, wild);
                break;
            }
            let start = self.text.len();
            let wild = mask_token(word, &mut self.text);
            self.push_span(start, wild);
        }
    }

    fn push_span(&mut self, start: usize, wild: bool) {
        let end = self.text.len();
        let tok = &self.text.as_bytes()[start..end];
        let h = if tok == b"<*>" { WILD } else { hash_bytes(tok) };
        self.spans.push((start as u32, end as u32));
        self.hashes.push(h);
        self.has_wild.push(wild);
    }

    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// The masked text of token `i`.
    pub fn token(&self, i: usize) -> &str {
        let (s, e) = self.spans[i];
        &self.text[s as usize..e as usize]
    }
}

/// Words a double-quoted string may span and still be one token.
const MAX_QUOTED_WORDS: usize = 16;

/// Whitespace-separated tokens of a line, except that a quoted value with spaces
/// (`tag="View Lock"`) is one token: it is one value, and splitting it would make lines of
/// one event differ in length with the number of words quoted. Only after `=`: a quoted
/// phrase elsewhere (`"GET /v2 HTTP/1.1"`) is often part of the message.
struct Tokens<'a> {
    rest: &'a str,
}

impl<'a> Iterator for Tokens<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let b = self.rest.as_bytes();
        let start = b.iter().position(|c| !c.is_ascii_whitespace())?;
        let mut end = start;
        let mut open = false; // a `="` value's quote not closed yet
        let mut words = 0;
        loop {
            while end < b.len() && !b[end].is_ascii_whitespace() {
                if b[end] == b'"' {
                    // a quote closes an open value, or opens one right after `=`
                    open = !open && end > start && b[end - 1] == b'=';
                }
                end += 1;
            }
            words += 1;
            if !open || words == MAX_QUOTED_WORDS {
                break;
            }
            // the quote is still open: take the next word too, if there is one
            match b[end..].iter().position(|c| !c.is_ascii_whitespace()) {
                Some(skip) => end += skip,
                None => break,
            }
        }
        let tok = &self.rest[start..end];
        self.rest = &self.rest[end..];
        Some(tok)
    }
}

/// A fast 64-bit hash (FxHash-style word mixing with a final avalanche); tokens are
/// short, and a collision would at worst join two tokens in one template.
pub fn hash_bytes(b: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h: u64 = b.len() as u64;
    let mut chunks = b.chunks_exact(8);
    for c in chunks.by_ref() {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        h = (h.rotate_left(5) ^ w).wrapping_mul(K);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut buf = [0u8; 8];
        buf[..rest.len()].copy_from_slice(rest);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(buf)).wrapping_mul(K);
    }
    // avalanche (murmur3 fmix64) so the low bits used by hash maps are well spread
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    if h == WILD {
        h ^= 1;
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_masks_and_hashes() {
        let mut m = MaskedLine::default();
        m.fill("  PacketResponder 1 for block blk_-42  terminating ", 64);
        let toks: Vec<&str> = (0..m.len()).map(|i| m.token(i)).collect();
        assert_eq!(
            toks,
            [
                "PacketResponder",
                "<*>",
                "for",
                "block",
                "blk_<*>",
                "terminating"
            ]
        );
        assert_eq!(m.hashes[1], WILD);
        assert!(m.has_wild[1] && !m.has_wild[0]);
        assert_eq!(m.hashes[2], hash_bytes(b"for"));
    }

    #[test]
    fn a_quoted_string_is_one_token() {
        let mut m = MaskedLine::default();
        m.fill(
            r#"acquire tag="View Lock", uid=7 say "a b" k="unclosed x y"#,
            64,
        );
        let toks: Vec<&str> = (0..m.len()).map(|i| m.token(i)).collect();
        assert_eq!(
            toks,
            [
                "acquire",
                r#"tag=<*>","#,
                "uid=<*>",
                "say",
                r#""a"#,
                r#"b""#,
                "k=<*>"
            ]
        );
    }

    #[test]
    fn folds_the_tail_of_a_long_line() {
        let mut m = MaskedLine::default();
        m.fill("a b c d e 7", 3);
        assert_eq!(m.len(), 3);
        assert_eq!(m.token(2), "c d e <*>");
    }

    #[test]
    fn empty_and_blank_lines_have_no_tokens() {
        let mut m = MaskedLine::default();
        m.fill("", 8);
        assert!(m.is_empty());
        m.fill(" \t ", 8);
        assert!(m.is_empty());
    }
}
