//! HyperLogLog in Redis 7.0's exact bytes (`src/hyperloglog.c`): the
//! 16-byte header (`HYLL`, encoding, three unused bytes, the cached
//! cardinality with its "invalid" bit), then either the sparse opcodes
//! (ZERO `00xxxxxx`, XZERO `01xxxxxx xxxxxxxx`, VAL `1vvvvvxx`) or 16 384
//! six-bit registers packed little-end first. A value written here reads
//! the same under `GET` and `DUMP` as Redis's, and one written by Redis
//! counts the same here: the same MurmurHash64A, the same sparse edits
//! (opcode splits, merges of the five opcodes around an edit, promotion
//! to dense past `hll-sparse-max-bytes`), the same estimator (Ertl's
//! improved raw estimate, `hllTau`/`hllSigma`).
//!
//! Hand-written, not a crate: what users compare is Redis's bytes and
//! estimates, which no general HyperLogLog crate reproduces.
//!
//! Across regions a HyperLogLog is a lattice: the register-wise maximum
//! ([`merge`]), re-encoded canonically ([`encode`]) so that every replica
//! that holds the same registers holds the same bytes.

/// Registers are addressed by the hash's low `P` bits.
pub const P: u32 = 14;
const Q: u32 = 64 - P;
/// Number of registers.
pub const REGISTERS: usize = 1 << P;
const BITS: usize = 6;
const REGISTER_MAX: u64 = (1 << BITS) - 1;
/// Header length.
pub const HDR: usize = 16;
/// The header's first bytes.
pub const MAGIC: &[u8] = b"HYLL";
/// Length of a dense HyperLogLog.
pub const DENSE_SIZE: usize = HDR + (REGISTERS * BITS).div_ceil(8);
const DENSE: u8 = 0;
const SPARSE: u8 = 1;
/// Redis's default `hll-sparse-max-bytes`.
pub const SPARSE_MAX_BYTES: usize = 3000;

const VAL_MAX_VALUE: u8 = 32;
const VAL_MAX_LEN: usize = 4;
const ZERO_MAX_LEN: usize = 64;
const XZERO_MAX_LEN: usize = 16384;
const ALPHA_INF: f64 = 0.721_347_520_444_481_7;
const SEED: u64 = 0xadc8_3b19;

/// Why a value is not a usable HyperLogLog, with Redis's error texts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HllError {
    /// Not a HyperLogLog string at all.
    NotHll,
    /// A HyperLogLog whose sparse opcodes do not cover the registers.
    Corrupt,
}

impl HllError {
    /// The error reply, as Redis words it.
    pub fn message(self) -> &'static str {
        match self {
            HllError::NotHll => "WRONGTYPE Key is not a valid HyperLogLog string value.",
            HllError::Corrupt => "INVALIDOBJ Corrupted HLL object detected",
        }
    }
}

/// MurmurHash64A as Redis runs it (endian-neutral).
pub fn murmur64a(key: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed ^ (key.len() as u64).wrapping_mul(M);
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        let mut k = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, &b) in tail.iter().enumerate().rev() {
            h ^= u64::from(b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// The register `ele` falls in and the length of its hash's `0…01`
/// pattern (1 ..= 51).
pub fn pattern(ele: &[u8]) -> (usize, u8) {
    let hash = murmur64a(ele, SEED);
    let index = (hash & (REGISTERS as u64 - 1)) as usize;
    let rest = (hash >> P) | (1u64 << Q);
    (index, rest.trailing_zeros() as u8 + 1)
}

/// A new, empty HyperLogLog (sparse: XZERO opcodes covering every
/// register), as `PFADD` creates it.
pub fn new_sparse() -> Vec<u8> {
    let mut v = header(SPARSE);
    let mut left = REGISTERS;
    while left > 0 {
        let n = left.min(XZERO_MAX_LEN);
        push_xzero(&mut v, n);
        left -= n;
    }
    v
}

fn header(encoding: u8) -> Vec<u8> {
    let mut v = Vec::with_capacity(HDR + 8);
    v.extend_from_slice(MAGIC);
    v.push(encoding);
    v.extend_from_slice(&[0; 11]);
    v
}

/// Checks a string value is a HyperLogLog (`isHLLObjectOrReply`).
pub fn check(v: &[u8]) -> Result<(), HllError> {
    if v.len() < HDR || &v[..4] != MAGIC || v[4] > SPARSE {
        return Err(HllError::NotHll);
    }
    if v[4] == DENSE && v.len() != DENSE_SIZE {
        return Err(HllError::NotHll);
    }
    Ok(())
}

/// True when `v` is a dense HyperLogLog (false for anything shorter
/// than a header).
pub fn is_dense(v: &[u8]) -> bool {
    v.len() >= HDR && v[4] == DENSE
}

fn invalidate_cache(v: &mut [u8]) {
    if let Some(b) = v.get_mut(15) {
        *b |= 1 << 7;
    }
}

/// The cached cardinality, if valid (None too for a value shorter than
/// a header).
pub fn cached(v: &[u8]) -> Option<u64> {
    let card: [u8; 8] = v.get(8..16)?.try_into().ok()?;
    (card[7] & (1 << 7) == 0).then(|| u64::from_le_bytes(card))
}

/// Stores `card` as the cached cardinality (what `PFCOUNT` of one key
/// writes back); a value shorter than a header is left alone.
pub fn set_cached(v: &mut [u8], card: u64) {
    if let Some(c) = v.get_mut(8..16) {
        c.copy_from_slice(&card.to_le_bytes());
    }
}

// ---- dense registers ----------------------------------------------------

fn dense_get(regs: &[u8], i: usize) -> u8 {
    let byte = i * BITS / 8;
    let fb = (i * BITS) & 7;
    let b0 = u64::from(regs[byte]);
    let b1 = u64::from(regs.get(byte + 1).copied().unwrap_or(0));
    (((b0 >> fb) | (b1 << (8 - fb))) & REGISTER_MAX) as u8
}

fn dense_put(regs: &mut [u8], i: usize, val: u8) {
    let byte = i * BITS / 8;
    let fb = (i * BITS) & 7;
    let v = u64::from(val);
    regs[byte] &= !((REGISTER_MAX << fb) as u8);
    regs[byte] |= (v << fb) as u8;
    if let Some(b) = regs.get_mut(byte + 1) {
        *b &= !((REGISTER_MAX >> (8 - fb)) as u8);
        *b |= (v >> (8 - fb)) as u8;
    }
}

fn dense_set(regs: &mut [u8], i: usize, count: u8) -> bool {
    if count > dense_get(regs, i) {
        dense_put(regs, i, count);
        true
    } else {
        false
    }
}

// ---- sparse opcodes -----------------------------------------------------

fn is_zero(b: u8) -> bool {
    b & 0xc0 == 0
}
fn is_xzero(b: u8) -> bool {
    b & 0xc0 == 0x40
}
fn is_val(b: u8) -> bool {
    b & 0x80 != 0
}
fn zero_len(b: u8) -> usize {
    usize::from(b & 0x3f) + 1
}
fn xzero_len(b0: u8, b1: u8) -> usize {
    ((usize::from(b0 & 0x3f) << 8) | usize::from(b1)) + 1
}
fn val_value(b: u8) -> u8 {
    ((b >> 2) & 0x1f) + 1
}
fn val_len(b: u8) -> usize {
    usize::from(b & 0x3) + 1
}
fn val_op(val: u8, len: usize) -> u8 {
    ((val - 1) << 2 | (len as u8 - 1)) | 0x80
}
fn push_xzero(v: &mut Vec<u8>, len: usize) {
    let l = len - 1;
    v.push((l >> 8) as u8 | 0x40);
    v.push((l & 0xff) as u8);
}
fn push_zero_run(v: &mut Vec<u8>, len: usize) {
    if len > ZERO_MAX_LEN {
        push_xzero(v, len);
    } else {
        v.push((len - 1) as u8);
    }
}

/// Every register of a checked HyperLogLog, one byte each.
pub fn registers(v: &[u8]) -> Result<Vec<u8>, HllError> {
    let mut max = vec![0u8; REGISTERS];
    merge_into(&mut max, v)?;
    Ok(max)
}

/// `max[i] = max(max[i], v[i])` for every register (`hllMerge`).
pub fn merge_into(max: &mut [u8], v: &[u8]) -> Result<(), HllError> {
    check(v)?;
    if is_dense(v) {
        let regs = &v[HDR..];
        for (i, m) in max.iter_mut().enumerate().take(REGISTERS) {
            *m = (*m).max(dense_get(regs, i));
        }
        return Ok(());
    }
    let mut i = 0;
    let mut p = HDR;
    while p < v.len() {
        let b = v[p];
        if is_zero(b) {
            i += zero_len(b);
            p += 1;
        } else if is_xzero(b) {
            i += xzero_len(b, v.get(p + 1).copied().unwrap_or(0));
            p += 2;
        } else {
            let (len, val) = (val_len(b), val_value(b));
            if len + i > REGISTERS {
                break;
            }
            for m in &mut max[i..i + len] {
                *m = (*m).max(val);
            }
            i += len;
            p += 1;
        }
    }
    if i != REGISTERS {
        return Err(HllError::Corrupt);
    }
    Ok(())
}

/// The opcodes of a sparse HyperLogLog as `PFDEBUG DECODE` prints them
/// (`z:len`, `Z:len`, `v:value,len`, space-separated); None for a dense
/// one or one shorter than a header.
pub fn decode_sparse(v: &[u8]) -> Option<String> {
    if v.len() < HDR || is_dense(v) {
        return None;
    }
    let mut out = Vec::new();
    let mut p = HDR;
    while p < v.len() {
        let b = v[p];
        if is_zero(b) {
            out.push(format!("z:{}", zero_len(b)));
            p += 1;
        } else if is_xzero(b) {
            out.push(format!(
                "Z:{}",
                xzero_len(b, v.get(p + 1).copied().unwrap_or(0))
            ));
            p += 2;
        } else {
            out.push(format!("v:{},{}", val_value(b), val_len(b)));
            p += 1;
        }
    }
    Some(out.join(" "))
}

/// Converts a sparse HyperLogLog to dense in place (`hllSparseToDense`).
pub fn to_dense(v: &mut Vec<u8>) -> Result<(), HllError> {
    check(v)?;
    if is_dense(v) {
        return Ok(());
    }
    let regs = registers(v)?;
    let mut dense = vec![0u8; DENSE_SIZE];
    dense[..HDR].copy_from_slice(&v[..HDR]);
    dense[4] = DENSE;
    for (i, &r) in regs.iter().enumerate() {
        if r > 0 {
            dense_put(&mut dense[HDR..], i, r);
        }
    }
    *v = dense;
    Ok(())
}

/// Raises register `index` to `count` (`hllSparseSet` / `hllDenseSet`):
/// true when it changed. A sparse value whose edit needs a value above 32
/// or grows it past `sparse_max` bytes becomes dense.
pub fn set(v: &mut Vec<u8>, index: usize, count: u8, sparse_max: usize) -> Result<bool, HllError> {
    check(v)?;
    let index = index % REGISTERS;
    if is_dense(v) {
        return Ok(dense_set(&mut v[HDR..], index, count));
    }
    if count > VAL_MAX_VALUE {
        return promote(v, index, count);
    }
    // Step 1: the opcode covering `index`.
    let end = v.len();
    let mut p = HDR;
    let mut first = 0usize;
    let mut prev: Option<usize> = None;
    let mut span = 0usize;
    while p < end {
        let b = v[p];
        let mut oplen = 1;
        if is_zero(b) {
            span = zero_len(b);
        } else if is_val(b) {
            span = val_len(b);
        } else {
            span = xzero_len(b, v.get(p + 1).copied().unwrap_or(0));
            oplen = 2;
        }
        if index < first + span {
            break;
        }
        prev = Some(p);
        p += oplen;
        first += span;
    }
    if span == 0 || p >= end {
        return Err(HllError::Corrupt);
    }
    let b = v[p];
    let (zero, xzero) = (is_zero(b), is_xzero(b));
    let runlen = if zero {
        zero_len(b)
    } else if xzero {
        xzero_len(b, v.get(p + 1).copied().unwrap_or(0))
    } else {
        val_len(b)
    };
    // Step 2: the easy cases.
    let mut done = false;
    if !zero && !xzero {
        if val_value(b) >= count {
            return Ok(false);
        }
        if runlen == 1 {
            v[p] = val_op(count, 1);
            done = true;
        }
    }
    if !done && zero && runlen == 1 {
        v[p] = val_op(count, 1);
        done = true;
    }
    if !done {
        // The general case: split the opcode in up to three.
        let last = first + span - 1;
        let mut seq = Vec::with_capacity(5);
        if zero || xzero {
            if index != first {
                push_zero_run(&mut seq, index - first);
            }
            seq.push(val_op(count, 1));
            if index != last {
                push_zero_run(&mut seq, last - index);
            }
        } else {
            let cur = val_value(b);
            if index != first {
                seq.push(val_op(cur, index - first));
            }
            seq.push(val_op(count, 1));
            if index != last {
                seq.push(val_op(cur, last - index));
            }
        }
        // Step 3: put it in place of the old opcode.
        let oldlen = if xzero { 2 } else { 1 };
        if seq.len() > oldlen && v.len() + seq.len() - oldlen > sparse_max {
            return promote(v, index, count);
        }
        v.splice(p..p + oldlen, seq);
    }
    // Step 4: merge adjacent VAL opcodes of equal value around the edit.
    let mut p = prev.unwrap_or(HDR);
    let mut scan = 5;
    while p < v.len() && scan > 0 {
        scan -= 1;
        let b = v[p];
        if is_xzero(b) {
            p += 2;
            continue;
        }
        if is_zero(b) {
            p += 1;
            continue;
        }
        if p + 1 < v.len() && is_val(v[p + 1]) {
            let (v1, v2) = (val_value(b), val_value(v[p + 1]));
            if v1 == v2 {
                let len = val_len(b) + val_len(v[p + 1]);
                if len <= VAL_MAX_LEN {
                    v[p + 1] = val_op(v1, len);
                    v.remove(p);
                    // Try the merged one with its right neighbour too
                    // (Redis does not advance, and counts the scan).
                    continue;
                }
            }
        }
        p += 1;
    }
    invalidate_cache(v);
    Ok(true)
}

fn promote(v: &mut Vec<u8>, index: usize, count: u8) -> Result<bool, HllError> {
    to_dense(v)?;
    dense_set(&mut v[HDR..], index, count);
    Ok(true)
}

/// `PFADD` of one element: true when a register changed (the caller then
/// invalidates the cache with [`invalidate`]).
pub fn add(v: &mut Vec<u8>, ele: &[u8], sparse_max: usize) -> Result<bool, HllError> {
    let (index, count) = pattern(ele);
    set(v, index, count, sparse_max)
}

/// Marks the cached cardinality stale (what `PFADD` does once it changed
/// something).
pub fn invalidate(v: &mut [u8]) {
    invalidate_cache(v);
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let mut y = 1.0;
    let mut z = x;
    loop {
        x *= x;
        let prev = z;
        z += x * y;
        y += y;
        if prev == z {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let mut y = 1.0;
    let mut z = 1.0 - x;
    loop {
        x = x.sqrt();
        let prev = z;
        y *= 0.5;
        z -= (1.0 - x).powi(2) * y;
        if prev == z {
            return z / 3.0;
        }
    }
}

/// The estimate of a register histogram (`hllCount`).
fn estimate(histo: &[u32; 64]) -> u64 {
    let m = REGISTERS as f64;
    let mut z = m * tau((m - f64::from(histo[Q as usize + 1])) / m);
    for j in (1..=Q as usize).rev() {
        z += f64::from(histo[j]);
        z *= 0.5;
    }
    z += m * sigma(f64::from(histo[0]) / m);
    (ALPHA_INF * m * m / z).round() as u64
}

/// The estimated cardinality of a checked HyperLogLog (ignoring the cache).
pub fn count(v: &[u8]) -> Result<u64, HllError> {
    count_registers(&registers(v)?)
}

/// The estimated cardinality of registers one byte each (`PFCOUNT` of
/// several keys: their register-wise maximum).
pub fn count_registers(regs: &[u8]) -> Result<u64, HllError> {
    let mut histo = [0u32; 64];
    for &r in regs {
        histo[usize::from(r) & 63] += 1;
    }
    Ok(estimate(&histo))
}

/// `PFMERGE`'s write: `dest` (a checked HyperLogLog, or a new sparse one)
/// raised to `max` register by register, dense first when `dense`.
pub fn raise(
    dest: &mut Vec<u8>,
    max: &[u8],
    dense: bool,
    sparse_max: usize,
) -> Result<(), HllError> {
    if dense {
        to_dense(dest)?;
    }
    for (j, &m) in max.iter().enumerate() {
        if m == 0 {
            continue;
        }
        set(dest, j, m, sparse_max)?;
    }
    invalidate_cache(dest);
    Ok(())
}

/// The canonical bytes of `regs`: what `PFMERGE` of them into a new key
/// writes (dense when `dense`). Replicas that merged the same registers
/// in any order hold these same bytes.
pub fn encode(regs: &[u8], dense: bool, sparse_max: usize) -> Vec<u8> {
    let mut v = new_sparse();
    // A new value is well formed: no error can come of it.
    let _ = raise(&mut v, regs, dense, sparse_max);
    v
}

/// The lattice join of two HyperLogLogs: the register-wise maximum,
/// dense when either is, canonically encoded ([`encode`]).
pub fn merge(a: &[u8], b: &[u8], sparse_max: usize) -> Result<Vec<u8>, HllError> {
    check(a)?;
    check(b)?;
    let mut max = registers(a)?;
    merge_into(&mut max, b)?;
    Ok(encode(&max, is_dense(a) || is_dense(b), sparse_max))
}

#[cfg(test)]
#[path = "hll_tests.rs"]
mod tests;
