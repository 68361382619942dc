//! PyTorch Flight Recorder dumps (pickle protocol 2+ or JSON, format versions 2.3 to 2.10),
//! one file per rank, read into [`flare_model::flight_recorder`] structs.
//!
//! The pickle reader is a small, bounds-checked interpreter for the opcode subset that
//! `pickle.dumps` uses for plain data (dicts, lists, tuples, sets, strings, bytes, ints,
//! floats, booleans, None). Anything else (class instances, globals) is refused with the
//! byte offset. Errors name the file, the place (byte offset, JSON line:column, entry index
//! and field) and what was expected; nothing here panics on bad input.

use crate::limits::{self, LimitError, Limits};
pub use flare_model::flight_recorder::{
    FrDump, FrEntry, FrFrame, FrJob, FrPgConfig, FrPgRef, FrPgStatus, FrState,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

/// Why a dump or a directory of dumps could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrError {
    #[error("{file}: cannot read: {source}")]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: pickle at byte {offset}: {msg}")]
    Pickle {
        file: String,
        offset: usize,
        msg: String,
    },
    #[error("{file}: JSON at line {line}, column {column}: {msg}")]
    Json {
        file: String,
        line: usize,
        column: usize,
        msg: String,
    },
    #[error("{file}: {place}: expected {expected}, found {found}")]
    Field {
        file: String,
        place: String,
        expected: String,
        found: String,
    },
    #[error("{file}: not a Flight Recorder dump: {why}")]
    NotADump { file: String, why: String },
    #[error("{file}: cannot tell which rank wrote this dump: no `rank` field, no rank number in the file name, and its process groups do not single out one rank")]
    NoRank { file: String },
    #[error("{dir}: no Flight Recorder dumps in the directory")]
    EmptyDir { dir: String },
    #[error("{dir}: mixed directory: {file} is not a Flight Recorder dump ({why}); keep one job's dumps (and text notes) per directory")]
    MixedDir {
        dir: String,
        file: String,
        why: String,
    },
    #[error("{dir}: rank {rank} has two dumps: {first} and {second}")]
    DuplicateRank {
        dir: String,
        rank: u32,
        first: String,
        second: String,
    },
    #[error("{file}: the file name says rank {named}, but the dump says {found}: a dump copied or renamed under another rank's name? expected each rank's dump under its own name")]
    RankMismatch {
        file: String,
        named: u32,
        found: String,
    },
    #[error(transparent)]
    Limit(LimitError),
}

crate::limits::limit_error_into!(FrError, file);

// ---------------------------------------------------------------------------------------
// Generic value tree shared by the pickle and JSON readers.

/// A Python/JSON value. Tuples, sets and frozensets become lists.
#[derive(Clone, Debug, PartialEq)]
enum Val {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    List(Vec<Val>),
    Dict(Vec<(Val, Val)>),
}

impl Val {
    fn type_name(&self) -> &'static str {
        match self {
            Val::None => "None",
            Val::Bool(_) => "a boolean",
            Val::Int(_) => "an integer",
            Val::Float(_) => "a float",
            Val::Str(_) => "a string",
            Val::Bytes(_) => "bytes",
            Val::List(_) => "a list",
            Val::Dict(_) => "a dict",
        }
    }
    fn get(&self, key: &str) -> Option<&Val> {
        match self {
            Val::Dict(items) => items.iter().find_map(|(k, v)| match k {
                Val::Str(s) if s == key => Some(v),
                _ => None,
            }),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Pickle.

const MAX_DEPTH: usize = 96;

enum Node {
    Leaf(Val),
    List(Vec<usize>),
    Dict(Vec<(usize, usize)>),
}

enum Slot {
    Obj(usize),
    Mark,
}

struct Unpickler<'a> {
    data: &'a [u8],
    pos: usize,
    nodes: Vec<Node>,
    /// How many times each node was placed: nodes placed once are moved out, not cloned.
    refs: Vec<u32>,
    stack: Vec<Slot>,
    memo: HashMap<u64, usize>,
}

type PResult<T> = Result<T, (usize, String)>;

impl<'a> Unpickler<'a> {
    fn take(&mut self, n: usize, what: &str) -> PResult<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        match end {
            Some(e) => {
                let s = &self.data[self.pos..e];
                self.pos = e;
                Ok(s)
            }
            None => Err((
                self.pos,
                format!(
                    "truncated: {what} needs {n} bytes, {} left",
                    self.data.len() - self.pos
                ),
            )),
        }
    }
    fn u8(&mut self, what: &str) -> PResult<u8> {
        Ok(self.take(1, what)?[0])
    }
    fn u32le(&mut self, what: &str) -> PResult<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64le(&mut self, what: &str) -> PResult<u64> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn len_checked(&self, n: u64) -> PResult<usize> {
        let left = (self.data.len() - self.pos) as u64;
        if n > left {
            Err((
                self.pos,
                format!("truncated: length {n} exceeds the {left} bytes left"),
            ))
        } else {
            Ok(n as usize)
        }
    }
    fn push_leaf(&mut self, v: Val) {
        self.push_node(Node::Leaf(v));
    }
    fn push_node(&mut self, n: Node) {
        self.nodes.push(n);
        self.refs.push(1);
        self.stack.push(Slot::Obj(self.nodes.len() - 1));
    }
    fn pop(&mut self, at: usize) -> PResult<usize> {
        match self.stack.pop() {
            Some(Slot::Obj(i)) => Ok(i),
            Some(Slot::Mark) => Err((at, "expected an object on the stack, found a mark".into())),
            None => Err((at, "stack underflow".into())),
        }
    }
    fn top(&self, at: usize) -> PResult<usize> {
        match self.stack.last() {
            Some(Slot::Obj(i)) => Ok(*i),
            _ => Err((at, "expected an object on the stack".into())),
        }
    }
    /// Objects above the topmost mark (the mark is removed).
    fn pop_mark(&mut self, at: usize) -> PResult<Vec<usize>> {
        let Some(m) = self.stack.iter().rposition(|s| matches!(s, Slot::Mark)) else {
            return Err((at, "no mark on the stack".into()));
        };
        let items = self
            .stack
            .drain(m + 1..)
            .map(|s| match s {
                Slot::Obj(i) => i,
                Slot::Mark => 0,
            })
            .collect();
        self.stack.pop();
        Ok(items)
    }
    fn str_of(&mut self, n: usize, at: usize) -> PResult<Val> {
        let b = self.take(n, "string")?;
        match std::str::from_utf8(b) {
            Ok(s) => Ok(Val::Str(s.to_string())),
            Err(_) => Err((at, "string is not valid UTF-8".into())),
        }
    }
    fn int_le(b: &[u8], at: usize) -> PResult<Val> {
        if b.is_empty() {
            return Ok(Val::Int(0));
        }
        if b.len() > 8 {
            // Allow sign-extension bytes beyond 8.
            let (lo, hi) = b.split_at(8);
            let neg = lo[7] & 0x80 != 0;
            let ext = if neg { 0xff } else { 0 };
            if hi.iter().any(|&x| x != ext) {
                return Err((
                    at,
                    format!("integer of {} bytes does not fit 64 bits", b.len()),
                ));
            }
            return Self::int_le(lo, at);
        }
        let neg = b[b.len() - 1] & 0x80 != 0;
        let mut a = if neg { [0xffu8; 8] } else { [0u8; 8] };
        a[..b.len()].copy_from_slice(b);
        Ok(Val::Int(i64::from_le_bytes(a)))
    }
    fn set_item(&mut self, dict: usize, k: usize, v: usize, at: usize) -> PResult<()> {
        match self.nodes.get_mut(dict) {
            Some(Node::Dict(items)) => {
                items.push((k, v));
                Ok(())
            }
            _ => Err((at, "SETITEM(S) target is not a dict".into())),
        }
    }
    fn append(&mut self, list: usize, items: &[usize], at: usize) -> PResult<()> {
        match self.nodes.get_mut(list) {
            Some(Node::List(l)) => {
                l.extend_from_slice(items);
                Ok(())
            }
            _ => Err((at, "APPEND(S)/ADDITEMS target is not a list or set".into())),
        }
    }

    fn run(&mut self) -> PResult<usize> {
        loop {
            let at = self.pos;
            let op = match self.u8("opcode") {
                Ok(o) => o,
                Err(_) => return Err((at, "truncated: ended before the STOP opcode".into())),
            };
            match op {
                0x80 => {
                    let v = self.u8("protocol")?;
                    if !(2..=5).contains(&v) {
                        return Err((at, format!("pickle protocol {v}, expected 2 to 5")));
                    }
                }
                0x95 => {
                    self.u64le("frame length")?;
                }
                b'.' => return self.pop(at),
                b'}' => self.push_node(Node::Dict(vec![])),
                b']' | b')' | 0x8f => self.push_node(Node::List(vec![])),
                b'(' => self.stack.push(Slot::Mark),
                b'N' => self.push_leaf(Val::None),
                0x88 => self.push_leaf(Val::Bool(true)),
                0x89 => self.push_leaf(Val::Bool(false)),
                b'J' => {
                    let b = self.take(4, "BININT")?;
                    self.push_leaf(Val::Int(i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64));
                }
                b'K' => {
                    let b = self.u8("BININT1")?;
                    self.push_leaf(Val::Int(b as i64));
                }
                b'M' => {
                    let b = self.take(2, "BININT2")?;
                    self.push_leaf(Val::Int(u16::from_le_bytes([b[0], b[1]]) as i64));
                }
                0x8a => {
                    let n = self.u8("LONG1 length")? as u64;
                    let n = self.len_checked(n)?;
                    let b = self.take(n, "LONG1")?;
                    let v = Self::int_le(b, at)?;
                    self.push_leaf(v);
                }
                0x8b => {
                    let n = self.u32le("LONG4 length")? as u64;
                    let n = self.len_checked(n)?;
                    let b = self.take(n, "LONG4")?;
                    let v = Self::int_le(b, at)?;
                    self.push_leaf(v);
                }
                b'G' => {
                    let b = self.take(8, "BINFLOAT")?;
                    let mut a = [0u8; 8];
                    a.copy_from_slice(b);
                    self.push_leaf(Val::Float(f64::from_be_bytes(a)));
                }
                b'X' => {
                    let n = self.u32le("BINUNICODE length")? as u64;
                    let n = self.len_checked(n)?;
                    let v = self.str_of(n, at)?;
                    self.push_leaf(v);
                }
                0x8c => {
                    let n = self.u8("SHORT_BINUNICODE length")? as u64;
                    let n = self.len_checked(n)?;
                    let v = self.str_of(n, at)?;
                    self.push_leaf(v);
                }
                0x8d => {
                    let n = self.u64le("BINUNICODE8 length")?;
                    let n = self.len_checked(n)?;
                    let v = self.str_of(n, at)?;
                    self.push_leaf(v);
                }
                b'U' | b'C' => {
                    let n = self.u8("short bytes length")? as u64;
                    let n = self.len_checked(n)?;
                    let b = self.take(n, "bytes")?.to_vec();
                    self.push_leaf(if op == b'U' {
                        Val::Str(String::from_utf8_lossy(&b).into_owned())
                    } else {
                        Val::Bytes(b)
                    });
                }
                b'T' | b'B' => {
                    let n = self.u32le("bytes length")? as u64;
                    let n = self.len_checked(n)?;
                    let b = self.take(n, "bytes")?.to_vec();
                    self.push_leaf(if op == b'T' {
                        Val::Str(String::from_utf8_lossy(&b).into_owned())
                    } else {
                        Val::Bytes(b)
                    });
                }
                0x8e => {
                    let n = self.u64le("BINBYTES8 length")?;
                    let n = self.len_checked(n)?;
                    let b = self.take(n, "bytes")?.to_vec();
                    self.push_leaf(Val::Bytes(b));
                }
                b'q' => {
                    let i = self.u8("BINPUT index")? as u64;
                    let t = self.top(at)?;
                    self.memo.insert(i, t);
                }
                b'r' => {
                    let i = self.u32le("LONG_BINPUT index")? as u64;
                    let t = self.top(at)?;
                    self.memo.insert(i, t);
                }
                0x94 => {
                    let i = self.memo.len() as u64;
                    let t = self.top(at)?;
                    self.memo.insert(i, t);
                }
                b'h' | b'j' => {
                    let i = if op == b'h' {
                        self.u8("BINGET index")? as u64
                    } else {
                        self.u32le("LONG_BINGET index")? as u64
                    };
                    match self.memo.get(&i) {
                        Some(&n) => {
                            self.refs[n] = self.refs[n].saturating_add(1);
                            self.stack.push(Slot::Obj(n))
                        }
                        None => return Err((at, format!("memo entry {i} was never stored"))),
                    }
                }
                b's' => {
                    let v = self.pop(at)?;
                    let k = self.pop(at)?;
                    let d = self.top(at)?;
                    self.set_item(d, k, v, at)?;
                }
                b'u' => {
                    let items = self.pop_mark(at)?;
                    if items.len() % 2 != 0 {
                        return Err((at, "SETITEMS with an odd number of items".into()));
                    }
                    let d = self.top(at)?;
                    for kv in items.chunks(2) {
                        self.set_item(d, kv[0], kv[1], at)?;
                    }
                }
                b'a' => {
                    let v = self.pop(at)?;
                    let l = self.top(at)?;
                    self.append(l, &[v], at)?;
                }
                b'e' | 0x90 => {
                    let items = self.pop_mark(at)?;
                    let l = self.top(at)?;
                    self.append(l, &items, at)?;
                }
                b't' | 0x91 => {
                    let items = self.pop_mark(at)?;
                    self.push_node(Node::List(items));
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop(at)?);
                    }
                    items.reverse();
                    self.push_node(Node::List(items));
                }
                b'c' | 0x93 | b'R' | 0x81 | 0x92 | b'b' | b'o' | b'i' => {
                    return Err((
                        at,
                        format!(
                        "opcode 0x{op:02x} builds a Python object; a dump holds only plain data"
                    ),
                    ))
                }
                _ => return Err((at, format!("unknown or unsupported opcode 0x{op:02x}"))),
            }
        }
    }

    fn build_val(&mut self, i: usize, depth: usize) -> PResult<Val> {
        if depth > MAX_DEPTH {
            return Err((
                self.pos,
                "nesting too deep (or a self-referencing container)".into(),
            ));
        }
        if self.refs[i] > 1 {
            // Shared: clone (children are converted without being consumed).
            return match &self.nodes[i] {
                Node::Leaf(v) => Ok(v.clone()),
                Node::List(items) => {
                    let items = items.clone();
                    let mut out = Vec::with_capacity(items.len());
                    for c in items {
                        self.refs[c] = self.refs[c].saturating_add(1);
                        out.push(self.build_val(c, depth + 1)?);
                    }
                    Ok(Val::List(out))
                }
                Node::Dict(items) => {
                    let items = items.clone();
                    let mut out = Vec::with_capacity(items.len());
                    for (k, v) in items {
                        self.refs[k] = self.refs[k].saturating_add(1);
                        self.refs[v] = self.refs[v].saturating_add(1);
                        out.push((self.build_val(k, depth + 1)?, self.build_val(v, depth + 1)?));
                    }
                    Ok(Val::Dict(out))
                }
            };
        }
        match std::mem::replace(&mut self.nodes[i], Node::Leaf(Val::None)) {
            Node::Leaf(v) => Ok(v),
            Node::List(items) => {
                let mut out = Vec::with_capacity(items.len());
                for c in items {
                    out.push(self.build_val(c, depth + 1)?);
                }
                Ok(Val::List(out))
            }
            Node::Dict(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (k, v) in items {
                    out.push((self.build_val(k, depth + 1)?, self.build_val(v, depth + 1)?));
                }
                Ok(Val::Dict(out))
            }
        }
    }
}

fn unpickle(data: &[u8]) -> PResult<Val> {
    let mut u = Unpickler {
        data,
        pos: 0,
        nodes: Vec::new(),
        refs: Vec::new(),
        stack: Vec::new(),
        memo: HashMap::new(),
    };
    let root = u.run()?;
    u.build_val(root, 0)
}

fn json_to_val(v: serde_json::Value, depth: usize) -> Val {
    use serde_json::Value as J;
    if depth > MAX_DEPTH {
        return Val::None;
    }
    match v {
        J::Null => Val::None,
        J::Bool(b) => Val::Bool(b),
        J::Number(n) => {
            if let Some(i) = n.as_i64() {
                Val::Int(i)
            } else {
                Val::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        J::String(s) => Val::Str(s),
        J::Array(a) => Val::List(a.into_iter().map(|x| json_to_val(x, depth + 1)).collect()),
        J::Object(o) => Val::Dict(
            o.into_iter()
                .map(|(k, x)| (Val::Str(k), json_to_val(x, depth + 1)))
                .collect(),
        ),
    }
}

// ---------------------------------------------------------------------------------------
// Typed extraction.

/// Rank-list strings at least this long are memoized (short ones parse faster than a lookup).
const RANK_LIST_MEMO_MIN: usize = 256;
/// Distinct long rank lists kept per thread; the memo is cleared when it fills.
const RANK_LIST_MEMO_ENTRIES: usize = 256;

thread_local! {
    static RANK_LISTS: std::cell::RefCell<HashMap<String, Vec<u32>>> =
        std::cell::RefCell::new(HashMap::new());
}

struct Ctx<'a> {
    file: &'a str,
}

impl Ctx<'_> {
    fn err(&self, place: &str, expected: &str, found: &Val) -> FrError {
        let found = match found {
            Val::Str(s) if s.len() <= 40 => format!("the string {s:?}"),
            Val::Int(i) => format!("the integer {i}"),
            other => other.type_name().to_string(),
        };
        FrError::Field {
            file: self.file.to_string(),
            place: place.to_string(),
            expected: expected.to_string(),
            found,
        }
    }
    fn string(&self, v: &Val, place: &str) -> Result<String, FrError> {
        match v {
            Val::Str(s) => Ok(s.clone()),
            Val::Int(i) => Ok(i.to_string()),
            Val::Bytes(b) => Ok(String::from_utf8_lossy(b).into_owned()),
            other => Err(self.err(place, "a string", other)),
        }
    }
    fn int(&self, v: &Val, place: &str) -> Result<i64, FrError> {
        match v {
            Val::Int(i) => Ok(*i),
            Val::Bool(b) => Ok(*b as i64),
            Val::Str(s) => s
                .trim()
                .parse()
                .map_err(|_| self.err(place, "an integer", v)),
            Val::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e18 => Ok(*f as i64),
            other => Err(self.err(place, "an integer", other)),
        }
    }
    fn uint(&self, v: &Val, place: &str) -> Result<u64, FrError> {
        let i = self.int(v, place)?;
        u64::try_from(i).map_err(|_| self.err(place, "a non-negative integer", v))
    }
    fn opt_uint(&self, v: Option<&Val>, place: &str) -> Result<Option<u64>, FrError> {
        match v {
            None | Some(Val::None) => Ok(None),
            Some(Val::Int(i)) if *i < 0 => Ok(None),
            Some(v) => self.uint(v, place).map(Some),
        }
    }
    fn boolean(&self, v: &Val, place: &str) -> Result<bool, FrError> {
        match v {
            Val::Bool(b) => Ok(*b),
            Val::Int(i) => Ok(*i != 0),
            Val::Str(s) if s == "true" || s == "True" => Ok(true),
            Val::Str(s) if s == "false" || s == "False" => Ok(false),
            other => Err(self.err(place, "a boolean", other)),
        }
    }
    fn list<'v>(&self, v: &'v Val, place: &str) -> Result<&'v [Val], FrError> {
        match v {
            Val::List(l) => Ok(l),
            other => Err(self.err(place, "a list", other)),
        }
    }
    fn sizes(&self, v: Option<&Val>, place: &str) -> Result<Vec<Vec<i64>>, FrError> {
        let Some(v) = v else { return Ok(vec![]) };
        if matches!(v, Val::None) {
            return Ok(vec![]);
        }
        let mut out = Vec::new();
        for (i, t) in self.list(v, place)?.iter().enumerate() {
            let p = format!("{place}[{i}]");
            let dims = match t {
                Val::Int(d) => vec![*d],
                _ => self
                    .list(t, &p)?
                    .iter()
                    .enumerate()
                    .map(|(j, d)| self.int(d, &format!("{p}[{j}]")))
                    .collect::<Result<_, _>>()?,
            };
            out.push(dims);
        }
        Ok(out)
    }
    fn strings(&self, v: Option<&Val>, place: &str) -> Result<Vec<String>, FrError> {
        let Some(v) = v else { return Ok(vec![]) };
        if matches!(v, Val::None) {
            return Ok(vec![]);
        }
        self.list(v, place)?
            .iter()
            .enumerate()
            .map(|(i, s)| self.string(s, &format!("{place}[{i}]")))
            .collect()
    }
    /// `"[0, 1, 2]"` (as PyTorch writes it) or a list of integers.
    fn ranks(&self, v: &Val, place: &str) -> Result<Vec<u32>, FrError> {
        let to_u32 = |i: i64| u32::try_from(i).map_err(|_| self.err(place, "a rank", &Val::Int(i)));
        match v {
            Val::Str(s) => {
                // Every dump of a job repeats the same long lists (the default group's is
                // the whole world): parse each distinct one once per thread.
                if s.len() >= RANK_LIST_MEMO_MIN {
                    if let Some(r) = RANK_LISTS.with(|m| m.borrow().get(s.as_str()).cloned()) {
                        return Ok(r);
                    }
                }
                let inner = s.trim().trim_start_matches('[').trim_end_matches(']');
                let ranks: Vec<u32> = inner
                    .split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(|t| {
                        t.parse::<i64>()
                            .map_err(|_| self.err(place, "a list of ranks like \"[0, 1]\"", v))
                            .and_then(to_u32)
                    })
                    .collect::<Result<_, _>>()?;
                if s.len() >= RANK_LIST_MEMO_MIN {
                    RANK_LISTS.with(|m| {
                        let mut m = m.borrow_mut();
                        if m.len() >= RANK_LIST_MEMO_ENTRIES {
                            m.clear();
                        }
                        m.insert(s.clone(), ranks.clone());
                    });
                }
                Ok(ranks)
            }
            Val::List(l) => l
                .iter()
                .enumerate()
                .map(|(i, r)| self.int(r, &format!("{place}[{i}]")).and_then(to_u32))
                .collect(),
            other => Err(self.err(place, "a list of ranks", other)),
        }
    }
}

fn key_string(k: &Val) -> Option<String> {
    match k {
        Val::Str(s) => Some(s.clone()),
        Val::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

fn extract_entry(c: &Ctx, e: &Val, idx: usize) -> Result<FrEntry, FrError> {
    let place = |f: &str| format!("entries[{idx}].{f}");
    if !matches!(e, Val::Dict(_)) {
        return Err(c.err(&format!("entries[{idx}]"), "a dict", e));
    }
    let get = |k: &str| e.get(k).filter(|v| !matches!(v, Val::None));
    let req_u = |k: &str| -> Result<u64, FrError> {
        match get(k) {
            Some(v) => c.uint(v, &place(k)),
            None => Ok(0),
        }
    };
    let pg_id = req_u("pg_id")?;
    let process_group = match get("process_group") {
        Some(Val::List(l)) if !l.is_empty() => FrPgRef {
            name: c.string(&l[0], &place("process_group[0]"))?,
            desc: match l.get(1) {
                Some(v) => c.string(v, &place("process_group[1]"))?,
                None => String::new(),
            },
        },
        Some(Val::Str(s)) => FrPgRef {
            name: s.clone(),
            desc: String::new(),
        },
        Some(other) => return Err(c.err(&place("process_group"), "a (name, desc) pair", other)),
        None => FrPgRef {
            name: pg_id.to_string(),
            desc: String::new(),
        },
    };
    let collective_seq_id = match get("collective_seq_id").or_else(|| get("seq_id")) {
        Some(v) => c.uint(v, &place("collective_seq_id"))?,
        None => 0,
    };
    let state = match get("state") {
        None => FrState::Scheduled,
        Some(v) => match c.string(v, &place("state"))?.as_str() {
            "scheduled" => FrState::Scheduled,
            "started" => FrState::Started,
            "completed" => FrState::Completed,
            _ => {
                return Err(c.err(
                    &place("state"),
                    "one of \"scheduled\", \"started\", \"completed\"",
                    v,
                ))
            }
        },
    };
    let mut frames = Vec::new();
    if let Some(fv) = get("frames") {
        for (i, f) in c.list(fv, &place("frames"))?.iter().enumerate() {
            let fp = format!("entries[{idx}].frames[{i}]");
            if !matches!(f, Val::Dict(_)) {
                return Err(c.err(&fp, "a dict with name, filename, line", f));
            }
            frames.push(FrFrame {
                name: match f.get("name") {
                    Some(v) => c.string(v, &format!("{fp}.name"))?,
                    None => String::new(),
                },
                filename: match f.get("filename") {
                    Some(v) => c.string(v, &format!("{fp}.filename"))?,
                    None => String::new(),
                },
                line: match f.get("line") {
                    Some(v) => c.int(v, &format!("{fp}.line"))?,
                    None => 0,
                },
            });
        }
    }
    let profiling_name = match get("profiling_name") {
        Some(v) => c.string(v, &place("profiling_name"))?,
        None => String::new(),
    };
    Ok(FrEntry {
        record_id: req_u("record_id")?,
        pg_id,
        process_group,
        collective_seq_id,
        p2p_seq_id: req_u("p2p_seq_id")?,
        op_id: req_u("op_id")?,
        time_created_ns: req_u("time_created_ns")?,
        input_sizes: c.sizes(get("input_sizes"), &place("input_sizes"))?,
        input_dtypes: c.strings(get("input_dtypes"), &place("input_dtypes"))?,
        output_sizes: c.sizes(get("output_sizes"), &place("output_sizes"))?,
        output_dtypes: c.strings(get("output_dtypes"), &place("output_dtypes"))?,
        state,
        time_discovered_started_ns: c.opt_uint(
            get("time_discovered_started_ns"),
            &place("time_discovered_started_ns"),
        )?,
        time_discovered_completed_ns: c.opt_uint(
            get("time_discovered_completed_ns"),
            &place("time_discovered_completed_ns"),
        )?,
        retired: match get("retired") {
            Some(v) => c.boolean(v, &place("retired"))?,
            None => false,
        },
        timeout_ms: c.opt_uint(get("timeout_ms"), &place("timeout_ms"))?,
        is_p2p: match get("is_p2p") {
            Some(v) => c.boolean(v, &place("is_p2p"))?,
            None => false,
        },
        frames,
        profiling_name,
    })
}

/// The rank a dump's `rank` field names, if it has one.
fn rank_field(c: &Ctx, root: &Val) -> Result<Option<u32>, FrError> {
    match root.get("rank").filter(|v| !matches!(v, Val::None)) {
        Some(v) => {
            let r = c.int(v, "rank")?;
            u32::try_from(r)
                .map(Some)
                .map_err(|_| c.err("rank", "a non-negative rank", v))
        }
        None => Ok(None),
    }
}

/// The ranks common to all of a dump's process groups (a rank records only the groups it
/// is a member of), when it lists any group's ranks.
fn common_ranks(pg_config: &BTreeMap<String, FrPgConfig>) -> Option<BTreeSet<u32>> {
    let mut common: Option<BTreeSet<u32>> = None;
    for pg in pg_config.values().filter(|pg| !pg.ranks.is_empty()) {
        let s: BTreeSet<u32> = pg.ranks.iter().copied().collect();
        common = Some(match common {
            None => s,
            Some(c) => c.intersection(&s).copied().collect(),
        });
    }
    common
}

fn rank_from_name(name: &str) -> Option<u32> {
    let stem = name
        .strip_suffix(".json")
        .or_else(|| name.strip_suffix(".pkl"))
        .or_else(|| name.strip_suffix(".pickle"))
        .unwrap_or(name);
    let bytes = stem.as_bytes();
    let end = bytes.iter().rposition(|b| b.is_ascii_digit())? + 1;
    let start = bytes[..end]
        .iter()
        .rposition(|b| !b.is_ascii_digit())
        .map_or(0, |p| p + 1);
    stem[start..end].parse().ok()
}

fn extract_dump(c: &Ctx, root: &Val) -> Result<FrDump, FrError> {
    if !matches!(root, Val::Dict(_)) {
        return Err(FrError::NotADump {
            file: c.file.to_string(),
            why: format!("the top level is {}, expected a dict", root.type_name()),
        });
    }
    if root.get("entries").is_none()
        && (root.get("version").is_none() || root.get("pg_config").is_none())
    {
        return Err(FrError::NotADump {
            file: c.file.to_string(),
            why: "no `entries`, `version` or `pg_config` key".into(),
        });
    }
    let version = match root.get("version") {
        Some(Val::Float(f)) => format!("{f}"),
        Some(v) => c.string(v, "version")?,
        None => String::new(),
    };
    let mut pg_config = BTreeMap::new();
    if let Some(pc) = root.get("pg_config").filter(|v| !matches!(v, Val::None)) {
        let Val::Dict(items) = pc else {
            return Err(c.err("pg_config", "a dict of process groups", pc));
        };
        for (k, v) in items {
            let Some(key) = key_string(k) else {
                return Err(c.err("pg_config key", "a group name", k));
            };
            let place = format!("pg_config[{key:?}]");
            let cfg = match v {
                Val::Dict(_) => FrPgConfig {
                    name: match v.get("name") {
                        Some(n) => c.string(n, &format!("{place}.name"))?,
                        None => key.clone(),
                    },
                    desc: match v.get("desc") {
                        Some(n) => c.string(n, &format!("{place}.desc"))?,
                        None => String::new(),
                    },
                    ranks: match v.get("ranks") {
                        Some(r) => c.ranks(r, &format!("{place}.ranks"))?,
                        None => vec![],
                    },
                },
                Val::Str(_) | Val::List(_) => FrPgConfig {
                    name: key.clone(),
                    desc: String::new(),
                    ranks: c.ranks(v, &place)?,
                },
                other => return Err(c.err(&place, "a dict with name, desc, ranks", other)),
            };
            pg_config.insert(key, cfg);
        }
    }
    let mut pg_status = BTreeMap::new();
    if let Some(ps) = root.get("pg_status").filter(|v| !matches!(v, Val::None)) {
        let Val::Dict(items) = ps else {
            return Err(c.err("pg_status", "a dict of group counters", ps));
        };
        for (k, v) in items {
            let Some(key) = key_string(k) else {
                return Err(c.err("pg_status key", "a process-group id", k));
            };
            let place = format!("pg_status[{key:?}]");
            if !matches!(v, Val::Dict(_)) {
                return Err(c.err(&place, "a dict of counters", v));
            }
            let counter = |f: &str| -> Result<i64, FrError> {
                match v.get(f) {
                    Some(Val::None) | None => Ok(-1),
                    Some(x) => c.int(x, &format!("{place}.{f}")),
                }
            };
            pg_status.insert(
                key,
                FrPgStatus {
                    last_enqueued_collective: counter("last_enqueued_collective")?,
                    last_started_collective: counter("last_started_collective")?,
                    last_completed_collective: counter("last_completed_collective")?,
                },
            );
        }
    }
    let nccl_version = match root.get("nccl_version") {
        None | Some(Val::None) => None,
        Some(v) => Some(c.string(v, "nccl_version")?),
    };
    let mut entries = Vec::new();
    if let Some(ev) = root.get("entries").filter(|v| !matches!(v, Val::None)) {
        let list = c.list(ev, "entries")?;
        entries.reserve(list.len());
        for (i, e) in list.iter().enumerate() {
            entries.push(extract_entry(c, e, i)?);
        }
    }
    // Which rank wrote the dump: its `rank` field, else the number in its file name, else
    // the one rank all its process groups share. The name and the content must agree, so
    // that a dump copied under another rank's name is refused rather than analysed as
    // that rank's.
    let base = Path::new(c.file)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let named = rank_from_name(&base);
    let common = common_ranks(&pg_config);
    let mismatch = |named: u32, found: String| FrError::RankMismatch {
        file: c.file.to_string(),
        named,
        found,
    };
    let rank = match (rank_field(c, root)?, named) {
        (Some(r), Some(n)) if r != n => {
            return Err(mismatch(n, format!("rank {r} (its `rank` field)")));
        }
        (Some(r), _) => r,
        (None, Some(n)) => match &common {
            Some(s) if !s.is_empty() && !s.contains(&n) => {
                let found = if s.len() == 1 {
                    format!(
                        "rank {} (the one rank all its process groups share)",
                        s.iter().next().copied().unwrap_or_default()
                    )
                } else {
                    format!(
                        "one of ranks {:?} (the ranks all its process groups share)",
                        s.iter().take(8).collect::<Vec<_>>()
                    )
                };
                return Err(mismatch(n, found));
            }
            _ => n,
        },
        (None, None) => match common {
            Some(s) if s.len() == 1 => s.into_iter().next().unwrap_or_default(),
            _ => {
                return Err(FrError::NoRank {
                    file: c.file.to_string(),
                })
            }
        },
    };
    Ok(FrDump {
        rank,
        version,
        pg_config,
        pg_status,
        nccl_version,
        entries,
    })
}

// ---------------------------------------------------------------------------------------
// Public API.

/// Which encoding a file's first bytes suggest.
fn encoding(bytes: &[u8]) -> Option<bool> {
    // Some(true): pickle, Some(false): JSON.
    let first = bytes.iter().copied().find(|b| !b.is_ascii_whitespace())?;
    if bytes.first() == Some(&0x80) {
        Some(true)
    } else if first == b'{' {
        Some(false)
    } else {
        None
    }
}

/// Parses one dump from memory. `file` names it in errors and gives the rank when the
/// content does not (the last number in the file name, e.g. `_dump_9`).
pub fn parse_fr_bytes(file: &str, bytes: &[u8]) -> Result<FrDump, FrError> {
    let c = Ctx { file };
    let root = match encoding(bytes) {
        Some(true) => unpickle(bytes).map_err(|(offset, msg)| FrError::Pickle {
            file: file.to_string(),
            offset,
            msg,
        })?,
        Some(false) => {
            let v: serde_json::Value =
                serde_json::from_slice(bytes).map_err(|e| FrError::Json {
                    file: file.to_string(),
                    line: e.line(),
                    column: e.column(),
                    msg: e.to_string(),
                })?;
            json_to_val(v, 0)
        }
        None => {
            return Err(FrError::NotADump {
                file: file.to_string(),
                why: "neither a pickle (starts with 0x80) nor a JSON object".into(),
            })
        }
    };
    extract_dump(&c, &root)
}

/// Reads one dump file. The default [`Limits`] apply.
pub fn read_fr_file(path: &Path) -> Result<FrDump, FrError> {
    read_fr_file_with_limits(path, &Limits::default())
}

/// [`read_fr_file`] with the given limits; special files are refused unopened.
pub fn read_fr_file_with_limits(path: &Path, limits: &Limits) -> Result<FrDump, FrError> {
    let file = path.display().to_string();
    let bytes = limits::read_file(path, limits)?;
    parse_fr_bytes(&file, &bytes)
}

/// Puts parsed dumps together: by rank, with the ranks their groups name but no dump covers.
pub fn assemble_job(dir: &str, dumps: Vec<(String, FrDump)>) -> Result<FrJob, FrError> {
    let mut job = FrJob::default();
    for (file, d) in dumps {
        if let Some(first) = job.sources.get(&d.rank) {
            return Err(FrError::DuplicateRank {
                dir: dir.to_string(),
                rank: d.rank,
                first: first.clone(),
                second: file,
            });
        }
        job.sources.insert(d.rank, file);
        job.dumps.insert(d.rank, d);
    }
    if job.dumps.is_empty() {
        return Err(FrError::EmptyDir {
            dir: dir.to_string(),
        });
    }
    job.missing_ranks = job
        .world()
        .into_iter()
        .filter(|r| !job.dumps.contains_key(r))
        .collect();
    Ok(job)
}

/// Files that may sit next to dumps without being dumps: notes and logs (with an
/// extension: a dump has none).
fn is_text_note(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    let ext = lower.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    (!ext.is_empty() && crate::text_logs::is_log_file_name(name))
        || matches!(
            ext,
            "txt"
                | "log"
                | "md"
                | "rst"
                | "yaml"
                | "yml"
                | "csv"
                | "sh"
                | "py"
                | "cfg"
                | "ini"
                | "toml"
                | "out"
                | "err"
        )
        || lower.starts_with("readme")
        || lower.starts_with("license")
}

/// Reads a directory with one dump per rank. Text notes and logs (`.txt`, `.log`, `.md`,
/// ...) and hidden files are skipped; any other file that is not a dump is an error. The
/// default [`Limits`] apply.
pub fn read_fr_dir(dir: &Path) -> Result<FrJob, FrError> {
    read_fr_dir_with_limits(dir, &Limits::default())
}

/// [`read_fr_dir`] with the given limits.
pub fn read_fr_dir_with_limits(dir: &Path, limits: &Limits) -> Result<FrJob, FrError> {
    let dname = dir.display().to_string();
    let rd = std::fs::read_dir(dir).map_err(|source| FrError::Io {
        file: dname.clone(),
        source,
    })?;
    let mut paths = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|source| FrError::Io {
            file: dname.clone(),
            source,
        })?;
        let p = ent.path();
        let name = ent.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !p.is_file() {
            continue;
        }
        paths.push((name, p));
        limits::check_file_count(dir, paths.len(), limits)?;
    }
    paths.sort();
    let mut dumps = Vec::new();
    for (name, p) in paths {
        let file = p.display().to_string();
        let bytes = limits::read_file(&p, limits)?;
        if encoding(&bytes).is_none() {
            // a log beside the dumps, by name, or without an extension by its text (`dmesg`)
            let head = &bytes[..bytes.len().min(4096)];
            if is_text_note(&name)
                || (crate::text_logs::is_log_file_name(&name)
                    && crate::text_logs::looks_like_text(head))
            {
                continue;
            }
            return Err(FrError::MixedDir {
                dir: dname,
                file,
                why: "neither a pickle nor a JSON object".into(),
            });
        }
        match parse_fr_bytes(&file, &bytes) {
            Ok(d) => dumps.push((file, d)),
            Err(FrError::NotADump { why, .. }) => {
                return Err(FrError::MixedDir {
                    dir: dname,
                    file,
                    why,
                })
            }
            Err(e) => return Err(e),
        }
    }
    assemble_job(&dname, dumps)
}

/// True when `path` is a Flight Recorder dump, or a directory holding at least one
/// (checks the first bytes of each file; cheap enough for auto-detection).
pub fn looks_like_fr_dump(path: &Path) -> bool {
    if path.is_dir() {
        let Ok(rd) = std::fs::read_dir(path) else {
            return false;
        };
        return rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .take(64)
            .any(|p| file_looks_like_dump(&p));
    }
    file_looks_like_dump(path)
}

fn file_looks_like_dump(path: &Path) -> bool {
    // Special files (FIFOs, devices) are not opened.
    let Some(head) = limits::read_head(path, 8192) else {
        return false;
    };
    let has = |needle: &[u8]| head.windows(needle.len()).any(|w| w == needle);
    match encoding(&head) {
        Some(true) => {
            head.get(1).is_some_and(|v| (2..=5).contains(v))
                && (has(b"pg_config") || has(b"entries"))
                && has(b"version")
        }
        Some(false) => {
            has(b"\"version\"")
                && (has(b"\"pg_config\"") || has(b"\"entries\""))
                && !has(b"\"traceEvents\"")
        }
        None => false,
    }
}

// ---------------------------------------------------------------------------------------
// Writer (pickle protocol 2), for tests, benchmarks and fixtures.

struct PickleWriter {
    out: Vec<u8>,
}

impl PickleWriter {
    fn str(&mut self, s: &str) {
        self.out.push(b'X');
        self.out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.out.extend_from_slice(s.as_bytes());
    }
    fn int(&mut self, v: i64) {
        if (0..256).contains(&v) {
            self.out.push(b'K');
            self.out.push(v as u8);
        } else if (0..65536).contains(&v) {
            self.out.push(b'M');
            self.out.extend_from_slice(&(v as u16).to_le_bytes());
        } else if i32::try_from(v).is_ok() {
            self.out.push(b'J');
            self.out.extend_from_slice(&(v as i32).to_le_bytes());
        } else {
            self.out.push(0x8a);
            self.out.push(8);
            self.out.extend_from_slice(&v.to_le_bytes());
        }
    }
    fn opt(&mut self, v: Option<u64>) {
        match v {
            Some(x) => self.int(x as i64),
            None => self.out.push(b'N'),
        }
    }
    fn boolean(&mut self, b: bool) {
        self.out.push(if b { 0x88 } else { 0x89 });
    }
    fn dict<F: FnOnce(&mut Self)>(&mut self, f: F) {
        self.out.extend_from_slice(b"}(");
        f(self);
        self.out.push(b'u');
    }
    fn list<F: FnOnce(&mut Self)>(&mut self, f: F) {
        self.out.extend_from_slice(b"](");
        f(self);
        self.out.push(b'e');
    }
    fn key(&mut self, k: &str) {
        self.str(k);
    }
    fn strs(&mut self, v: &[String]) {
        self.list(|w| v.iter().for_each(|s| w.str(s)));
    }
    fn sizes(&mut self, v: &[Vec<i64>]) {
        self.list(|w| {
            for t in v {
                w.list(|w| t.iter().for_each(|d| w.int(*d)));
            }
        });
    }
}

/// Writes a dump as PyTorch does (a pickled dict, protocol 2; `pg_config` ranks as the
/// string `"[0, 1]"`, `process_group` as a tuple).
pub fn write_fr_pickle(d: &FrDump) -> Vec<u8> {
    let mut w = PickleWriter {
        out: Vec::with_capacity(512 + 700 * d.entries.len()),
    };
    w.out.extend_from_slice(&[0x80, 2]);
    w.dict(|w| {
        w.key("version");
        w.str(&d.version);
        w.key("pg_config");
        w.dict(|w| {
            for (k, pg) in &d.pg_config {
                w.key(k);
                w.dict(|w| {
                    w.key("name");
                    w.str(&pg.name);
                    w.key("desc");
                    w.str(&pg.desc);
                    w.key("ranks");
                    let r: Vec<String> = pg.ranks.iter().map(|r| r.to_string()).collect();
                    w.str(&format!("[{}]", r.join(", ")));
                });
            }
        });
        if let Some(v) = &d.nccl_version {
            w.key("nccl_version");
            w.str(v);
        }
        w.key("pg_status");
        w.dict(|w| {
            for (k, s) in &d.pg_status {
                w.key(k);
                w.dict(|w| {
                    w.key("last_enqueued_collective");
                    w.int(s.last_enqueued_collective);
                    w.key("last_started_collective");
                    w.int(s.last_started_collective);
                    w.key("last_completed_collective");
                    w.int(s.last_completed_collective);
                });
            }
        });
        w.key("entries");
        w.list(|w| {
            for e in &d.entries {
                w.dict(|w| {
                    w.key("record_id");
                    w.int(e.record_id as i64);
                    w.key("pg_id");
                    w.int(e.pg_id as i64);
                    w.key("process_group");
                    w.out.push(b'(');
                    w.str(&e.process_group.name);
                    w.str(&e.process_group.desc);
                    w.out.push(b't');
                    w.key("collective_seq_id");
                    w.int(e.collective_seq_id as i64);
                    w.key("p2p_seq_id");
                    w.int(e.p2p_seq_id as i64);
                    w.key("op_id");
                    w.int(e.op_id as i64);
                    w.key("profiling_name");
                    w.str(&e.profiling_name);
                    w.key("time_created_ns");
                    w.int(e.time_created_ns as i64);
                    w.key("input_sizes");
                    w.sizes(&e.input_sizes);
                    w.key("input_dtypes");
                    w.strs(&e.input_dtypes);
                    w.key("output_sizes");
                    w.sizes(&e.output_sizes);
                    w.key("output_dtypes");
                    w.strs(&e.output_dtypes);
                    w.key("state");
                    w.str(e.state.as_str());
                    w.key("time_discovered_started_ns");
                    w.opt(e.time_discovered_started_ns);
                    w.key("time_discovered_completed_ns");
                    w.opt(e.time_discovered_completed_ns);
                    w.key("retired");
                    w.boolean(e.retired);
                    w.key("timeout_ms");
                    w.opt(e.timeout_ms);
                    w.key("is_p2p");
                    w.boolean(e.is_p2p);
                    if !e.frames.is_empty() {
                        w.key("frames");
                        w.list(|w| {
                            for f in &e.frames {
                                w.dict(|w| {
                                    w.key("name");
                                    w.str(&f.name);
                                    w.key("filename");
                                    w.str(&f.filename);
                                    w.key("line");
                                    w.int(f.line);
                                });
                            }
                        });
                    }
                });
            }
        });
    });
    w.out.push(b'.');
    w.out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(rank: u32) -> FrDump {
        let mut pg_config = BTreeMap::new();
        pg_config.insert(
            "0".to_string(),
            FrPgConfig {
                name: "0".into(),
                desc: "default_pg".into(),
                ranks: vec![0, 1, 2, 3],
            },
        );
        let mut pg_status = BTreeMap::new();
        pg_status.insert(
            "0".to_string(),
            FrPgStatus {
                last_enqueued_collective: 7,
                last_started_collective: -1,
                last_completed_collective: 6,
            },
        );
        FrDump {
            rank,
            version: "2.9".into(),
            pg_config,
            pg_status,
            nccl_version: Some("2.27.3".into()),
            entries: vec![FrEntry {
                record_id: 5,
                pg_id: 0,
                process_group: FrPgRef {
                    name: "0".into(),
                    desc: "default_pg".into(),
                },
                collective_seq_id: 7,
                p2p_seq_id: 0,
                op_id: 7,
                profiling_name: "nccl:all_reduce".into(),
                time_created_ns: 1_758_580_156_069_309_184,
                input_sizes: vec![vec![2048, 5120]],
                input_dtypes: vec!["BFloat16".into()],
                output_sizes: vec![vec![2048, 5120]],
                output_dtypes: vec!["BFloat16".into()],
                state: FrState::Scheduled,
                time_discovered_started_ns: None,
                time_discovered_completed_ns: Some(3),
                retired: false,
                timeout_ms: Some(600_000),
                is_p2p: false,
                frames: vec![FrFrame {
                    name: "forward".into(),
                    filename: "moe.py".into(),
                    line: 301,
                }],
            }],
        }
    }

    #[test]
    fn pickle_round_trip() {
        let d = sample(3);
        let bytes = write_fr_pickle(&d);
        let back = parse_fr_bytes("_dump_3", &bytes).unwrap();
        assert_eq!(back, d);
        // Rank from content when the name has none: the rank common to all groups.
        let mut single = d.clone();
        single.pg_config.insert(
            "9".into(),
            FrPgConfig {
                name: "9".into(),
                desc: "EXPERT_DATA_PARALLEL_GROUP".into(),
                ranks: vec![3],
            },
        );
        let back = parse_fr_bytes("dump", &write_fr_pickle(&single)).unwrap();
        assert_eq!(back.rank, 3);
        assert!(matches!(
            parse_fr_bytes("dump", &bytes),
            Err(FrError::NoRank { .. })
        ));
    }

    #[test]
    fn json_form_and_errors() {
        let j = br#"{"version": "2.10", "rank": 2, "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": [0, 1, 2]}},
 "entries": [{"pg_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": 4,
   "profiling_name": "nccl:all_gather", "state": "started", "input_sizes": [[8]], "input_dtypes": ["Float"],
   "frames": [{"name": "f", "filename": "a.py", "line": 3}]}]}"#;
        let d = parse_fr_bytes("trace.json", j).unwrap();
        assert_eq!(d.rank, 2);
        assert_eq!(d.version, "2.10");
        assert_eq!(d.pg_config["0"].ranks, vec![0, 1, 2]);
        assert_eq!(d.entries[0].state, FrState::Started);
        assert_eq!(d.entries[0].frames[0].line, 3);

        let e = parse_fr_bytes("r1.json", b"{\"version\": \"2.9\",\n \"entries\": [").unwrap_err();
        assert!(matches!(e, FrError::Json { line: 2, .. }), "{e}");
        assert!(e.to_string().starts_with("r1.json: JSON at line 2"));

        let bad = br#"{"version": "2.9", "pg_config": {}, "entries": [{"state": "running"}]}"#;
        let e = parse_fr_bytes("r1.json", bad).unwrap_err().to_string();
        assert!(
            e.contains("entries[0].state") && e.contains("scheduled"),
            "{e}"
        );
        let bad =
            br#"{"version": "2.9", "pg_config": {}, "entries": [{}, {"collective_seq_id": "x"}]}"#;
        let e = parse_fr_bytes("r1.json", bad).unwrap_err().to_string();
        assert!(
            e.contains("entries[1].collective_seq_id") && e.contains("integer"),
            "{e}"
        );
        let e = parse_fr_bytes("r1.json", br#"{"traceEvents": []}"#).unwrap_err();
        assert!(matches!(e, FrError::NotADump { .. }));
    }

    #[test]
    fn pickle_errors_name_offset() {
        let bytes = write_fr_pickle(&sample(1));
        let e = parse_fr_bytes("_dump_1", &bytes[..40]).unwrap_err();
        assert!(matches!(e, FrError::Pickle { .. }), "{e}");
        assert!(e.to_string().contains("_dump_1: pickle at byte"), "{e}");
        // A class instance is refused.
        let e = parse_fr_bytes("_dump_1", b"\x80\x02c__builtin__\nobject\n)R.").unwrap_err();
        assert!(e.to_string().contains("Python object"), "{e}");
        // Self-referencing list.
        let e = parse_fr_bytes("_dump_1", b"\x80\x02]q\x00h\x00a.").unwrap_err();
        assert!(e.to_string().contains("nesting"), "{e}");
        // Protocol 4 framing, memoize and short strings are understood.
        let p4 = b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x07entries\x94]\x94\x8c\x07version\x94\x8c\x032.9\x94u.";
        let d = parse_fr_bytes("_dump_5", p4).unwrap();
        assert_eq!((d.rank, d.version.as_str()), (5, "2.9"));
    }

    fn tmpdir(tag: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("flare-fr-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    #[test]
    fn directories() {
        let dir = tmpdir("dir");
        assert!(matches!(read_fr_dir(&dir), Err(FrError::EmptyDir { .. })));
        for r in [0, 1, 3] {
            std::fs::write(dir.join(format!("_dump_{r}")), write_fr_pickle(&sample(r))).unwrap();
        }
        std::fs::write(dir.join("reference.txt"), "notes").unwrap();
        // a kernel log saved beside the dumps, without an extension
        std::fs::write(
            dir.join("dmesg"),
            "[ 12.3] NVRM: Xid (PCI:0000:3a:00): 79\n",
        )
        .unwrap();
        assert!(looks_like_fr_dump(&dir));
        let job = read_fr_dir(&dir).unwrap();
        assert_eq!(job.dumps.keys().copied().collect::<Vec<_>>(), vec![0, 1, 3]);
        assert_eq!(job.missing_ranks, vec![2]);
        std::fs::write(dir.join("trace.json"), br#"{"traceEvents": []}"#).unwrap();
        assert!(!looks_like_fr_dump(&dir.join("trace.json")));
        let e = read_fr_dir(&dir).unwrap_err();
        assert!(matches!(e, FrError::MixedDir { .. }), "{e}");
        std::fs::remove_file(dir.join("trace.json")).unwrap();
        std::fs::write(dir.join("rank1.pkl"), write_fr_pickle(&sample(1))).unwrap();
        assert!(matches!(
            read_fr_dir(&dir),
            Err(FrError::DuplicateRank { rank: 1, .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_fr_bytes("_dump_0", &bytes);
            let mut p = vec![0x80, 2];
            p.extend_from_slice(&bytes);
            let _ = parse_fr_bytes("_dump_0", &p);
        }

        #[test]
        fn truncated_and_flipped_dumps_never_panic(cut in 0usize..2000, at in 0usize..2000, byte in any::<u8>()) {
            let bytes = write_fr_pickle(&sample(0));
            let cut = cut.min(bytes.len());
            let _ = parse_fr_bytes("_dump_0", &bytes[..cut]);
            let mut flipped = bytes.clone();
            let at = at % flipped.len();
            flipped[at] = byte;
            let _ = parse_fr_bytes("_dump_0", &flipped);
        }
    }
}
