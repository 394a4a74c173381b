//! End-to-end tests of image data with the real binary: the digits written as PNG files
//! (scripts/setup.sh) in an ImageFolder tree and a CSV listing, trained to the example's
//! accuracy; augmentation that resumes bit for bit after kill -9; the image set's hash;
//! every way an image or a folder can be wrong, named before training. And the transforms
//! against torchvision's own (in the project's torch venv), pixel for pixel.

use crate::common;

use crate::common::{
    assert_fixture, checkpoint_metadata, kill_after_snapshot, pipeline, py, root, tensors, text,
};
use manifests::transforms::{CenterCrop, Pixels, RandomResizedCrop, Resize, Transform};
use pipeline_core::image::Image;
use serde_json::Value;
use std::path::Path;

/// Copies the digits PNG tree's classes `classes` (their first `per_class` images; all
/// with `None`) into `dir/data/digits-png`.
fn copy_tree(dir: &Path, classes: &[&str], per_class: Option<usize>) {
    let from = root().join("examples/data/digits-png");
    assert!(
        from.is_dir(),
        "{} is missing: run scripts/setup.sh",
        from.display()
    );
    for class in classes {
        let to = dir.join("data/digits-png").join(class);
        std::fs::create_dir_all(&to).unwrap();
        let mut files: Vec<_> = std::fs::read_dir(from.join(class))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for f in files.iter().take(per_class.unwrap_or(usize::MAX)) {
            std::fs::copy(f, to.join(f.file_name().unwrap())).unwrap();
        }
    }
}

const ALL: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];

/// `pipeline run MANIFEST --json`, which must succeed: its report.
fn run(dir: &Path, manifest: &str) -> Value {
    let out = pipeline(dir, &["run", manifest, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn accuracy(report: &Value) -> f64 {
    report["stages"][1]["metrics"]["accuracy"].as_f64().unwrap()
}

#[test]
fn digits_train_from_an_image_folder_and_from_a_listing_to_95_percent() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(dir.path(), &ALL, None);
    std::fs::copy(
        root().join("examples/data/digits-png.csv"),
        dir.path().join("data/digits-png.csv"),
    )
    .unwrap();
    let example = std::fs::read_to_string(root().join("examples/digits-images.kdl")).unwrap();
    std::fs::write(dir.path().join("folder.kdl"), &example).unwrap();
    let report = run(dir.path(), "folder.kdl");
    assert!(accuracy(&report) >= 0.95, "{report}");

    // The checkpoint says which output is which class, and how an image becomes the input.
    let metadata = checkpoint_metadata(dir.path(), &report, 2);
    assert_eq!(metadata["classes"], serde_json::json!(ALL));
    assert_eq!(metadata["input_shape"], serde_json::json!([1, 8, 8]));
    assert_eq!(metadata["images"]["channels"], 1);
    assert_eq!(metadata["images"]["transforms"][0]["kind"], "random-crop");
    // The split names the images (stratified: 20 % of each class).
    let split: Value = serde_json::from_slice(
        &std::fs::read(
            dir.path()
                .join(report["run_dir"].as_str().unwrap())
                .join("split.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let test = split["test"].as_array().unwrap();
    assert_eq!(test.len(), 359, "20 % of 1,797");
    let zeros = test
        .iter()
        .filter(|f| f.as_str().unwrap().starts_with("0/"))
        .count();
    assert!(
        (35..=36).contains(&zeros),
        "178 zeros, 20 % in the test split: {zeros}"
    );

    // The same images from the listing (`path,label`, paths relative to it).
    let listing = example.replace(
        "source \"data/digits-png\"      // a directory: format \"image-folder\"",
        "source \"data/digits-png.csv\"\n    format \"image-list\"\n    header #true",
    );
    assert_ne!(listing, example);
    std::fs::write(dir.path().join("listing.kdl"), listing).unwrap();
    let report = run(dir.path(), "listing.kdl");
    assert!(accuracy(&report) >= 0.95, "{report}");
}

/// A small CNN on three classes with every random transform, snapshotting often.
fn augmented(dir: &Path) {
    copy_tree(dir, &["0", "1", "2"], Some(40));
    std::fs::write(
        dir.join("aug.kdl"),
        r#"pipeline "aug"
seed 5
data {
    source "data/digits-png"
    images channels=3 {
        random-resized-crop 10 min-scale=0.5
        random-crop 8 padding=2
        horizontal-flip
        normalize { mean 0.5 0.4 0.3; std 0.25 0.5 1.0; }
    }
    split train=0.75 test=0.25
}
model {
    conv2d 8 kernel=3 padding=1
    batch-norm
    relu
    flatten
    dropout 0.2
    linear 3
}
loss "cross-entropy"
optimizer "adam" lr=0.01
train epochs=6 batch-size=10 snapshot-every-steps=9
eval "test" needs="train" split="test"
checkpoint "export" needs="train" path="out/model.safetensors"
"#,
    )
    .unwrap();
}

#[test]
fn augmentation_resumes_bit_for_bit_after_kill_9() {
    let killed = tempfile::tempdir().unwrap();
    augmented(killed.path());
    let at = kill_after_snapshot(killed.path(), "aug.kdl", 27);
    let out = pipeline(killed.path(), &["run", "aug.kdl"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("resuming `train` from its snapshot"),
        "{}",
        text(&out.stderr)
    );
    let whole = tempfile::tempdir().unwrap();
    augmented(whole.path());
    let out = pipeline(whole.path(), &["run", "aug.kdl"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let weights = |d: &Path| std::fs::read(d.join("out/model.safetensors")).unwrap();
    assert!(
        weights(killed.path()) == weights(whole.path()),
        "resumed at step {at}: the weights must be identical"
    );
}

#[test]
fn streamed_images_train_as_held_ones_under_the_same_key() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(dir.path(), &["0", "1", "2"], Some(40));
    // A transform before the first random one, which a streamed image goes through per batch.
    std::fs::write(
        dir.path().join("s.kdl"),
        r#"pipeline "s"
seed 5
data {
    source "data/digits-png"
    images channels=1 {
        resize 10
        random-crop 8 padding=1
        horizontal-flip
    }
    split train=0.75 test=0.25
}
model {
    flatten
    linear 3
}
loss "cross-entropy"
optimizer "adam" lr=0.01
train epochs=3 batch-size=10
eval "test" needs="train" split="test"
checkpoint "export" needs="train" path="out/model.safetensors"
"#,
    )
    .unwrap();
    let weights = || std::fs::read(dir.path().join("out/model.safetensors")).unwrap();
    let held = pipeline(dir.path(), &["run", "s.kdl", "--set", "data.load=memory"]);
    assert!(held.status.success(), "{}", text(&held.stderr));
    let held_weights = weights();
    // The same pixels either way: the key does not change, every stage is cached.
    let status = pipeline(
        dir.path(),
        &["status", "s.kdl", "--set", "data.load=stream"],
    );
    assert!(
        text(&status.stdout).contains("3 of 3 stages fresh"),
        "{}",
        text(&status.stdout)
    );
    for workers in ["0", "2"] {
        let streamed = pipeline(
            dir.path(),
            &[
                "run",
                "s.kdl",
                "--no-cache",
                "--set",
                "data.load=stream",
                "--set",
                &format!("data.workers={workers}"),
            ],
        );
        assert!(streamed.status.success(), "{}", text(&streamed.stderr));
        assert!(
            weights() == held_weights,
            "streamed images ({workers} workers) train other weights"
        );
    }
}

#[test]
fn under_ddp_each_process_augments_its_samples_as_one_process_would() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(dir.path(), &["0", "1", "2"], Some(40));
    // No batch-norm or dropout: two processes then compute what one does.
    std::fs::write(
        dir.path().join("ddp.kdl"),
        r#"pipeline "ddp"
seed 5
data {
    source "data/digits-png"
    images channels=1 {
        random-resized-crop 8 min-scale=0.6
        random-crop 8 padding=1
        horizontal-flip
    }
    split train=0.8 test=0.2
}
model {
    conv2d 4 kernel=3 padding=1
    tanh
    flatten
    linear 3
}
loss "cross-entropy"
optimizer "adam" lr=0.01
train epochs=3 batch-size=16
checkpoint "export" needs="train" path="out/model.safetensors"
"#,
    )
    .unwrap();
    let weights = |args: &[&str]| {
        let mut all = vec!["run", "ddp.kdl", "--no-cache"];
        all.extend(args);
        let out = pipeline(dir.path(), &all);
        assert!(out.status.success(), "{}", text(&out.stderr));
        common::tensors(&dir.path().join("out/model.safetensors"))
    };
    let single = weights(&["--set", "train.batch-size=32"]);
    let split = weights(&["--nproc-per-node", "2", "--set", "accelerator.strategy=ddp"]);
    let worst = common::worst_difference(&split, &single);
    assert!(worst < 1e-5, "the weights differ by {worst}");
}

#[test]
fn the_image_sets_key_holds_every_image_and_only_their_content() {
    let dir = tempfile::tempdir().unwrap();
    augmented(dir.path());
    let manifest = std::fs::read_to_string(dir.path().join("aug.kdl"))
        .unwrap()
        .replace("epochs=6", "epochs=1");
    std::fs::write(dir.path().join("aug.kdl"), manifest).unwrap();
    run(dir.path(), "aug.kdl");
    let status = |dir: &Path| text(&pipeline(dir, &["status", "aug.kdl"]).stdout);
    assert!(status(dir.path()).contains("3 of 3 stages fresh"));
    let class = dir.path().join("data/digits-png/1");
    let mut files: Vec<_> = std::fs::read_dir(&class)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    // Another image's pixels in one file: the data changed.
    let original = std::fs::read(&files[0]).unwrap();
    std::fs::copy(&files[1], &files[0]).unwrap();
    let s = status(dir.path());
    assert!(s.contains("train") && s.contains("stale"), "{s}");
    assert!(s.contains("data"), "{s}");
    std::fs::write(&files[0], &original).unwrap();
    assert!(status(dir.path()).contains("3 of 3 stages fresh"));
    // One image more: changed too; the folder moved elsewhere: unchanged.
    std::fs::copy(&files[1], class.join("9999.png")).unwrap();
    assert!(!status(dir.path()).contains("3 of 3 stages fresh"));
    std::fs::remove_file(class.join("9999.png")).unwrap();
    std::fs::rename(
        dir.path().join("data/digits-png"),
        dir.path().join("data/moved"),
    )
    .unwrap();
    let moved = std::fs::read_to_string(dir.path().join("aug.kdl"))
        .unwrap()
        .replace("data/digits-png", "data/moved");
    std::fs::write(dir.path().join("aug.kdl"), moved).unwrap();
    assert!(status(dir.path()).contains("3 of 3 stages fresh"));
}

#[test]
fn a_listing_beside_the_manifest_and_a_link_loop_in_a_folder() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(dir.path(), &["0", "1"], Some(10));
    let mut listing = String::from("path,label\n");
    for class in ["0", "1"] {
        for e in std::fs::read_dir(dir.path().join("data/digits-png").join(class)).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            listing += &format!("data/digits-png/{class}/{name},{class}\n");
        }
    }
    std::fs::write(dir.path().join("list.csv"), listing).unwrap();
    let manifest = |source: &str, format: &str| {
        format!(
            "pipeline \"l\"\ndata {{\n    source \"{source}\"\n    format \"{format}\"\n    header #true\n    images channels=1\n}}\nmodel {{ flatten; linear 2; }}\nloss \"cross-entropy\"\noptimizer \"adam\"\ntrain epochs=1 batch-size=4\n"
        )
    };
    std::fs::write(dir.path().join("l.kdl"), manifest("list.csv", "image-list")).unwrap();
    let out = pipeline(dir.path(), &["run", "l.kdl"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // A link from a class back up to the folder would list every image again.
    std::os::unix::fs::symlink("..", dir.path().join("data/digits-png/1/up")).unwrap();
    let folder = manifest("data/digits-png", "image-folder").replace("    header #true\n", "");
    std::fs::write(dir.path().join("f.kdl"), folder).unwrap();
    let stderr = fails(dir.path(), &["run", "f.kdl"]);
    assert!(
        stderr.contains("a link leads back to a directory already listed"),
        "{stderr}"
    );
}

/// A project with three classes of ten digits and `manifest`'s `images` block.
fn small(images: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(dir.path(), &["0", "1", "2"], Some(10));
    std::fs::write(
        dir.path().join("img.kdl"),
        format!(
            r#"pipeline "img"
data {{
    source "data/digits-png"
    images channels=1 {{
{images}
    }}
}}
model {{
    flatten
    linear 3
}}
loss "cross-entropy"
optimizer "adam"
train epochs=1 batch-size=8
"#
        ),
    )
    .unwrap();
    dir
}

/// `pipeline ARGS`' stderr, which must fail with exit code 1.
fn fails(dir: &Path, args: &[&str]) -> String {
    let out = pipeline(dir, args);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    text(&out.stderr)
}

#[test]
fn check_locates_what_the_transforms_cannot_do() {
    for (name, images) in [
        ("unknown", "        random-flip"),
        (
            "normalize-not-last",
            "        normalize mean=0.5 std=0.5\n        random-crop 8 padding=1",
        ),
        (
            "normalize-channels",
            "        normalize { mean 0.5 0.5 0.5; }",
        ),
        ("too-many-sizes", "        resize 8 8 8"),
        // Known from the first image's header: 8×8.
        ("crop-too-large", "        random-crop 12 padding=1"),
    ] {
        let dir = small(images);
        assert_fixture(
            &format!("images-{name}.check.stderr"),
            &fails(dir.path(), &["check", "img.kdl"]),
        );
    }
    let dir =
        small("        resize 16\n        center-crop 12\n        normalize mean=0.5 std=0.2");
    let out = pipeline(dir.path(), &["check", "img.kdl"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn bad_images_and_folders_are_named_before_training() {
    let class = |dir: &Path, c: &str| dir.join("data/digits-png").join(c);
    let first = |dir: &Path| class(dir, "1").join("0001.png");
    type Spoil<'a> = &'a dyn Fn(&Path);
    let cases: [(&str, Spoil); 6] = [
        ("truncated", &|d| {
            let bytes = std::fs::read(first(d)).unwrap();
            std::fs::write(first(d), &bytes[..bytes.len() / 2]).unwrap();
        }),
        ("png-named-jpg", &|d| {
            std::fs::rename(first(d), class(d, "1").join("0001.jpg")).unwrap();
        }),
        ("not-an-image", &|d| {
            std::fs::write(first(d), "this is text").unwrap();
        }),
        ("empty-class", &|d| {
            std::fs::create_dir(class(d, "3")).unwrap();
        }),
        ("unread-format", &|d| {
            std::fs::write(class(d, "2").join("extra.bmp"), "BM").unwrap();
        }),
        ("another-size", &|d| {
            let dir = d.to_path_buf();
            py(
                &dir,
                "from PIL import Image\nImage.new('L', (9, 7)).save('data/digits-png/2/big.png')\n",
            );
        }),
    ];
    for (name, spoil) in cases {
        let dir = small("        normalize mean=0.5 std=0.5");
        spoil(dir.path());
        let stderr = fails(dir.path(), &["run", "img.kdl"]);
        assert!(!stderr.contains("epoch 1/1"), "{name}: trained: {stderr}");
        assert_fixture(&format!("images-{name}.run.stderr"), &stderr);
    }
}

/// An image too large to decode (20000×20000 RGBA, 1.6 GB decoded) is refused from its
/// header, before its data is read: the file here is a sparse gigabyte (it was read
/// whole, then its decoding refused).
#[test]
fn an_image_too_large_is_refused_from_its_header() {
    let dir = small("        resize 8\n        normalize mean=0.5 std=0.5");
    py(
        dir.path(),
        "import struct, zlib\n\
         def chunk(kind, data, claimed=None):\n\
         \x20   n = len(data) if claimed is None else claimed\n\
         \x20   crc = struct.pack('>I', zlib.crc32(kind + data)) if claimed is None else b''\n\
         \x20   return struct.pack('>I', n) + kind + data + crc\n\
         ihdr = struct.pack('>IIBBBBB', 20000, 20000, 8, 6, 0, 0, 0)\n\
         png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', ihdr) + chunk(b'IDAT', b'', 1 << 30)\n\
         f = open('data/digits-png/1/0001.png', 'wb')\n\
         f.write(png)\n\
         f.truncate(1 << 30)\n",
    );
    let stderr = fails(dir.path(), &["run", "img.kdl"]);
    assert_fixture("images-too-large.run.stderr", &stderr);
}

/// The transforms' deterministic forms against torchvision's on PIL images (what
/// `ImageFolder` gives them), for grey and RGB PNGs and a JPEG: resize (one side, two),
/// centre crops (smaller and larger than the image), and `random-resized-crop`'s
/// evaluation form (`Resize` then `CenterCrop`).
#[test]
fn the_transforms_match_torchvision_pixel_for_pixel() {
    let dir = tempfile::tempdir().unwrap();
    py(
        dir.path(),
        "import numpy as np\nfrom PIL import Image\n\
         rng = np.random.default_rng(0)\n\
         x = rng.integers(0, 256, (23, 37, 3), dtype=np.uint8)\n\
         x[:, :, 0] = np.linspace(0, 255, 37, dtype=np.uint8)[None, :]\n\
         Image.fromarray(x).save('rgb.png')\n\
         Image.fromarray(x[:, :, 1]).save('grey.png')\n\
         Image.fromarray(np.dstack([x, x[:, :, :1]])).save('rgba.png')\n\
         Image.fromarray(x).save('photo.jpg', quality=92)\n",
    );
    let cases: [(&str, Transform, &str); 5] = [
        (
            "resize-short-side",
            Transform::Resize(Resize { size: vec![11] }),
            "T.Resize(11)",
        ),
        (
            "resize-both",
            Transform::Resize(Resize { size: vec![40, 9] }),
            "T.Resize((40, 9))",
        ),
        (
            "center-crop",
            Transform::CenterCrop(CenterCrop { size: vec![15, 20] }),
            "T.CenterCrop((15, 20))",
        ),
        (
            "center-crop-padded",
            Transform::CenterCrop(CenterCrop { size: vec![30] }),
            "T.CenterCrop(30)",
        ),
        (
            "random-resized-crop-eval",
            Transform::RandomResizedCrop(RandomResizedCrop {
                size: vec![16],
                min_scale: 0.08,
                max_scale: 1.0,
                min_ratio: 0.75,
                max_ratio: 4.0 / 3.0,
            }),
            "T.Compose([T.Resize(16), T.CenterCrop(16)])",
        ),
    ];
    let mut script = String::from(
        "import json, numpy as np\nfrom PIL import Image\nimport torchvision.transforms as T\nworst = {}\n",
    );
    for (file, channels) in [
        ("rgb.png", 3),
        ("grey.png", 1),
        ("rgba.png", 3),
        ("rgb.png", 1),
        ("photo.jpg", 3),
    ] {
        let image = Image::read(&dir.path().join(file), channels).unwrap();
        let mode = if channels == 1 { "L" } else { "RGB" };
        let write = |name: &str, img: &Image| {
            std::fs::write(dir.path().join(name), &img.pixels).unwrap();
            format!("({}, {})", img.height, img.width)
        };
        let decoded = format!("{file}-{channels}.raw");
        let shape = write(&decoded, &image);
        script += &format!(
            "img = Image.open({file:?}).convert({mode:?})\n\
             ours = np.fromfile({decoded:?}, np.uint8).reshape({shape} + ({channels},))\n\
             theirs = np.array(img).reshape(ours.shape)\n\
             worst[{decoded:?}] = int(np.abs(ours.astype(int) - theirs).max())\n"
        );
        for (name, transform, torchvision) in &cases {
            let out = transform.apply(image.clone(), None);
            let raw = format!("{file}-{channels}-{name}.raw");
            let shape = write(&raw, &out);
            assert_eq!(
                out.size(),
                transform.size(Some(image.size())).unwrap().unwrap()
            );
            script += &format!(
                "ours = np.fromfile({raw:?}, np.uint8).reshape({shape} + ({channels},))\n\
                 theirs = np.array({torchvision}(img))\n\
                 assert theirs.shape[:2] == ours.shape[:2], ({raw:?}, theirs.shape, ours.shape)\n\
                 worst[{raw:?}] = int(np.abs(ours.astype(int) - theirs.reshape(ours.shape)).max())\n"
            );
        }
    }
    script += "print(json.dumps(worst))\n";
    let worst: Value = serde_json::from_str(&py(dir.path(), &script)).unwrap();
    eprintln!("largest differences from torchvision, in levels of 255: {worst}");
    for (case, diff) in worst.as_object().unwrap() {
        let diff = diff.as_i64().unwrap();
        // JPEG decoders round their inverse DCT differently (zune-jpeg and libjpeg-turbo);
        // PNG is lossless, and the resampling is Pillow's.
        let allowed = if case.starts_with("photo.jpg") { 4 } else { 1 };
        assert!(
            diff <= allowed,
            "{case}: off by {diff} from torchvision: {worst}"
        );
    }
}

#[test]
fn a_directory_of_images_is_predicted_each_named_by_its_file_as_pytorch_predicts_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    copy_tree(d, &["0", "1", "2"], Some(30));
    // Images the training has not seen, at two depths (and a file that is no image).
    let from = root().join("examples/data/digits-png");
    for (k, class) in ["0", "1", "2"].iter().enumerate() {
        let mut files: Vec<_> = std::fs::read_dir(from.join(class))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for (j, f) in files[40..43].iter().enumerate() {
            let to = match j {
                0 => d.join(format!("new/{k}-{j}.png")),
                _ => d.join(format!("new/batch-{j}/{class}.png")),
            };
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(f, &to).unwrap();
        }
    }
    std::fs::write(d.join("new/notes.txt"), "not an image").unwrap();
    let manifest = r#"pipeline "predict-images"
seed 2
data {
    source "data/digits-png"
    images channels=1 {
        random-crop 8 padding=1
        normalize mean=0.5 std=0.5
    }
    split train=0.8 test=0.2
}
model {
    flatten
    linear 3
}
loss "cross-entropy"
optimizer "adam" lr=0.05
train epochs=10 batch-size=16
checkpoint "export" needs="train"
predict "new" {
    needs "train"
    source "new"
    output "new.csv"
}
"#;
    std::fs::write(d.join("p.kdl"), manifest).unwrap();
    let report = run(d, "p.kdl");
    assert_eq!(report["stages"][2]["metrics"]["samples"], 9.0, "{report}");
    let weights: serde_json::Map<String, Value> =
        tensors(&d.join(report["stages"][1]["outputs"][0].as_str().unwrap()))
            .into_iter()
            .map(|(name, values)| (name, serde_json::json!(values)))
            .collect();
    let out = py(
        d,
        &format!(
            r#"
import csv, json, numpy as np
from PIL import Image
w = json.loads('''{weights}''')
W, b = np.array(w["1.weight"]).reshape(3, 64), np.array(w["1.bias"])
rows = list(csv.DictReader(open("new.csv")))
files = [r["file"] for r in rows]
# torchvision's walk order: the directories sorted by path, then each one's files.
assert files == ["0-0.png", "1-0.png", "2-0.png", "batch-1/0.png", "batch-1/1.png", "batch-1/2.png", "batch-2/0.png", "batch-2/1.png", "batch-2/2.png"], files
worst, right = 0.0, 0
for r in rows:
    # Evaluated, `random-crop 8` of an 8 x 8 image is the image.
    x = np.asarray(Image.open("new/" + r["file"]).convert("L"), dtype=np.float64) / 255
    z = W @ ((x.reshape(-1) - 0.5) / 0.5) + b
    p = np.exp(z - z.max()); p /= p.sum()
    ours = np.array([float(r[f"prob_{{k}}"]) for k in range(3)])
    worst = max(worst, float(np.abs(ours - p).max()))
    truth = r["file"].split("/")[-1][0]
    right += r["class"] == truth
print(worst, right)
"#,
            weights = Value::Object(weights),
        ),
    );
    let mut fields = out.split_whitespace();
    let worst: f64 = fields.next().unwrap().parse().unwrap();
    let right: usize = fields.next().unwrap().parse().unwrap();
    eprintln!("probabilities against numpy's: {worst:e}; {right} of 9 right");
    assert!(worst < 1e-6, "{worst}");
    assert!(right >= 7, "{right} of 9");
    // The images are in the key: a new one is predicted again.
    std::fs::copy(d.join("new/0-0.png"), d.join("new/batch-2/extra.png")).unwrap();
    let again = run(d, "p.kdl");
    assert_eq!(again["stages"][2]["status"], "ran", "{again}");
    assert_eq!(again["stages"][2]["metrics"]["samples"], 10.0);
    // What is not a directory of images is refused where it is written.
    std::fs::write(
        d.join("p.kdl"),
        manifest.replace("source \"new\"", "source \"images.csv\""),
    )
    .unwrap();
    let stderr = fails(d, &["check", "p.kdl"]);
    assert_fixture("predict-images-file.check.stderr", &stderr);
}
