//! Kubernetes resource quantities (`500m`, `2`, `1.5`, `1Gi`, `128974848`, `129e6`, `123Mi`)
//! as integer milli-units, exactly `resource.Quantity.MilliValue()`
//! (k8s.io/apimachinery `pkg/api/resource/quantity.go`: `ParseQuantity`, then
//! `ScaledValue(Milli)`, which rounds a fraction of a milli-unit up, away from zero).
//!
//! Only the command-line client reads quantities: the wire stays integer milli-units.

use thiserror::Error;

/// Why a string is not a Kubernetes quantity.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum QuantityError {
    #[error(
        "invalid quantity {0:?}: expected a number with an optional suffix (n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent like e3)"
    )]
    /// Not a number with a suffix.
    Syntax(String),
    /// Beyond what an `i64` of milli-units holds.
    #[error("quantity {0:?} is out of range")]
    Range(String),
}

/// The quantity `text` in milli-units (`"500m"` -> 500, `"2"` -> 2000, `"1Ki"` -> 1024000).
pub fn parse_milli(text: &str) -> Result<i64, QuantityError> {
    let syntax = || QuantityError::Syntax(text.to_owned());
    let range = || QuantityError::Range(text.to_owned());
    let s = text.trim();
    if s.is_empty() || s.len() > 64 {
        return Err(syntax());
    }
    let (negative, s) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    // The number: digits, optionally a point and more digits (at least one digit overall).
    let number_len = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_len);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err(syntax());
    }
    // mantissa × 10^exp10 × 2^exp2, in units.
    let mut mantissa: i128 = 0;
    for digit in whole.bytes().chain(fraction.bytes()) {
        mantissa = mantissa
            .checked_mul(10)
            .and_then(|m| m.checked_add(i128::from(digit - b'0')))
            .ok_or_else(range)?;
    }
    let mut exp10: i32 = -(fraction.len() as i32);
    let mut exp2: u32 = 0;
    match suffix {
        "" => {}
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        "Ki" => exp2 = 10,
        "Mi" => exp2 = 20,
        "Gi" => exp2 = 30,
        "Ti" => exp2 = 40,
        "Pi" => exp2 = 50,
        "Ei" => exp2 = 60,
        _ => {
            let exponent = suffix
                .strip_prefix(['e', 'E'])
                .filter(|e| !e.is_empty())
                .ok_or_else(syntax)?;
            let exponent: i32 = exponent.parse().map_err(|_| syntax())?;
            if !(-100..=100).contains(&exponent) {
                return Err(range());
            }
            exp10 += exponent;
        }
    }
    // To milli-units.
    exp10 += 3;
    let mut value = mantissa.checked_shl(exp2).ok_or_else(range)?;
    if exp2 > 0 && value >> exp2 != mantissa {
        return Err(range());
    }
    if exp10 >= 0 {
        for _ in 0..exp10 {
            value = value.checked_mul(10).ok_or_else(range)?;
        }
    } else {
        let mut divisor: i128 = 1;
        for _ in 0..(-exp10) {
            divisor = divisor.saturating_mul(10);
        }
        // Rounded up, as ScaledValue does.
        value = value / divisor + i128::from(value % divisor != 0);
    }
    let value = if negative { -value } else { value };
    i64::try_from(value).map_err(|_| range())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_quantities_in_milli_units() {
        for (text, milli) in [
            ("500m", 500),
            ("2", 2000),
            ("0.5", 500),
            (".5", 500),
            ("1.5", 1500),
            ("100", 100_000),
            ("1k", 1_000_000),
            ("1Ki", 1_024_000),
            ("1Gi", 1_073_741_824_000),
            ("128974848", 128_974_848_000),
            ("129e6", 129_000_000_000),
            ("129M", 129_000_000_000),
            ("123Mi", 128_974_848_000),
            ("1u", 1),
            ("1n", 1),
            ("0", 0),
            ("-250m", -250),
            ("+3", 3000),
        ] {
            assert_eq!(parse_milli(text), Ok(milli), "{text}");
        }
    }

    #[test]
    fn malformed_or_huge_quantities_are_errors() {
        for text in [
            "", "m", "5OOm", "1.2.3", "1GB", "1e", "one", "1 Gi", "1e400",
        ] {
            assert!(parse_milli(text).is_err(), "{text}");
        }
        assert!(matches!(parse_milli("9Ei"), Err(QuantityError::Range(_))));
    }
}
