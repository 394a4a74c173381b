//! What `check` can tell of a `torchscript` model without libtorch: that the file exists
//! and is a TorchScript archive, from its table of contents alone.
//!
//! `torch.jit.save` writes a zip holding `<name>/code/…` (the module's TorchScript
//! source) and `<name>/constants.pkl`. `torch.save` of a module or a state dict writes a
//! zip too, with pickled Python objects and no code, which libtorch cannot run; before
//! PyTorch 1.6 (or with `_use_new_zipfile_serialization=False`) it wrote a bare pickle.
//! Both are refused with the help a user needs: script or trace the module.

use crate::freshness::missing_input;
use manifests::{Diagnostic, Manifest, TorchScriptSpec};
use std::fs::File;
use std::io::Read;
use std::path::Path;

/// What a file given as a TorchScript model is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Archive {
    TorchScript,
    /// A zip written by `torch.save` (a pickled module or state dict).
    TorchSave,
    /// A bare pickle: `torch.save` in its legacy format.
    Pickle,
    /// Anything else, and why.
    Other(String),
}

/// Reads the table of contents of the file at `path`.
pub fn classify(path: &Path) -> std::io::Result<Archive> {
    let mut file = File::open(path)?;
    let mut magic = [0u8; 4];
    let n = file.read(&mut magic)?;
    if n >= 2 && magic[0] == 0x80 && (2..=5).contains(&magic[1]) {
        return Ok(Archive::Pickle);
    }
    if magic[..n] != *b"PK\x03\x04" {
        return Ok(Archive::Other("not a zip archive".to_string()));
    }
    let zip = match zip::ZipArchive::new(file) {
        Ok(zip) => zip,
        Err(e) => return Ok(Archive::Other(format!("a damaged zip archive ({e})"))),
    };
    let names: Vec<&str> = zip.file_names().collect();
    // Every entry sits under one directory, the archive's name.
    let has = |suffix: &str| {
        names.iter().any(|n| {
            n.split_once('/')
                .is_some_and(|(_, rest)| rest.starts_with(suffix))
        })
    };
    Ok(if has("code/") && has("constants.pkl") {
        Archive::TorchScript
    } else if has("data.pkl") {
        Archive::TorchSave
    } else {
        Archive::Other("a zip archive without TorchScript code".to_string())
    })
}

/// The diagnostic for a TorchScript model file that is not one (`None`: it is), located
/// at the path in the manifest.
pub fn refusal(spec: &TorchScriptSpec) -> Option<Diagnostic> {
    refusal_of(spec, Module::Model)
}

/// What a TorchScript file is to the manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Module {
    Model,
    Loss,
    Metric,
    Schedule,
}

/// [`refusal`] for a model or a loss.
pub fn refusal_of(spec: &TorchScriptSpec, module: Module) -> Option<Diagnostic> {
    let file = &spec.file;
    let shown = spec.path.value.display();
    let (code, example, name) = match module {
        Module::Model => ("pipeline::model::not_torchscript", "model", "net.pt"),
        Module::Loss => ("pipeline::loss::not_torchscript", "loss", "loss.pt"),
        Module::Metric => ("pipeline::metric::not_torchscript", "metric", "metric.pt"),
        Module::Schedule => ("pipeline::schedule::not_torchscript", "schedule", "lr.pt"),
    };
    let script = format!(
        "script or trace the module in Python and save that: \
         `torch.jit.script({example}).save(\"{name}\")`, or \
         `torch.jit.trace({example}, example_batch).save(\"{name}\")`"
    );
    let (what, help) = match classify(file) {
        Ok(Archive::TorchScript) => return None,
        Ok(Archive::TorchSave) => (
            "a `torch.save` file (a pickled module or state dict), not TorchScript".to_string(),
            match module {
                Module::Model => format!("{script}; to start a native model from saved weights, use `train {{ init \"weights.safetensors\" }}`"),
                Module::Loss | Module::Metric | Module::Schedule => script,
            },
        ),
        Ok(Archive::Pickle) => (
            "a pickle (`torch.save` in its legacy format), not TorchScript".to_string(),
            script,
        ),
        Ok(Archive::Other(why)) => (format!("{why}, not TorchScript"), script),
        Err(e) => (format!("cannot be read: {e}"), "check the file's permissions".to_string()),
    };
    Some(
        Diagnostic::error(code, format!("the {example} {shown} is {what}"))
            .label_opt(spec.path.span, "not a TorchScript archive")
            .help(help),
    )
}

/// `check`'s rule: a `torchscript` model, loss, schedule or metric names an existing TorchScript
/// archive (a path that is not a regular file is reported with the other inputs).
pub fn check(manifest: &Manifest) -> Vec<Diagnostic> {
    let model = manifest
        .model
        .torchscript
        .as_ref()
        .map(|s| (s, Module::Model, "model".to_string()));
    let loss = manifest
        .loss
        .kind
        .script()
        .map(|s| (s, Module::Loss, "loss".to_string()));
    let metrics = manifest.metrics.iter().map(|m| {
        (
            &m.script,
            Module::Metric,
            crate::fingerprint::metric_role(&m.name.value),
        )
    });
    let schedule = manifest
        .schedule
        .script
        .as_ref()
        .map(|s| (s, Module::Schedule, "schedule".to_string()));
    model
        .into_iter()
        .chain(loss)
        .chain(schedule)
        .chain(metrics)
        .filter_map(
            |(spec, module, role)| match cache::require_regular(&spec.file) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    Some(missing_input(manifest, &role, &spec.file, None))
                }
                Err(_) => None,
                Ok(_) => refusal_of(spec, module),
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn zip_with(path: &Path, names: &[&str]) {
        let mut w = zip::ZipWriter::new(File::create(path).unwrap());
        for name in names {
            w.start_file(
                *name,
                zip::write::FileOptions::default()
                    .compression_method(zip::CompressionMethod::Stored),
            )
            .unwrap();
            w.write_all(b"x").unwrap();
        }
        w.finish().unwrap();
    }

    #[test]
    fn tells_torchscript_from_torch_save_and_pickles() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("s.pt");
        zip_with(
            &script,
            &[
                "s/data.pkl",
                "s/code/__torch__/m.py",
                "s/constants.pkl",
                "s/version",
            ],
        );
        assert_eq!(classify(&script).unwrap(), Archive::TorchScript);
        let saved = dir.path().join("p.pt");
        zip_with(&saved, &["p/data.pkl", "p/data/0", "p/version"]);
        assert_eq!(classify(&saved).unwrap(), Archive::TorchSave);
        let pickle = dir.path().join("l.pt");
        std::fs::write(&pickle, b"\x80\x02\x8a\x0al\xfc\x9cF").unwrap();
        assert_eq!(classify(&pickle).unwrap(), Archive::Pickle);
        let text = dir.path().join("t.pt");
        std::fs::write(&text, b"hello").unwrap();
        assert!(matches!(classify(&text).unwrap(), Archive::Other(_)));
        let cut = dir.path().join("cut.pt");
        let bytes = std::fs::read(&script).unwrap();
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
        assert!(matches!(classify(&cut).unwrap(), Archive::Other(why) if why.contains("damaged")));
    }
}
