//! The few distribution functions the verdicts need: the standard normal CDF and quantile, and
//! Student's t quantile for 2–4 degrees of freedom (the t interval of 3–5 pairs). Quantiles are
//! found by bisection on closed-form CDFs, so no table can be mistyped.

/// The standard normal CDF, Φ(x) = erfc(−x/√2)/2.
pub fn normal_cdf(x: f64) -> f64 {
    0.5 * erfc(-x / std::f64::consts::SQRT_2)
}

/// The complementary error function, with a fractional error below 1.2e-7 everywhere
/// (the Chebyshev fit of Press et al., Numerical Recipes, 2nd ed., §6.2, `erfcc`).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98 + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

/// The p-quantile of the standard normal distribution (0 < p < 1).
pub fn normal_quantile(p: f64) -> f64 {
    bisect(normal_cdf, p, -40.0, 40.0)
}

/// The p-quantile of Student's t with `df` degrees of freedom, for df = 2, 3, 4 (closed-form
/// CDFs); larger df fall back to the normal quantile, which nothing here asks for.
pub fn t_quantile(df: usize, p: f64) -> f64 {
    let cdf: fn(f64) -> f64 = match df {
        2 => |t| 0.5 + t / (2.0 * (2.0 + t * t).sqrt()),
        3 => |t| {
            let u = t / 3f64.sqrt();
            0.5 + (u / (1.0 + u * u) + u.atan()) / std::f64::consts::PI
        },
        4 => |t| {
            let v = 1.0 + t * t / 4.0;
            0.5 + 0.375 * (t / v.sqrt()) * (1.0 - t * t / (12.0 * v))
        },
        _ => return normal_quantile(p),
    };
    bisect(cdf, p, -1e7, 1e7)
}

/// x with cdf(x) = p for an increasing cdf, by bisection on [lo, hi].
fn bisect(cdf: impl Fn(f64) -> f64, p: f64, mut lo: f64, mut hi: f64) -> f64 {
    if p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if p >= 1.0 {
        return f64::INFINITY;
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if cdf(mid) < p {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo < 1e-12 * (1.0 + mid.abs()) {
            break;
        }
    }
    0.5 * (lo + hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_values_match_the_tables() {
        assert!((normal_cdf(1.959_963_985) - 0.975).abs() < 1e-7);
        assert!((normal_cdf(0.0) - 0.5).abs() < 1e-7);
        assert!((normal_cdf(-3.0) - 0.001_349_898).abs() < 1e-8);
        assert!((normal_quantile(0.975) - 1.959_963_985).abs() < 1e-6);
        assert!((normal_quantile(0.8) - 0.841_621_234).abs() < 1e-6);
        assert!((normal_quantile(0.995) - 2.575_829_304).abs() < 1e-6);
        assert!((normal_quantile(1e-6) + 4.753_424_309).abs() < 1e-5);
    }

    #[test]
    fn t_quantiles_match_the_tables() {
        for (df, q975, q995) in
            [(2, 4.302_652_7, 9.924_843_2), (3, 3.182_446_3, 5.840_909_3), (4, 2.776_445_1, 4.604_094_9)]
        {
            assert!((t_quantile(df, 0.975) - q975).abs() < 1e-5, "df {df}");
            assert!((t_quantile(df, 0.995) - q995).abs() < 1e-5, "df {df}");
            assert!((t_quantile(df, 0.025) + q975).abs() < 1e-5, "df {df}");
        }
    }
}
