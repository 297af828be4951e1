//! The few distribution functions the verdicts need: the standard normal CDF and quantile, and
//! Student's t quantile for 2–4 degrees of freedom (the t interval of 3–5 pairs). Quantiles are
//! found by bisection on closed-form CDFs, so no table can be mistyped. The change points of a
//! history ([`super::change_points`]) need Student's t tail for any real degrees of freedom
//! (Welch's test): [`t_two_sided_p`], from the regularized incomplete beta function.

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

/// P(|T| ≥ |t|) for Student's t with `df` > 0 degrees of freedom (not necessarily whole, as
/// Welch's test gives them): I_{df/(df+t²)}(df/2, 1/2), the regularized incomplete beta function
/// (Abramowitz & Stegun 26.7.1 with 26.5.27).
pub fn t_two_sided_p(t: f64, df: f64) -> f64 {
    if t.is_nan() || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    if t.is_infinite() {
        return 0.0;
    }
    incomplete_beta(df / 2.0, 0.5, df / (df + t * t)).clamp(0.0, 1.0)
}

/// The regularized incomplete beta function I_x(a, b) for a, b > 0 and 0 ≤ x ≤ 1: the
/// continued fraction of A&S 26.5.8, evaluated by the modified Lentz method, on whichever of
/// I_x(a, b) = 1 − I_{1−x}(b, a) converges fast (x below (a + 1)/(a + b + 2)).
fn incomplete_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    if x > (a + 1.0) / (a + b + 2.0) {
        return 1.0 - incomplete_beta(b, a, 1.0 - x);
    }
    let front = (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp();
    front * beta_fraction(a, b, x) / a
}

/// The continued fraction 1/(1 + d₁/(1 + d₂/(1 + …))) of A&S 26.5.8, with
/// d₂ₘ₊₁ = −(a + m)(a + b + m)x / ((a + 2m)(a + 2m + 1)) and d₂ₘ = m(b − m)x / ((a + 2m − 1)(a + 2m)).
fn beta_fraction(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let nonzero = |v: f64| if v.abs() < TINY { TINY } else { v };
    let mut c = 1.0;
    let mut d = 1.0 / nonzero(1.0 - (a + b) * x / (a + 1.0));
    let mut h = d;
    for m in 1..=500 {
        let m = f64::from(m);
        let even = m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m));
        d = 1.0 / nonzero(1.0 + even * d);
        c = nonzero(1.0 + even / c);
        h *= d * c;
        let odd = -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0));
        d = 1.0 / nonzero(1.0 + odd * d);
        c = nonzero(1.0 + odd / c);
        let step = d * c;
        h *= step;
        if (step - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

/// ln Γ(x) for x > 0: Lanczos's approximation with g = 7 and nine terms (relative error below
/// 1e-13 for x ≥ 0.5), and the reflection formula below 0.5.
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const TERMS: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let series = TERMS[1..].iter().enumerate().fold(TERMS[0], |sum, (i, c)| sum + c / (x + i as f64 + 1.0));
    let t = x + G + 0.5;
    0.5 * (std::f64::consts::TAU).ln() + (x + 0.5) * t.ln() - t + series.ln()
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
    fn t_tails_match_the_tables_and_the_closed_forms() {
        // Two-sided 5 % and 1 % points of the t tables, whole and not.
        for (t, df, p) in [
            (12.706_204_7, 1.0, 0.05),
            (4.302_652_7, 2.0, 0.05),
            (2.228_138_9, 10.0, 0.05),
            (3.169_272_7, 10.0, 0.01),
            (2.042_272_5, 30.0, 0.05),
            (1.959_963_985, 1e9, 0.05),
        ] {
            let got = t_two_sided_p(t, df);
            assert!((got - p).abs() < 1e-6 * p.max(1e-3) * 100.0, "t {t}, df {df}: {got}");
            assert!((t_two_sided_p(-t, df) - got).abs() < 1e-15, "symmetric");
        }
        // df = 2 has a closed form at any t: 1 − t/√(2 + t²); df = 1 is Cauchy's, 1 − 2 atan(t)/π.
        for t in [0.0, 0.3, 1.0, 2.5, 7.0, 40.0] {
            assert!((t_two_sided_p(t, 2.0) - (1.0 - t / (2.0 + t * t).sqrt())).abs() < 1e-12, "t {t}");
            let cauchy = 1.0 - 2.0 * f64::atan(t) / std::f64::consts::PI;
            assert!((t_two_sided_p(t, 1.0) - cauchy).abs() < 1e-12, "t {t}");
        }
        // Far tails stay accurate relatively (a p-value of 1e-9 is not rounded to 0), and the
        // p-value falls as |t| grows, for a non-whole df too.
        let far = t_two_sided_p(20.0, 10.0);
        assert!(far > 2e-9 && far < 3e-9, "{far}");
        let ps: Vec<f64> = (0..60).map(|i| t_two_sided_p(f64::from(i) * 0.25, 7.3)).collect();
        assert!(ps.windows(2).all(|w| w[1] < w[0]) && ps[0] == 1.0, "{ps:?}");
        assert_eq!(t_two_sided_p(f64::INFINITY, 3.0), 0.0);
        assert!(t_two_sided_p(1.0, 0.0).is_nan());
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
