//! Turning libtorch errors into diagnostics a user can read.

use manifests::Diagnostic;
use tch::TchError;

/// The first meaningful line of a libtorch error, without the C++ backtrace that
/// follows "Exception raised from …".
pub fn short_message(err: &TchError) -> String {
    let text = match err {
        TchError::Torch(message) => message.clone(),
        other => other.to_string(),
    };
    let cut = text.find("Exception raised from").unwrap_or(text.len());
    text[..cut]
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("libtorch failed")
        .to_string()
}

/// A diagnostic for a libtorch failure while doing `what`.
pub fn torch_error(code: &'static str, what: &str, err: &TchError) -> Diagnostic {
    Diagnostic::error(code, format!("{what}: {}", short_message(err)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_first_line_only() {
        let err = TchError::Torch("mat1 and mat2 shapes cannot be multiplied (2x64 and 65x10)\nException raised from meta at /pytorch/aten/src/ATen/native/LinearAlgebra.cpp:195\nframe #0: c10::Error".into());
        assert_eq!(
            short_message(&err),
            "mat1 and mat2 shapes cannot be multiplied (2x64 and 65x10)"
        );
    }
}
