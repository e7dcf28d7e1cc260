//! Statistics of repeated measurements (`fetchbench run --repeat N`, `fetchbench compare`).
//!
//! - [`estimate`]: the sample mean, the sample standard deviation (n - 1 in the denominator),
//!   a 95% confidence interval of the mean by Student's t with n - 1 degrees of freedom
//!   (`mean ± t(0.975, n-1) · s / √n`) and the coefficient of variation `s / mean`.
//! - [`welch`]: Welch's unequal-variances t-test of two samples, with the Welch–Satterthwaite
//!   degrees of freedom `(s1²/n1 + s2²/n2)² / ((s1²/n1)²/(n1-1) + (s2²/n2)²/(n2-1))`, and its
//!   one-sided p-values (B. L. Welch, "The generalization of Student's problem when several
//!   different population variances are involved", Biometrika 34, 1947; as `scipy.stats.ttest_ind`
//!   with `equal_var=False` and R's `t.test`).
//!
//! The t distribution (quantile and CDF, through the regularized incomplete beta function) is
//! `statrs`'s [`StudentsT`].
//!
//! Every figure the harness repeats is non-negative (throughput, CPU per GB, latency, ratios):
//! a lower interval bound below 0 — possible for a tiny sample with a large spread — is
//! clamped to 0, so results files keep "every number is non-negative".

use statrs::distribution::{ContinuousCDF, StudentsT};

/// The summary of one sample of a figure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// Number of values.
    pub samples: usize,
    /// Arithmetic mean (NaN for no values).
    pub mean: f64,
    /// Sample standard deviation (n - 1); `None` below 2 values.
    pub stddev: Option<f64>,
    /// 95% confidence interval of the mean (Student's t, n - 1 degrees of freedom), the lower
    /// bound clamped to 0; `None` below 2 values.
    pub ci95: Option<(f64, f64)>,
    /// Coefficient of variation, `stddev / mean`; `None` below 2 values or for a mean of 0.
    pub cv: Option<f64>,
}

impl Estimate {
    /// Half the width of the confidence interval before clamping (`t · s / √n`), `None` below
    /// 2 values.
    pub fn half_width(&self) -> Option<f64> {
        self.stddev.map(|s| t_quantile(0.975, (self.samples - 1) as f64) * s / (self.samples as f64).sqrt())
    }
}

/// The [`Estimate`] of `values` (finite numbers; see the module docs for the formulas).
pub(crate) fn estimate(values: &[f64]) -> Estimate {
    let n = values.len();
    let mean = values.iter().sum::<f64>() / n as f64;
    if n < 2 {
        return Estimate { samples: n, mean, stddev: None, ci95: None, cv: None };
    }
    let var = values.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let stddev = var.sqrt();
    let half = t_quantile(0.975, (n - 1) as f64) * stddev / (n as f64).sqrt();
    Estimate {
        samples: n,
        mean,
        stddev: Some(stddev),
        ci95: Some(((mean - half).max(0.0), mean + half)),
        cv: (mean != 0.0).then(|| stddev / mean.abs()),
    }
}

/// The `p` quantile of Student's t distribution with `df` degrees of freedom (`df > 0`,
/// `0 < p < 1`), e.g. `t_quantile(0.975, 4.0)` = 2.776.
pub(crate) fn t_quantile(p: f64, df: f64) -> f64 {
    StudentsT::new(0.0, 1.0, df).expect("df > 0").inverse_cdf(p)
}

/// The outcome of [`welch`]: `t = (mean_b - mean_a) / √(s_a²/n_a + s_b²/n_b)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Welch {
    /// The t statistic (infinite when both samples have no spread and the means differ).
    pub t: f64,
    /// Welch–Satterthwaite degrees of freedom (`None` when both samples have no spread).
    pub df: Option<f64>,
    /// One-sided p-value of "the mean of `b` is below that of `a`".
    pub p_lower: f64,
    /// One-sided p-value of "the mean of `b` is above that of `a`".
    pub p_higher: f64,
}

/// Welch's t-test of sample `b` against sample `a` (see the module docs); `None` unless both
/// have at least 2 values. Two samples without spread: p = 0 in the direction the mean moved,
/// 1 in the other (and 1 both ways when the means are equal).
pub(crate) fn welch(a: &[f64], b: &[f64]) -> Option<Welch> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let (ea, eb) = (estimate(a), estimate(b));
    let va = ea.stddev?.powi(2) / a.len() as f64;
    let vb = eb.stddev?.powi(2) / b.len() as f64;
    let diff = eb.mean - ea.mean;
    let se2 = va + vb;
    if se2 == 0.0 {
        let (lower, higher) = (diff < 0.0, diff > 0.0);
        return Some(Welch {
            t: if diff == 0.0 { 0.0 } else { diff.signum() * f64::INFINITY },
            df: None,
            p_lower: if lower { 0.0 } else { 1.0 },
            p_higher: if higher { 0.0 } else { 1.0 },
        });
    }
    let t = diff / se2.sqrt();
    let df = se2.powi(2) / (va.powi(2) / (a.len() - 1) as f64 + vb.powi(2) / (b.len() - 1) as f64);
    let dist = StudentsT::new(0.0, 1.0, df).expect("df > 0");
    Some(Welch { t, df: Some(df), p_lower: dist.cdf(t), p_higher: dist.sf(t) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn t_quantiles_match_the_tables() {
        // Student's t table, two-sided 95% (NIST/SEMATECH e-Handbook 1.3.6.7.2); scipy
        // stats.t.ppf(0.975, 4) = 2.7764451, stats.t.ppf(0.975, 7) = 2.3646243.
        for (df, t) in [(1.0, 12.706), (2.0, 4.303), (4.0, 2.776), (9.0, 2.262), (29.0, 2.045)] {
            assert!(close(t_quantile(0.975, df), t, 1e-3), "df {df}: {}", t_quantile(0.975, df));
        }
        assert!(close(t_quantile(0.975, 4.0), 2.7764451, 1e-6));
        assert!(close(t_quantile(0.975, 7.0), 2.3646243, 1e-6));
    }

    #[test]
    fn estimates_of_known_samples() {
        // 2, 4, 4, 4, 5, 5, 7, 9: mean 5, sample sd sqrt(32/7) = 2.138.
        let e = estimate(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!(e.samples, 8);
        assert!(close(e.mean, 5.0, 1e-12));
        assert!(close(e.stddev.unwrap(), (32.0f64 / 7.0).sqrt(), 1e-12));
        // t(0.975, 7) = 2.3646: half width 2.3646 * 2.138 / sqrt(8) = 1.7874.
        let (lo, hi) = e.ci95.unwrap();
        assert!(close(lo, 5.0 - 1.7874, 1e-3) && close(hi, 5.0 + 1.7874, 1e-3), "{lo} {hi}");
        assert!(close(e.cv.unwrap(), (32.0f64 / 7.0).sqrt() / 5.0, 1e-12));
        assert!(close(e.half_width().unwrap(), 1.7874, 1e-3));
        // One value: a mean, no spread.
        let one = estimate(&[3.5]);
        assert_eq!((one.mean, one.stddev, one.ci95, one.cv), (3.5, None, None, None));
        // No spread: a zero-width interval, cv 0.
        let flat = estimate(&[2.0, 2.0, 2.0]);
        assert_eq!((flat.ci95, flat.cv), (Some((2.0, 2.0)), Some(0.0)));
        // A wide spread around a small mean: the lower bound is clamped to 0.
        let wide = estimate(&[0.1, 5.0]);
        assert_eq!(wide.ci95.unwrap().0, 0.0);
        assert!(wide.ci95.unwrap().1 > 5.0);
        assert_eq!(estimate(&[0.0, 0.0]).cv, None, "no cv for a mean of 0");
    }

    #[test]
    fn welch_matches_scipy() {
        // scipy 1.x: stats.ttest_ind(b, a, equal_var=False, alternative="less") for
        // a = [20.1, 19.8, 20.5, 20.0, 19.6], b = [19.0, 19.4, 18.7, 19.6, 18.9] gives
        // t = -3.919832, df = 7.939489, p = 0.0022429. By hand: means 20.0 and 19.12, sample
        // variances 0.115 and 0.137.
        let a = [20.1, 19.8, 20.5, 20.0, 19.6];
        let b = [19.0, 19.4, 18.7, 19.6, 18.9];
        let w = welch(&a, &b).unwrap();
        let (ma, mb) = (20.0, 19.12);
        let (va, vb) = (0.115 / 5.0, 0.137 / 5.0);
        let t = (mb - ma) / f64::sqrt(va + vb);
        let df = (va + vb) * (va + vb) / (va * va / 4.0 + vb * vb / 4.0);
        assert!(close(w.t, t, 1e-9) && close(w.df.unwrap(), df, 1e-9), "{w:?}");
        assert!(close(w.t, -3.919832, 1e-6) && close(df, 7.939489, 1e-6), "{w:?}");
        assert!(close(w.p_lower, 0.0022429, 1e-6), "{w:?}");
        assert!(close(w.p_lower + w.p_higher, 1.0, 1e-12));
        assert!(welch(&a, &[1.0]).is_none());
        // No spread on either side.
        let flat = welch(&[1.0, 1.0], &[2.0, 2.0]).unwrap();
        assert_eq!((flat.p_lower, flat.p_higher, flat.df), (1.0, 0.0, None));
        let same = welch(&[1.0, 1.0], &[1.0, 1.0]).unwrap();
        assert_eq!((same.p_lower, same.p_higher, same.t), (1.0, 1.0, 0.0));
    }
}
