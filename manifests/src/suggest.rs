//! "Did you mean …?": the closest known name to a misspelt one.

/// Edit distance between two strings (Levenshtein, by characters).
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The candidate closest to `name`, if it is close enough to be a likely typo.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let name_lower = name.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|c| (distance(&name_lower, &c.to_ascii_lowercase()), c))
        .filter(|(d, c)| *d <= (c.chars().count().max(name.chars().count()) / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// `did you mean `x`?`, or a list of what is allowed when nothing is close.
pub fn help_for<'a>(name: &str, what: &str, candidates: &[&'a str]) -> String {
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
        assert_eq!(closest("epocs", ["epochs", "batch-size"]), Some("epochs"));
        assert_eq!(closest("lr", ["lr", "momentum"]), Some("lr"));
        assert_eq!(closest("zzzzzz", ["epochs", "batch-size"]), None);
        assert_eq!(closest("adamm", ["sgd", "adam", "adamw"]), Some("adam"));
    }
}
