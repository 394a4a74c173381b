//! Inputs a manifest names by URL (`train { init "s3://bucket/models/base.safetensors" }`),
//! fetched before a run plans: each is copied once into the local cache's `downloads/`,
//! and fetched again only when the object's version (S3's ETag and size) changed. The
//! manifest keeps the URL (so a stage's key is the same on every machine) and resolves
//! it to the copy; the copy's content is what the key hashes, as for a local file.

use crate::cli::CacheDir;
use crate::prepare;
use manifests::{Diagnostic, Manifest};
use std::fs;
use std::path::{Path, PathBuf};

/// Fetches every input of `manifest` named by URL, and records where each copy is.
pub fn fetch_inputs(manifest: &mut Manifest, cache: &CacheDir) -> Result<(), Diagnostic> {
    let wanted: Vec<_> = manifest
        .stages
        .iter()
        .filter_map(|stage| pipeline_core::stages::member(&stage.config).own_input())
        .filter(|own| own.may_be_url && cache::io::is_url(&own.path.value.to_string_lossy()))
        .map(|own| (own.role, own.path.clone()))
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let store = cache::Store::new(prepare::cache_root(cache, &manifest.base_dir));
    for (role, init) in wanted {
        let url = init.value.to_string_lossy().into_owned();
        let copy = fetch(&store, &url).map_err(|why| {
            Diagnostic::error(
                "pipeline::train::init_unavailable",
                format!("cannot fetch {role} {url}: {why}"),
            )
            .label_opt(init.span, "fetched from here")
            .help("check the URL, the endpoint and the credentials (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)")
        })?;
        manifest.fetched.insert(init.value.clone(), copy);
    }
    Ok(())
}

/// The local copy of the object at `url`, in `store`'s `downloads/`: the one there when
/// its recorded version is the object's, else a new one (written whole, then renamed).
fn fetch(store: &cache::Store, url: &str) -> Result<PathBuf, String> {
    let (parent, name) =
        cache::io::split_object(url).ok_or("it names no object (write `s3://bucket/key`)")?;
    let io = cache::io::open(parent).map_err(|e| e.to_string())?;
    let version = io
        .version(name)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("there is no object {name} in {}", io.describe()))?;
    store.ensure_root().map_err(|e| e.to_string())?;
    let dir = store
        .root()
        .join("downloads")
        .join(&cache::hash_bytes(url.as_bytes())[..16]);
    let file_name = Path::new(name).file_name().unwrap_or_default();
    let copy = dir.join(file_name);
    let recorded = dir.join("version");
    if copy.is_file() && fs::read_to_string(&recorded).is_ok_and(|v| v == version) {
        return Ok(copy);
    }
    let local = |e: std::io::Error| format!("cannot write {}: {e}", dir.display());
    fs::create_dir_all(&dir).map_err(local)?;
    let temp = dir.join(format!(".download.{}", std::process::id()));
    let fetched = (|| {
        let mut file = fs::File::create(&temp).map_err(local)?;
        if !io.read(name, &mut file).map_err(|e| e.to_string())? {
            return Err(format!("there is no object {name} in {}", io.describe()));
        }
        file.sync_all().map_err(local)?;
        fs::rename(&temp, &copy).map_err(local)?;
        cache::write_atomic(&recorded, version.as_bytes()).map_err(local)
    })();
    if fetched.is_err() {
        let _ = fs::remove_file(&temp);
    }
    fetched.map(|()| copy)
}
