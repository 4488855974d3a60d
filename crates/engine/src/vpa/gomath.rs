//! Ports of the Go `math` functions whose last bit can change a VPA number: `Pow` (bucket
//! starts, confidence multipliers) and `Exp2` (decay factors), with the `Frexp`/`Ldexp` they
//! are built on (Go's own code on amd64: neither has an assembly version there). Go computes
//! integer powers by repeated squaring, which can differ by an ulp from a C `pow`, and the
//! estimators truncate, so an ulp can become one millicore.

/// Go's `math.Ldexp(frac, exp)` for the values `go_pow` produces.
pub(crate) fn ldexp(mut frac: f64, mut exp: i64) -> f64 {
    while exp > 1000 {
        frac *= 2f64.powi(1000);
        exp -= 1000;
        if frac.is_infinite() {
            return frac;
        }
    }
    while exp < -1000 {
        frac *= 2f64.powi(-1000);
        exp += 1000;
        if frac == 0.0 {
            return frac;
        }
    }
    frac * 2f64.powi(exp as i32)
}

/// Go's `math.Frexp`: `x = frac × 2^exp`, `frac` in [0.5, 1), for finite non-zero `x`.
pub(crate) fn frexp(x: f64) -> (f64, i64) {
    if x == 0.0 || !x.is_finite() {
        return (x, 0);
    }
    let mut exp = 0_i64;
    let mut f = x.abs();
    // Normalize subnormals first.
    if f < f64::MIN_POSITIVE {
        f *= 2f64.powi(64);
        exp -= 64;
    }
    let bits = f.to_bits();
    exp += ((bits >> 52) & 0x7ff) as i64 - 1022;
    let frac = f64::from_bits((bits & !(0x7ff << 52)) | (1022 << 52));
    (frac.copysign(x), exp)
}

/// `math.Pow` for an infinite `y`, and for a `y` whose integer part is beyond `1 << 63`
/// (Go answers both alike): 1 for `x = -1`, else 0 or +Inf as `|x|` and `y` pull.
fn huge_y(x: f64, y: f64) -> f64 {
    if x == -1.0 {
        1.0
    } else if (x.abs() < 1.0) == (y > 0.0) {
        0.0
    } else {
        f64::INFINITY
    }
}

/// Go's `math.Pow`, ported so that integer exponents (the recommender's +1 and −2) give the
/// same bits as upstream (repeated squaring, then `1 / a` for negative exponents); the
/// fractional part uses `exp(yf × ln x)` as Go does.
pub(crate) fn go_pow(x: f64, y: f64) -> f64 {
    if y == 0.0 || x == 1.0 {
        return 1.0;
    }
    if y == 1.0 {
        return x;
    }
    if x.is_nan() || y.is_nan() {
        return f64::NAN;
    }
    let is_odd_int = |v: f64| v.fract() == 0.0 && (v.abs() < 2f64.powi(53)) && (v as i64) & 1 == 1;
    if x == 0.0 {
        return if y < 0.0 {
            if x.is_sign_negative() && is_odd_int(y) {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            }
        } else if x.is_sign_negative() && is_odd_int(y) {
            x
        } else {
            0.0
        };
    }
    if y.is_infinite() {
        return huge_y(x, y);
    }
    if x.is_infinite() {
        if x < 0.0 {
            return go_pow(1.0 / x, -y);
        }
        return if y < 0.0 { 0.0 } else { f64::INFINITY };
    }
    if y == 0.5 {
        return x.sqrt();
    }
    if y == -0.5 {
        return 1.0 / x.sqrt();
    }
    let mut yi = y.abs().trunc();
    let mut yf = y.abs() - yi;
    if yf != 0.0 && x < 0.0 {
        return f64::NAN;
    }
    if yi >= 2f64.powi(63) {
        return huge_y(x, y);
    }
    let mut a1 = 1.0;
    let mut ae: i64 = 0;
    if yf != 0.0 {
        if yf > 0.5 {
            yf -= 1.0;
            yi += 1.0;
        }
        a1 = (yf * x.ln()).exp();
    }
    let (mut x1, mut xe) = frexp(x);
    let mut i = yi as i64;
    while i != 0 {
        if !(-(1 << 12)..=(1 << 12)).contains(&xe) {
            ae += xe;
            break;
        }
        if i & 1 == 1 {
            a1 *= x1;
            ae += xe;
        }
        x1 *= x1;
        xe <<= 1;
        if x1 < 0.5 {
            x1 += x1;
            xe -= 1;
        }
        i >>= 1;
    }
    if y < 0.0 {
        a1 = 1.0 / a1;
        ae = -ae;
    }
    ldexp(a1, ae)
}

/// Go's `math.Exp2` (`exp2` + `expmulti`, the FreeBSD algorithm): the decay factor
/// `2^((t − R) / H)` of every histogram sample. The constants are Go's, digit for digit.
#[allow(clippy::excessive_precision)]
pub(crate) fn go_exp2(x: f64) -> f64 {
    const LN2_HI: f64 = 6.931_471_803_691_238_164_90e-1;
    const LN2_LO: f64 = 1.908_214_929_270_587_700_02e-10;
    const OVERFLOW: f64 = 1.023_999_999_999_999_9e3;
    const UNDERFLOW: f64 = -1.074e3;
    if x.is_nan() || x == f64::INFINITY {
        return x;
    }
    if x == f64::NEG_INFINITY || x < UNDERFLOW {
        return 0.0;
    }
    if x > OVERFLOW {
        return f64::INFINITY;
    }
    let k: i64 = if x > 0.0 {
        (x + 0.5) as i64
    } else if x < 0.0 {
        (x - 0.5) as i64
    } else {
        0
    };
    let t = x - k as f64;
    let hi = t * LN2_HI;
    let lo = -t * LN2_LO;
    expmulti(hi, lo, k)
}

/// Go's `expmulti`: `e^(hi − lo) × 2^k`.
#[allow(clippy::excessive_precision)]
fn expmulti(hi: f64, lo: f64, k: i64) -> f64 {
    const P1: f64 = 1.666_666_666_666_666_574_15e-1;
    const P2: f64 = -2.777_777_777_701_559_338_42e-3;
    const P3: f64 = 6.613_756_321_437_934_361_17e-5;
    const P4: f64 = -1.653_390_220_546_525_153_90e-6;
    const P5: f64 = 4.138_136_797_057_238_460_39e-8;
    let r = hi - lo;
    let t = r * r;
    let c = r - t * (P1 + t * (P2 + t * (P3 + t * (P4 + t * P5))));
    let y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi);
    ldexp(y, k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_pow_matches_simple_cases() {
        assert_eq!(go_pow(3.0, 2.0), 9.0);
        assert_eq!(go_pow(2.0, -2.0), 0.25);
        assert_eq!(go_pow(f64::INFINITY, -2.0), 0.0);
        assert_eq!(go_pow(f64::INFINITY, 1.0), f64::INFINITY);
        assert!((go_pow(1.2, 1.5) - 1.2f64.powf(1.5)).abs() < 1e-15);
        assert!((go_pow(1.002, -2.0) - 1.0 / (1.002 * 1.002)).abs() < 1e-16);
    }

    #[test]
    fn go_exp2_is_within_an_ulp_of_libm() {
        assert_eq!(go_exp2(0.0), 1.0);
        assert_eq!(go_exp2(-1.0), 0.5);
        assert_eq!(go_exp2(10.0), 1024.0);
        assert_eq!(go_exp2(-2000.0), 0.0);
        for i in -1000..1000 {
            let x = f64::from(i) * 0.0997;
            let (a, b) = (go_exp2(x), x.exp2());
            assert!(
                (a - b).abs() <= 2.0 * f64::EPSILON * b,
                "exp2({x}): {a} vs {b}"
            );
        }
    }

    #[test]
    fn frexp_normalizes() {
        assert_eq!(frexp(8.0), (0.5, 4));
        assert_eq!(frexp(0.75), (0.75, 0));
    }
}
