//! A command's output kept as its head and its tail ([`HeadTail`]): the first bytes pass as they
//! come, the rest waits in a tail that keeps only its last bytes, and what gives way between
//! them is counted. The agent keeps its output so before it sends it, the controller before its
//! log; each says in its own words what was cut.

use std::collections::VecDeque;

/// Where bytes may be cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cuts {
    /// Anywhere.
    Anywhere,
    /// Not inside a UTF-8 character (of text that is UTF-8 around the cut; other bytes are cut
    /// anywhere).
    Utf8,
}

impl Cuts {
    /// The cut at or below `at`.
    fn floor(self, bytes: &[u8], at: usize) -> usize {
        match self {
            Cuts::Anywhere => at.min(bytes.len()),
            Cuts::Utf8 => utf8_floor(bytes, at),
        }
    }

    /// The cut at or above `at`.
    fn ceil(self, bytes: &[u8], at: usize) -> usize {
        match self {
            Cuts::Anywhere => at.min(bytes.len()),
            Cuts::Utf8 => utf8_ceil(bytes, at),
        }
    }
}

/// One command's output against a bound: the head let through, the tail held as pieces (each
/// with its `M`: a stream, a sequence number…), the middle counted.
#[derive(Debug)]
pub struct HeadTail<M> {
    head_left: u64,
    tail_cap: u64,
    tail: VecDeque<(M, Vec<u8>)>,
    tail_bytes: u64,
    cut: u64,
    cuts: Cuts,
}

impl<M> HeadTail<M> {
    /// `head` bytes pass, the last `tail_cap` of the rest are held.
    pub fn new(head: u64, tail_cap: u64, cuts: Cuts) -> HeadTail<M> {
        HeadTail { head_left: head, tail_cap, tail: VecDeque::new(), tail_bytes: 0, cut: 0, cuts }
    }

    /// What is left of the head.
    pub fn head_left(&self) -> u64 {
        self.head_left
    }

    /// The most the tail holds.
    pub fn tail_cap(&self) -> u64 {
        self.tail_cap
    }

    /// What the tail holds.
    pub fn tail_bytes(&self) -> u64 {
        self.tail_bytes
    }

    /// Bytes that gave way between the head and the tail.
    pub fn cut(&self) -> u64 {
        self.cut
    }

    /// `n` bytes of the head passed already (before a restart).
    pub fn passed(&mut self, n: u64) {
        self.head_left = self.head_left.saturating_sub(n);
    }

    /// `n` bytes past the head that were never read (a file's middle skipped), counted as cut.
    pub fn skipped(&mut self, n: u64) {
        self.head_left = 0;
        self.cut += n;
    }

    /// How many of `bytes`' first bytes pass now (the head); the rest is held in the tail,
    /// whose oldest bytes give way. `join(held, meta)` says whether the rest joins the last
    /// piece held (whose `M` it may update) rather than being held as a piece of its own.
    pub fn admit(&mut self, meta: M, bytes: &[u8], join: impl FnOnce(&mut M, &M) -> bool) -> usize {
        if bytes.len() as u64 <= self.head_left {
            self.head_left -= bytes.len() as u64;
            return bytes.len();
        }
        let now = self.cuts.floor(bytes, self.head_left as usize);
        self.head_left = 0;
        self.hold(meta, &bytes[now..], join);
        now
    }

    /// The pieces held, oldest first; the tail is empty and nothing is counted as cut after.
    pub fn take_tail(&mut self) -> Vec<(M, Vec<u8>)> {
        self.tail_bytes = 0;
        self.cut = 0;
        self.tail.drain(..).collect()
    }

    fn hold(&mut self, meta: M, rest: &[u8], join: impl FnOnce(&mut M, &M) -> bool) {
        if rest.len() as u64 > self.tail_cap {
            // The rest alone fills the tail: all that is held gives way, and its own oldest
            // bytes, which are never copied.
            let mut meta = meta;
            if let Some((mut last, bytes)) = self.tail.pop_back() {
                self.cut += bytes.len() as u64;
                if join(&mut last, &meta) {
                    meta = last;
                }
            }
            self.cut += self.tail.drain(..).map(|(_, bytes)| bytes.len() as u64).sum::<u64>();
            let from = self.cuts.ceil(rest, rest.len() - self.tail_cap as usize);
            self.cut += from as u64;
            self.tail_bytes = (rest.len() - from) as u64;
            if from < rest.len() {
                self.tail.push_back((meta, rest[from..].to_vec()));
            }
            return;
        }
        self.tail_bytes += rest.len() as u64;
        match self.tail.back_mut() {
            Some((last, bytes)) => {
                if join(last, &meta) {
                    bytes.extend_from_slice(rest);
                } else {
                    self.tail.push_back((meta, rest.to_vec()));
                }
            }
            None => self.tail.push_back((meta, rest.to_vec())),
        }
        let cuts = self.cuts;
        while self.tail_bytes > self.tail_cap {
            let excess = self.tail_bytes - self.tail_cap;
            let Some((_, front)) = self.tail.front_mut() else { break };
            let gone = if front.len() as u64 <= excess {
                let gone = front.len();
                self.tail.pop_front();
                gone
            } else {
                let gone = cuts.ceil(front, excess as usize);
                front.drain(..gone);
                gone
            };
            self.tail_bytes -= gone as u64;
            self.cut += gone as u64;
        }
    }
}

/// The largest cut at or below `at` that does not split a UTF-8 character (of text that is
/// UTF-8 around it; other bytes are cut anywhere).
pub fn utf8_floor(bytes: &[u8], at: usize) -> usize {
    let mut cut = at.min(bytes.len());
    while cut > 0 && at - cut < 4 && bytes.get(cut).is_some_and(|b| (b & 0xc0) == 0x80) {
        cut -= 1;
    }
    if at - cut >= 4 { at.min(bytes.len()) } else { cut }
}

/// The smallest cut at or above `at` that does not split a UTF-8 character.
pub fn utf8_ceil(bytes: &[u8], at: usize) -> usize {
    let mut cut = at.min(bytes.len());
    while cut < bytes.len() && cut - at < 4 && (bytes[cut] & 0xc0) == 0x80 {
        cut += 1;
    }
    if cut - at >= 4 { at } else { cut }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn never(_: &mut u8, _: &u8) -> bool {
        false
    }

    #[test]
    fn the_head_passes_the_tail_keeps_its_last_bytes_and_the_middle_is_counted() {
        let mut kept = HeadTail::new(4, 3, Cuts::Anywhere);
        assert_eq!(kept.admit(0, b"abcdef", never), 4);
        assert_eq!(kept.admit(1, b"gh", never), 0);
        assert_eq!((kept.tail_bytes(), kept.cut()), (3, 1));
        // A piece that alone fills the tail: the rest gives way.
        assert_eq!(kept.admit(2, b"ijklm", never), 0);
        assert_eq!(kept.cut(), 1 + 3 + 2);
        assert_eq!(kept.take_tail(), [(2, b"klm".to_vec())]);
        assert_eq!((kept.tail_bytes(), kept.cut()), (0, 0));
    }

    #[test]
    fn joined_pieces_are_held_as_one_and_utf8_is_cut_between_characters() {
        let join = |held: &mut (char, u32), new: &(char, u32)| {
            let same = held.0 == new.0;
            if same {
                held.1 = new.1;
            }
            same
        };
        let mut kept = HeadTail::new(2, 4, Cuts::Utf8);
        // "é" is two bytes: the head stops before it rather than in it.
        assert_eq!(kept.admit(('o', 1), "aéb".as_bytes(), join), 1);
        assert_eq!(kept.admit(('o', 2), b"c", join), 0);
        assert_eq!(kept.admit(('e', 3), "ü".as_bytes(), join), 0);
        // 3 + 1 + 2 bytes held in a tail of 4: the oldest give way, "é" whole.
        assert_eq!(kept.take_tail(), [(('o', 2), b"bc".to_vec()), (('e', 3), "ü".as_bytes().to_vec())]);
        let mut kept = HeadTail::new(0, 3, Cuts::Utf8);
        kept.admit(('o', 1), b"x", join);
        kept.admit(('o', 2), "yzéé".as_bytes(), join);
        assert_eq!(kept.cut(), 1 + 4);
        assert_eq!(kept.take_tail(), [(('o', 2), "é".as_bytes().to_vec())]);
    }
}
