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

/// The most names a list in one message shows; the others are counted, so that a
/// diagnostic stays small whatever the manifest (a thousand stage names are not listed
/// in each of a thousand messages).
pub const LISTED: usize = 20;

/// `` `a`, `b`, `c` ``: the first [`LISTED`] of `names`, then `and K more` when there are
/// others.
pub fn listing<S: AsRef<str>>(names: &[S]) -> String {
    listing_of(names.iter().map(AsRef::as_ref), names.len())
}

/// [`listing`] of `names`, which are `count` in all (only the first [`LISTED`] are taken
/// from the iterator, so a long list costs nothing past them).
pub fn listing_of<'a>(names: impl IntoIterator<Item = &'a str>, count: usize) -> String {
    let mut shown: Vec<String> = names
        .into_iter()
        .take(LISTED)
        .map(|n| format!("`{n}`"))
        .collect();
    if count > shown.len() {
        shown.push(format!("and {} more", count - shown.len()));
    }
    shown.join(", ")
}

/// `did you mean `x`?`, or a list of what is allowed when nothing is close (at most
/// [`LISTED`] of them).
pub fn help_for(name: &str, what: &str, candidates: &[&str]) -> String {
    match closest(name, candidates.iter().copied()) {
        Some(c) => format!("did you mean `{c}`?"),
        None if candidates.is_empty() => format!("there is no {what} here"),
        None => format!("expected one of: {}", listing(candidates)),
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

    #[test]
    fn a_long_list_shows_its_first_names_and_counts_the_rest() {
        assert_eq!(listing(&["a", "b"]), "`a`, `b`");
        let names: Vec<String> = (0..1000).map(|i| format!("s{i}")).collect();
        let shown = listing(&names);
        assert!(shown.starts_with("`s0`, `s1`, "), "{shown}");
        assert!(shown.ends_with("`s19`, and 980 more"), "{shown}");
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let help = help_for("zzzzzzzz", "stage", &refs);
        assert!(help.ends_with("and 980 more"), "{help}");
    }
}
