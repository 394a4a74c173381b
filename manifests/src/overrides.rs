//! `--set PATH=VALUE`: values given on the command line that replace (or add) a key of
//! the manifest before it is checked, so an overridden manifest is checked like a file.
//!
//! The first segment of PATH names a top-level section (`optimizer.lr`), a stage by its
//! name (`finetune.epochs`), or a stage kind when exactly one stage has it
//! (`train.epochs`). A section that takes a positional argument can be set directly:
//! `optimizer=sgd`, `seed=7`.

use std::fmt;

/// One `--set PATH=VALUE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    pub path: Vec<String>,
    pub value: String,
}

impl Override {
    /// Parses `a.b.c=value`.
    pub fn parse(text: &str) -> Result<Override, String> {
        let (path, value) = text
            .split_once('=')
            .ok_or_else(|| format!("`{text}` is not PATH=VALUE (for example optimizer.lr=3e-4)"))?;
        let path: Vec<String> = path
            .trim()
            .split('.')
            .map(|s| s.trim().to_string())
            .collect();
        if path.iter().any(String::is_empty) {
            return Err(format!("`{text}`: the path has an empty segment"));
        }
        Ok(Override {
            path,
            value: value.trim().to_string(),
        })
    }
}

impl fmt::Display for Override {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.path.join("."), self.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_paths_and_values() {
        let o = Override::parse("optimizer.lr=3e-4").unwrap();
        assert_eq!(o.path, ["optimizer", "lr"]);
        assert_eq!(o.value, "3e-4");
        assert_eq!(o.to_string(), "optimizer.lr=3e-4");
        assert!(Override::parse("optimizer.lr").is_err());
        assert!(Override::parse("a..b=1").is_err());
    }
}
