//! Statistics fitted on the training split without libtorch: what `missing "median"`
//! fills a feature with.

/// The median of `values` leaving NaN out, as `nanquantile(0.5, "linear")` takes it (the
/// middle of the two middle values for an even count, as numpy, pandas and
/// scikit-learn's `SimpleImputer` do; `nanmedian` would take the lower): NaN when every
/// value is. By selection, in linear time.
pub fn nan_median(mut values: Vec<f32>) -> f32 {
    values.retain(|v| !v.is_nan());
    let m = values.len();
    if m == 0 {
        return f32::NAN;
    }
    let (lower, &mut high, _) = values.select_nth_unstable_by(m / 2, f32::total_cmp);
    if m % 2 == 1 {
        return high;
    }
    let low = lower.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    // torch's lerp at a weight of 0.5: the end less half the step.
    high - (high - low) * 0.5
}

#[cfg(test)]
mod tests {
    use super::nan_median;

    /// The median by sorting, as numpy takes it (the mean of the two middle values).
    fn sorted_median(values: &[f32]) -> f32 {
        let mut v: Vec<f32> = values.iter().copied().filter(|v| !v.is_nan()).collect();
        v.sort_by(f32::total_cmp);
        let m = v.len();
        match m % 2 {
            1 => v[m / 2],
            _ => (v[m / 2 - 1] + v[m / 2]) / 2.0,
        }
    }

    #[test]
    fn the_median_leaves_nan_out_and_takes_the_middle_of_an_even_count() {
        assert_eq!(nan_median(vec![3.0, f32::NAN, 1.0, 2.0]), 2.0);
        assert_eq!(nan_median(vec![4.0, 1.0, f32::NAN, 3.0, 2.0]), 2.5);
        assert!(nan_median(vec![f32::NAN, f32::NAN]).is_nan());
        assert!(nan_median(Vec::new()).is_nan());
        // Against sorting, on values with repeats and gaps.
        let mut state = 7u64;
        for n in 1..200 {
            let values: Vec<f32> = (0..n)
                .map(|_| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                    match state >> 60 {
                        0 => f32::NAN,
                        k => (k as f32 - 8.0) * 0.25 + (state >> 40 & 3) as f32,
                    }
                })
                .collect();
            if values.iter().all(|v| v.is_nan()) {
                continue;
            }
            assert_eq!(
                nan_median(values.clone()),
                sorted_median(&values),
                "{values:?}"
            );
        }
    }
}
