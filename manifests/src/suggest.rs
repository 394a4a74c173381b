//! "Did you mean …?": the closest known name to a misspelt one.

/// Edit distance between two strings, counting a swap of two neighbouring characters
/// as one edit (optimal string alignment), since `tset` for `test` is one slip.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    d[0] = (0..=b.len()).collect();
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

/// The candidate closest to `name`, if it is close enough to be a likely typo.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let name_lower = name.to_ascii_lowercase();
    let len = name.chars().count();
    candidates
        .into_iter()
        // The distance is at least the difference in length: a name much longer than
        // every candidate (a pasted paragraph) costs nothing to turn down.
        .filter(|c| {
            let c_len = c.chars().count();
            c_len.abs_diff(len) <= (c_len.max(len) / 3).max(1)
        })
        .map(|c| (distance(&name_lower, &c.to_ascii_lowercase()), c))
        .filter(|(d, c)| *d <= (c.chars().count().max(len) / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// `did you mean `x`?`, or a list of what is allowed when nothing is close.
pub fn help_for(name: &str, what: &str, candidates: &[&str]) -> String {
    match closest(name, candidates.iter().copied()) {
        Some(c) => format!("did you mean `{c}`?"),
        None if candidates.is_empty() => format!("there is no {what} here"),
        None => format!(
            "expected one of: {}",
            candidates
                .iter()
                .map(|c| format!("`{c}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_typos_but_not_unrelated_words() {
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("tset", "test"), 1);
        assert_eq!(closest("epocs", ["epochs", "batch-size"]), Some("epochs"));
        assert_eq!(closest("lr", ["lr", "momentum"]), Some("lr"));
        assert_eq!(closest("zzzzzz", ["epochs", "batch-size"]), None);
        assert_eq!(closest("adamm", ["sgd", "adam", "adamw"]), Some("adam"));
        assert_eq!(closest(&"x".repeat(100_000), ["epochs"]), None);
    }
}
