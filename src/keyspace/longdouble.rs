//! A software x87 80-bit `long double`, just enough for INCRBYFLOAT and
//! HINCRBYFLOAT (`commands/`) and for float counters under active
//! replication (`merge/`, which sums nodes' parts in it), hence here.
//!
//! Redis computes INCRBYFLOAT in C `long double` (64-bit mantissa on x86-64)
//! and prints it with `%.17Lf` before trimming trailing zeros. With plain f64
//! `1 - 1.1` prints as `-0.10000000000000009` where Redis answers `-0.1`, so we
//! emulate the exact arithmetic: parsing (strtold: decimal, hex, inf),
//! correctly rounded addition (round half to even) and exact decimal
//! formatting, all through a small arbitrary-precision integer. Values are
//! `m * 2^e` with `m` normalized to 64 bits (denormals keep fewer bits).

use std::cmp::Ordering;

/// Smallest exponent of `m * 2^e` (denormal limit of the x87 format).
const EMIN: i64 = -16445;
/// Largest exponent with a normalized 64-bit mantissa.
const EMAX: i64 = 16320;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum F80 {
    Fin { neg: bool, m: u64, e: i32 },
    Inf(bool),
    NaN,
}

/// A finite double as its sign, integer mantissa and binary exponent:
/// `x = ±mant * 2^exp2` exactly (subnormals too).
fn f64_parts(x: f64) -> (bool, u64, i64) {
    let bits = x.to_bits();
    let (neg, exp, frac) = (
        bits >> 63 == 1,
        ((bits >> 52) & 0x7ff) as i64,
        bits & ((1 << 52) - 1),
    );
    match exp {
        0 => (neg, frac, -1074),
        _ => (neg, frac | (1 << 52), exp - 1075),
    }
}

impl F80 {
    pub const ZERO: F80 = F80::Fin {
        neg: false,
        m: 0,
        e: 0,
    };

    pub fn from_i64(n: i64) -> F80 {
        // Normalized to 64 bits, exactly (`round` of it, with no `Big`).
        let a = n.unsigned_abs();
        if a == 0 {
            return F80::ZERO;
        }
        let lz = a.leading_zeros();
        F80::Fin {
            neg: n < 0,
            m: a << lz,
            e: -(lz as i32),
        }
    }

    /// `n`, correctly rounded (exact up to 64 significant bits).
    pub fn from_i128(n: i128) -> F80 {
        match i64::try_from(n) {
            Ok(v) => F80::from_i64(v),
            Err(_) => F80::parse(n.to_string().as_bytes()).expect("an integer parses"),
        }
    }

    /// `x` exactly (every double is a long double), for ZINCRBY's score
    /// counters.
    pub fn from_f64(x: f64) -> F80 {
        if x.is_nan() {
            return F80::NaN;
        }
        if x.is_infinite() {
            return F80::Inf(x < 0.0);
        }
        let (neg, mant, exp2) = f64_parts(x);
        if mant == 0 {
            return F80::Fin { neg, m: 0, e: 0 };
        }
        // Normalized to 64 bits, exactly (what `round` makes of it: no
        // double reaches the x87 format's exponent limits).
        let lz = mant.leading_zeros();
        F80::Fin {
            neg,
            m: mant << lz,
            e: (exp2 - i64::from(lz)) as i32,
        }
    }

    /// The nearest double, half to even (a result in the double's
    /// subnormal range may round twice; a score never gets there in use).
    // `&self` as it was: clippy asks for `self` of crate-private items only (DECISIONS 303).
    #[allow(clippy::wrong_self_convention)]
    pub fn to_f64(&self) -> f64 {
        let (neg, m, e) = match *self {
            F80::Fin { neg, m, e } => (neg, m, e),
            F80::Inf(neg) => {
                return if neg {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                }
            }
            F80::NaN => return f64::NAN,
        };
        let sign = if neg { -1.0 } else { 1.0 };
        if m == 0 {
            return sign * 0.0;
        }
        let (mut top, rem) = (m >> 11, m & 0x7ff);
        if rem > 0x400 || (rem == 0x400 && top & 1 == 1) {
            top += 1;
        }
        // top < 2^54, exact in a double; scale by 2^(e + 11) in steps that
        // stay exact until the result itself overflows or underflows.
        let (mut v, mut k) = (top as f64, e + 11);
        while k > 0 {
            let step = k.min(1000);
            v *= 2f64.powi(step);
            k -= step;
        }
        while k < 0 {
            let step = k.max(-1000);
            v *= 2f64.powi(step);
            k -= step;
        }
        sign * v
    }

    /// `-self`.
    pub fn neg(&self) -> F80 {
        match *self {
            F80::Fin { neg, m, e } => F80::Fin { neg: !neg, m, e },
            F80::Inf(neg) => F80::Inf(!neg),
            F80::NaN => F80::NaN,
        }
    }

    pub fn is_finite(&self) -> bool {
        matches!(self, F80::Fin { .. })
    }

    /// Parses as Redis's string2ld: strtold over the whole input, no leading
    /// space, no NaN, and no overflow or underflow to zero.
    pub fn parse(s: &[u8]) -> Option<F80> {
        if s.is_empty() || s.len() >= 5 * 1024 || s[0].is_ascii_whitespace() {
            return None;
        }
        // strtold stops at a NUL byte, and Redis's string2ld then refuses
        // the string: the number must span all of it.
        if s.contains(&0) {
            return None;
        }
        let (neg, body) = match s.first() {
            Some(b'-') => (true, &s[1..]),
            Some(b'+') => (false, &s[1..]),
            _ => (false, s),
        };
        let lower = body.to_ascii_lowercase();
        if lower == b"inf" || lower == b"infinity" {
            return Some(F80::Inf(neg));
        }
        let (big, exp2, exp10) = if lower.starts_with(b"0x") {
            parse_hex(&lower[2..])?
        } else {
            parse_dec(&lower)?
        };
        let v = scale(neg, big.clone(), exp2, exp10);
        match v {
            F80::Inf(_) => None,
            F80::Fin { m: 0, .. } if !big.is_zero() => None,
            v => Some(v),
        }
    }

    /// `self + o`, correctly rounded.
    pub fn add(&self, o: &F80) -> F80 {
        match (*self, *o) {
            (F80::NaN, _) | (_, F80::NaN) => F80::NaN,
            (F80::Inf(a), F80::Inf(b)) if a != b => F80::NaN,
            (F80::Inf(a), _) | (_, F80::Inf(a)) => F80::Inf(a),
            (
                F80::Fin {
                    neg: na,
                    m: ma,
                    e: ea,
                },
                F80::Fin {
                    neg: nb,
                    m: mb,
                    e: eb,
                },
            ) => add_fin((na, ma, ea as i64), (nb, mb, eb as i64)),
        }
    }

    /// `%.17Lf` with trailing zeros (and a bare '.') trimmed; "-0" → "0".
    pub fn format_human(&self) -> String {
        let (neg, m, e) = match *self {
            F80::Fin { neg, m, e } => (neg, m, e as i64),
            F80::Inf(neg) => return if neg { "-inf" } else { "inf" }.into(),
            F80::NaN => return "nan".into(),
        };
        let mut q = Big::from_u64(m);
        if e >= 0 {
            q = q.shl(e as u64);
            for _ in 0..17 {
                q.mul_small(10);
            }
        } else {
            for _ in 0..17 {
                q.mul_small(10);
            }
            q = shr_round_even(&q, (-e) as u64, false);
        }
        let digits = q.to_decimal();
        let digits = format!("{digits:0>18}");
        let (int, frac) = digits.split_at(digits.len() - 17);
        let frac = frac.trim_end_matches('0');
        let mut out = String::new();
        if neg {
            out.push('-');
        }
        out.push_str(int);
        if !frac.is_empty() {
            out.push('.');
            out.push_str(frac);
        }
        if out == "-0" {
            out = "0".into();
        }
        out
    }
}

/// Decimal mantissa digits and exponent: (digits, 0, exp10).
fn parse_dec(s: &[u8]) -> Option<(Big, i64, i64)> {
    let (mant, exp) = split_exp(s, b'e')?;
    let (digits, frac_len) = mantissa_digits(mant, |c| c.is_ascii_digit())?;
    let mut big = Big::from_u64(0);
    for c in digits {
        big.mul_small(10);
        big.add_small((c - b'0') as u64);
    }
    Some((big, 0, exp - frac_len))
}

/// Hex mantissa and binary exponent: (digits, exp2, 0).
fn parse_hex(s: &[u8]) -> Option<(Big, i64, i64)> {
    let (mant, exp) = split_exp(s, b'p')?;
    let (digits, frac_len) = mantissa_digits(mant, |c| c.is_ascii_hexdigit())?;
    let mut big = Big::from_u64(0);
    for c in digits {
        big.mul_small(16);
        big.add_small((c as char).to_digit(16)? as u64);
    }
    Some((big, exp - 4 * frac_len, 0))
}

/// Splits "mantissa[<mark>[+-]digits]" and parses the (clamped) exponent.
fn split_exp(s: &[u8], mark: u8) -> Option<(&[u8], i64)> {
    let Some(p) = s.iter().position(|&c| c == mark) else {
        return Some((s, 0));
    };
    let (mant, rest) = (&s[..p], &s[p + 1..]);
    let (neg, digits) = match rest.first() {
        Some(b'-') => (true, &rest[1..]),
        Some(b'+') => (false, &rest[1..]),
        _ => (false, rest),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: i64 = 0;
    for &c in digits {
        v = (v * 10 + (c - b'0') as i64).min(1_000_000_000);
    }
    Some((mant, if neg { -v } else { v }))
}

/// The digits of "int[.frac]" (at least one digit) and the fraction length.
fn mantissa_digits(s: &[u8], ok: impl Fn(u8) -> bool) -> Option<(Vec<u8>, i64)> {
    let (int, frac) = match s.iter().position(|&c| c == b'.') {
        Some(p) => (&s[..p], &s[p + 1..]),
        None => (s, &[][..]),
    };
    if int.len() + frac.len() == 0 || !int.iter().chain(frac).all(|&c| ok(c)) {
        return None;
    }
    let mut d: Vec<u8> = int.iter().chain(frac).copied().collect();
    let lead = d.iter().take_while(|&&c| c == b'0').count();
    d.drain(..lead);
    Some((d, frac.len() as i64))
}

/// Rounds `big * 2^exp2 * 10^exp10` to the nearest F80.
fn scale(neg: bool, big: Big, exp2: i64, exp10: i64) -> F80 {
    if big.is_zero() {
        return F80::Fin { neg, m: 0, e: 0 };
    }
    let digits = big.bits() as i64 * 30103 / 100000 + 1;
    let bin = exp2 as f64 * std::f64::consts::LOG10_2;
    let mag = digits + exp10 + bin as i64;
    if mag > 4940 {
        return F80::Inf(neg);
    }
    if mag < -4970 {
        return F80::Fin { neg, m: 0, e: 0 };
    }
    if exp10 >= 0 {
        let mut b = big;
        for _ in 0..exp10 {
            b.mul_small(10);
        }
        return round(neg, b, exp2, false);
    }
    let mut p = Big::from_u64(1);
    for _ in 0..-exp10 {
        p.mul_small(10);
    }
    let k = (p.bits() as i64 - big.bits() as i64 + 66).max(0) as u64;
    let (q, rem_nonzero) = div(&big.shl(k), &p);
    round(neg, q, exp2 - k as i64, rem_nonzero)
}

fn add_fin(a: (bool, u64, i64), b: (bool, u64, i64)) -> F80 {
    if b.1 == 0 && (a.1 != 0 || a.0 == b.0) {
        return F80::Fin {
            neg: a.0,
            m: a.1,
            e: a.2 as i32,
        };
    }
    if a.1 == 0 {
        return if b.1 == 0 {
            F80::ZERO
        } else {
            F80::Fin {
                neg: b.0,
                m: b.1,
                e: b.2 as i32,
            }
        };
    }
    // A far smaller operand (under a quarter ulp) cannot change the result.
    let (hi, lo) = if a.2 >= b.2 { (a, b) } else { (b, a) };
    if hi.2 - lo.2 > 130 {
        return F80::Fin {
            neg: hi.0,
            m: hi.1,
            e: hi.2 as i32,
        };
    }
    add_fin_narrow(hi, lo).unwrap_or_else(|| add_fin_wide(hi, lo))
}

/// [`add_fin_wide`] in 128-bit integers, where the exponents are within
/// 62 of each other and the result is no denormal (nearly every sum):
/// the same result, with no allocation. None otherwise.
fn add_fin_narrow(hi: (bool, u64, i64), lo: (bool, u64, i64)) -> Option<F80> {
    let d = hi.2 - lo.2;
    if !(0..=62).contains(&d) {
        return None;
    }
    let (x, y) = (u128::from(hi.1) << d, u128::from(lo.1));
    let (neg, v) = if hi.0 == lo.0 {
        (hi.0, x + y)
    } else {
        match x.cmp(&y) {
            Ordering::Equal => return Some(F80::ZERO),
            Ordering::Greater => (hi.0, x - y),
            Ordering::Less => (lo.0, y - x),
        }
    };
    if v == 0 {
        return Some(F80::Fin { neg, m: 0, e: 0 });
    }
    // `round`, on a u128.
    let shift = i64::from(128 - v.leading_zeros()) - 64;
    if lo.2 + shift < EMIN {
        return None;
    }
    let mut m = if shift > 0 {
        let s = shift as u32;
        let q = v >> s;
        let half = (v >> (s - 1)) & 1 == 1;
        let below = v & ((1u128 << (s - 1)) - 1) != 0;
        q + u128::from(half && (below || q & 1 == 1))
    } else {
        v << -shift
    };
    let mut e = lo.2 + shift;
    if m >> 64 != 0 {
        m >>= 1;
        e += 1;
    }
    if e > EMAX {
        return Some(F80::Inf(neg));
    }
    Some(F80::Fin {
        neg,
        m: m as u64,
        e: e as i32,
    })
}

/// The sum of two nonzero finite values (`hi` the one of the larger
/// exponent, within 130 of the other's), through a `Big`.
fn add_fin_wide(hi: (bool, u64, i64), lo: (bool, u64, i64)) -> F80 {
    let x = Big::from_u64(hi.1).shl((hi.2 - lo.2) as u64);
    let y = Big::from_u64(lo.1);
    if hi.0 == lo.0 {
        return round(hi.0, x.add(&y), lo.2, false);
    }
    match x.cmp(&y) {
        Ordering::Equal => F80::ZERO,
        Ordering::Greater => round(hi.0, x.sub(&y), lo.2, false),
        Ordering::Less => round(lo.0, y.sub(&x), lo.2, false),
    }
}

/// Rounds `big * 2^exp` (plus a nonzero tail below it if `sticky`) to 64
/// bits, half to even, with the x87 exponent range.
fn round(neg: bool, big: Big, exp: i64, sticky: bool) -> F80 {
    if big.is_zero() {
        return F80::Fin { neg, m: 0, e: 0 };
    }
    let mut shift = big.bits() as i64 - 64;
    if exp + shift < EMIN {
        shift = EMIN - exp;
    }
    let m = if shift > 0 {
        shr_round_even(&big, shift as u64, sticky)
    } else {
        big.shl((-shift) as u64)
    };
    let (mut m, mut e) = (m, exp + shift);
    if m.bits() > 64 {
        m = m.shr(1);
        e += 1;
    }
    if e > EMAX {
        return F80::Inf(neg);
    }
    F80::Fin {
        neg,
        m: m.low_u64(),
        e: e as i32,
    }
}

/// `big >> n`, rounded to nearest, ties to even.
fn shr_round_even(big: &Big, n: u64, sticky: bool) -> Big {
    let mut q = big.shr(n);
    let half = big.bit(n - 1);
    let below = sticky || big.any_below(n - 1);
    if half && (below || q.bit(0)) {
        q.add_small(1);
    }
    q
}

/// Quotient of `n / d` and whether a remainder is left (restoring division).
fn div(n: &Big, d: &Big) -> (Big, bool) {
    let mut r = n.clone();
    let mut q = Big::from_u64(0);
    if n.bits() < d.bits() {
        return (q, !n.is_zero());
    }
    for i in (0..=n.bits() - d.bits()).rev() {
        let t = d.shl(i);
        if r.cmp(&t) != Ordering::Less {
            r = r.sub(&t);
            q = q.add(&Big::from_u64(1).shl(i));
        }
    }
    (q, !r.is_zero())
}

/// A minimal unsigned big integer: little-endian u64 limbs, no high zeros.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Big(Vec<u64>);

impl Big {
    fn from_u64(v: u64) -> Big {
        let mut b = Big(vec![v]);
        b.trim();
        b
    }
    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }
    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }
    fn low_u64(&self) -> u64 {
        self.0.first().copied().unwrap_or(0)
    }
    fn bits(&self) -> u64 {
        match self.0.last() {
            None => 0,
            Some(&top) => self.0.len() as u64 * 64 - top.leading_zeros() as u64,
        }
    }
    fn bit(&self, i: u64) -> bool {
        let (w, b) = ((i / 64) as usize, i % 64);
        self.0.get(w).is_some_and(|&x| x >> b & 1 == 1)
    }
    fn any_below(&self, i: u64) -> bool {
        let (w, b) = ((i / 64) as usize, i % 64);
        self.0.iter().take(w).any(|&x| x != 0)
            || (b > 0 && self.0.get(w).is_some_and(|&x| x & ((1u64 << b) - 1) != 0))
    }
    fn shl(&self, n: u64) -> Big {
        let (w, b) = ((n / 64) as usize, n % 64);
        let mut v = vec![0u64; w];
        let mut carry = 0u64;
        for &x in &self.0 {
            v.push(x << b | carry);
            carry = if b == 0 { 0 } else { x >> (64 - b) };
        }
        v.push(carry);
        let mut r = Big(v);
        r.trim();
        r
    }
    fn shr(&self, n: u64) -> Big {
        let (w, b) = ((n / 64) as usize, n % 64);
        if w >= self.0.len() {
            return Big(vec![]);
        }
        let src = &self.0[w..];
        let v = (0..src.len())
            .map(|i| {
                let hi = if b == 0 {
                    0
                } else {
                    src.get(i + 1).map_or(0, |&x| x << (64 - b))
                };
                src[i] >> b | hi
            })
            .collect();
        let mut r = Big(v);
        r.trim();
        r
    }
    fn mul_small(&mut self, k: u64) {
        let mut carry = 0u128;
        for x in &mut self.0 {
            let t = *x as u128 * k as u128 + carry;
            *x = t as u64;
            carry = t >> 64;
        }
        if carry > 0 {
            self.0.push(carry as u64);
        }
        self.trim();
    }
    fn add_small(&mut self, k: u64) {
        *self = self.add(&Big::from_u64(k));
    }
    fn add(&self, o: &Big) -> Big {
        let n = self.0.len().max(o.0.len());
        let mut v = Vec::with_capacity(n + 1);
        let mut carry = 0u128;
        for i in 0..n {
            let t =
                *self.0.get(i).unwrap_or(&0) as u128 + *o.0.get(i).unwrap_or(&0) as u128 + carry;
            v.push(t as u64);
            carry = t >> 64;
        }
        v.push(carry as u64);
        let mut r = Big(v);
        r.trim();
        r
    }
    /// `self - o`; requires `self >= o`.
    fn sub(&self, o: &Big) -> Big {
        let mut v = Vec::with_capacity(self.0.len());
        let mut borrow = 0i128;
        for i in 0..self.0.len() {
            let mut t = self.0[i] as i128 - *o.0.get(i).unwrap_or(&0) as i128 - borrow;
            borrow = (t < 0) as i128;
            if t < 0 {
                t += 1i128 << 64;
            }
            v.push(t as u64);
        }
        let mut r = Big(v);
        r.trim();
        r
    }
    fn cmp(&self, o: &Big) -> Ordering {
        self.0
            .len()
            .cmp(&o.0.len())
            .then_with(|| self.0.iter().rev().cmp(o.0.iter().rev()))
    }
    fn divrem_small(&mut self, k: u64) -> u64 {
        let mut rem = 0u128;
        for x in self.0.iter_mut().rev() {
            let cur = rem << 64 | *x as u128;
            *x = (cur / k as u128) as u64;
            rem = cur % k as u128;
        }
        self.trim();
        rem as u64
    }
    fn to_decimal(&self) -> String {
        let mut b = self.clone();
        let mut chunks = vec![];
        while !b.is_zero() {
            chunks.push(b.divrem_small(10_000_000_000_000_000_000));
        }
        let mut s = chunks.pop().map_or("0".to_string(), |c| c.to_string());
        for c in chunks.iter().rev() {
            s.push_str(&format!("{c:019}"));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic stream of u64s (xorshift64*).
    fn stream(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
    }

    /// A double's long double is what rounding its mantissa (the form
    /// before the shift) makes: zeros, subnormals, normals of every scale.
    #[test]
    fn from_f64_matches_rounding_the_mantissa() {
        let slow = |x: f64| {
            let (neg, mant, exp2) = f64_parts(x);
            round(neg, Big::from_u64(mant), exp2, false)
        };
        let mut next = stream(7);
        let mut cases = vec![0.0, -0.0, 1.0, -1.5, f64::MIN_POSITIVE, f64::MAX, f64::MIN];
        cases.extend([5e-324, -5e-324, 1e-310, 0.1, 3.0, 1e300]);
        for _ in 0..20_000 {
            let x = f64::from_bits(next());
            if x.is_finite() {
                cases.push(x);
            }
            cases.push(f64::from(next() as u32 % 2000) - 1000.0 + x.fract().abs());
        }
        for x in cases.into_iter().filter(|x| x.is_finite()) {
            assert_eq!(F80::from_f64(x), slow(x), "{x:e}");
        }
    }

    /// An i64's long double is what rounding it through a `Big` makes.
    #[test]
    fn from_i64_matches_rounding_it() {
        let mut next = stream(5);
        let mut cases = vec![0, 1, -1, i64::MIN, i64::MAX, i64::MIN + 1, 1 << 62];
        cases.extend((0..20_000).map(|i| (next() as i64) >> (i % 64)));
        for n in cases {
            let slow = round(n < 0, Big::from_u64(n.unsigned_abs()), 0, false);
            assert_eq!(F80::from_i64(n), slow, "{n}");
        }
    }

    /// The 128-bit sum is the `Big` sum wherever it answers: every sign,
    /// exponents near and apart, carries and cancellations, denormals.
    #[test]
    fn narrow_sums_match_wide_ones() {
        let mut next = stream(11);
        let mut answered = 0;
        for i in 0..200_000 {
            let mant = |n: u64, r: u64| match n % 4 {
                0 => 1 << 63,
                1 => u64::MAX,
                2 => r | 1 << 63,
                _ => (r | 1 << 63) >> (n % 40),
            };
            let (ma, mb) = (mant(next(), next()), mant(next(), next()));
            let base = match i % 3 {
                0 => (next() % 200) as i64 - 100,
                1 => EMIN + (next() % 70) as i64,
                _ => EMAX - (next() % 70) as i64,
            };
            let eb = (base - (next() % 70) as i64).max(EMIN);
            let (na, nb) = (next() & 1 == 1, next() & 1 == 1);
            let (hi, lo) = ((na, ma, base), (nb, mb, eb));
            if let Some(r) = add_fin_narrow(hi, lo) {
                answered += 1;
                assert_eq!(r, add_fin_wide(hi, lo), "{hi:?} + {lo:?}");
            }
        }
        assert!(answered > 100_000, "{answered}");
    }

    #[test]
    fn doubles_round_trip_and_sums_round_to_nearest() {
        for x in [0.1, -2.5, 1e300, 5e-324, 123456789.123, -0.0, 3.0] {
            assert_eq!(F80::from_f64(x).to_f64().to_bits(), x.to_bits(), "{x}");
        }
        // Two doubles add exactly in 64 bits: rounding that sum gives the
        // double sum (ZINCRBY's on a lone node).
        let s = F80::from_f64(0.1).add(&F80::from_f64(0.2));
        assert_eq!(s.to_f64(), 0.1 + 0.2);
    }

    fn incr(a: &str, b: &str) -> String {
        let x = F80::parse(a.as_bytes()).unwrap();
        let y = F80::parse(b.as_bytes()).unwrap();
        x.add(&y).format_human()
    }

    #[test]
    fn matches_redis_long_double() {
        assert_eq!(incr("1", "-1.1"), "-0.1");
        assert_eq!(incr("10.5", "0.1"), "10.6");
        assert_eq!(incr("0", "3.0e3"), "3000");
        assert_eq!(incr("0", "1e20"), "100000000000000000000");
        assert_eq!(incr("0", "0x10"), "16");
        assert_eq!(incr("16", "1e-20"), "16");
        assert_eq!(incr("0", "5.0e-1"), "0.5");
        assert_eq!(incr("1.5", "-1.5"), "0");
        assert_eq!(incr("-0", "0"), "0");
        assert_eq!(incr("0.1", "0.2"), "0.3");
    }

    #[test]
    fn rejects_like_strtold() {
        for bad in [
            "", " 1", "1 ", "nan", "1e", "0x", ".", "abc", "1e5000", "1e-5000", "1.2.3",
        ] {
            assert!(F80::parse(bad.as_bytes()).is_none(), "{bad}");
        }
        assert_eq!(F80::parse(b"inf"), Some(F80::Inf(false)));
        assert!(F80::parse(b".5").is_some());
        assert!(F80::parse(b"5.").is_some());
        assert!(F80::parse(b"+5E+2").is_some());
    }
}
