//! Lowering: KDL text → typed [`Manifest`], every problem collected, none fatal but a
//! syntax error.
//!
//! Each node is read into fields by the schema-driven reader (`reader.rs`); this file
//! resolves `--set` paths, finds the sections and stages, and builds the typed specs
//! from the fields with the schema's defaults filled in. When a value is wrong, a
//! diagnostic is recorded and the default is used, so later checks (stage references,
//! cycles) still run and `pipeline check` reports everything at once.
//!
//! A choice key lowers with its enum's `parse` (`choice!`): the reader keeps only names
//! of the key's schema list, which is that enum's `NAMES`, or else the schema's default,
//! and the tests below show that every name of every list and every default parses.
//! So the fallback after `parse` is reached only for a required key that was left out
//! (`loss`'s and `optimizer`'s `kind`), which the reader has reported; each fallback is
//! written out and commented where it is used.

use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::formats;
use crate::limits;
use crate::losses::{self, TYPED_KEYS};
use crate::manifest::*;
use crate::optimizers;
use crate::overrides::Override;
use crate::reader::{Fields, Pending, Reader, Value};
use crate::schedules;
use crate::schema::{self, Children, Section, Ty, Val};
use crate::suggest;
use kdl::{KdlDocument, KdlError, KdlNode, KdlValue};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The result of lowering: the manifest (absent only on a syntax error) and every
/// diagnostic found on the way.
#[derive(Debug)]
pub struct Lowered {
    pub manifest: Option<Manifest>,
    pub diagnostics: Diagnostics,
}

/// Parses and lowers manifest `text`. `default_name` names the pipeline when the file has
/// no `pipeline` node; `base_dir` is where relative paths point from.
pub fn lower(text: &str, default_name: &str, base_dir: &Path, overrides: &[Override]) -> Lowered {
    if let Some(d) = limits::check(text) {
        return Lowered {
            manifest: None,
            diagnostics: vec![d],
        };
    }
    let doc = match parse(text) {
        Ok(doc) => doc,
        Err(err) => {
            let diagnostics = err
                .diagnostics
                .iter()
                .map(|d| {
                    let message = d.message.clone().unwrap_or_else(|| "invalid KDL".into());
                    Diagnostic::error(
                        "pipeline::manifest::syntax",
                        format!("syntax error: {message}"),
                    )
                    .label(d.span, d.label.clone().unwrap_or_default())
                    .help(d.help.clone().unwrap_or_else(|| {
                        "manifests are KDL v2 documents: `node arg key=value { child … }`".into()
                    }))
                })
                .collect();
            return Lowered {
                manifest: None,
                diagnostics,
            };
        }
    };
    let mut lowerer = Reader {
        diags: Vec::new(),
        pending: Vec::new(),
        folds: None,
    };
    let manifest = lowerer.manifest(&doc, default_name, base_dir, overrides);
    Lowered {
        manifest,
        diagnostics: lowerer.diags,
    }
}

/// Parses on a thread of its own with [`limits::PARSE_STACK`] of stack: the KDL parser
/// recurses, and `limits::check` has bounded how deep, not the caller's stack.
fn parse(text: &str) -> Result<KdlDocument, KdlError> {
    std::thread::scope(|scope| {
        let spawned = std::thread::Builder::new()
            .name("kdl-parse".into())
            .stack_size(limits::PARSE_STACK)
            .spawn_scoped(scope, || KdlDocument::parse(text));
        match spawned {
            Ok(handle) => handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            // No thread to be had (a process at its limit): parse here, on a smaller stack.
            Err(_) => KdlDocument::parse(text),
        }
    })
}

fn stage_name_of(node: &KdlNode) -> String {
    let kind = node.name().value();
    node.entries()
        .iter()
        .find(|e| e.name().is_none())
        .or_else(|| node.entry("name"))
        .and_then(|e| e.value().as_string())
        .or_else(|| {
            node.children()
                .and_then(|c| c.get_arg("name"))
                .and_then(KdlValue::as_string)
        })
        .unwrap_or(kind)
        .to_string()
}

pub(crate) fn valid_stage_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl<'a> Reader<'a> {
    fn manifest(
        &mut self,
        doc: &'a KdlDocument,
        default_name: &str,
        base_dir: &Path,
        overrides: &'a [Override],
    ) -> Option<Manifest> {
        let mut sections: BTreeMap<&'static str, &'a KdlNode> = BTreeMap::new();
        let mut stage_nodes: Vec<(StageKind, &'a KdlNode)> = Vec::new();
        let mut block_nodes: Vec<&'a KdlNode> = Vec::new();
        let mut metric_nodes: Vec<&'a KdlNode> = Vec::new();
        for node in doc.nodes() {
            let name = node.name().value();
            if let Some(section) = schema::sections().into_iter().find(|s| s.name == name) {
                if let Some(first) = sections.get(section.name) {
                    self.diags.push(
                        Diagnostic::error(
                            "pipeline::manifest::duplicate_section",
                            format!("`{name}` is given twice"),
                        )
                        .label(node.name().span(), "given again here")
                        .label(first.name().span(), "first given here")
                        .help(format!("a manifest has one `{name}`; merge the two")),
                    );
                } else {
                    sections.insert(section.name, node);
                }
            } else if name == schema::BLOCK.name {
                block_nodes.push(node);
            } else if name == schema::METRIC.name {
                metric_nodes.push(node);
            } else if let Some(kind) = StageKind::ALL
                .iter()
                .copied()
                .find(|k| schema::stage(*k).name == name)
            {
                stage_nodes.push((kind, node));
            } else {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::manifest::unknown_node",
                        format!("unknown node `{name}`"),
                    )
                    .label(node.name().span(), "not a section, stage kind or block")
                    .help(suggest::help_for(
                        name,
                        "node",
                        &schema::top_level_names(),
                    )),
                );
            }
        }

        // Resolve every `--set` path to the schema names it aims at.
        let stage_names: Vec<String> = stage_nodes.iter().map(|(_, n)| stage_name_of(n)).collect();
        for ov in overrides {
            let first = ov.path[0].as_str();
            let mut target: Vec<String> = if let Some(section) =
                schema::sections().into_iter().find(|s| s.name == first)
            {
                if section.children == Children::Layers {
                    self.diags.push(
                        Diagnostic::error(
                            "pipeline::manifest::unknown_override",
                            format!("--set {ov}: model layers cannot be set from the command line"),
                        )
                        .help("edit the `model` block in the manifest"),
                    );
                    continue;
                }
                let mut t = ov.path.clone();
                if t.len() == 1 {
                    match section.args.first() {
                        Some(arg) => t.push(arg.to_string()),
                        None => {
                            self.diags.push(
                                Diagnostic::error(
                                    "pipeline::manifest::unknown_override",
                                    format!(
                                        "--set {ov}: `{first}` is a block; set one of its keys"
                                    ),
                                )
                                .help(suggest::help_for(
                                    "",
                                    "key",
                                    &section.key_names(),
                                )),
                            );
                            continue;
                        }
                    }
                }
                t
            } else {
                let by_name = stage_names.iter().position(|n| n == first);
                let by_kind: Vec<usize> = stage_nodes
                    .iter()
                    .enumerate()
                    .filter(|(_, (k, _))| schema::stage(*k).name == first)
                    .map(|(i, _)| i)
                    .collect();
                let index = match (by_name, by_kind.as_slice()) {
                    (Some(i), _) => i,
                    (None, [i]) => *i,
                    (None, []) => {
                        let mut candidates: Vec<&str> =
                            schema::sections().iter().map(|s| s.name).collect();
                        candidates.extend(stage_names.iter().map(String::as_str));
                        self.diags.push(
                            Diagnostic::error(
                                "pipeline::manifest::unknown_override",
                                format!("--set {ov}: there is no section or stage `{first}`"),
                            )
                            .help(suggest::help_for(
                                first,
                                "section or stage",
                                &candidates,
                            )),
                        );
                        continue;
                    }
                    (None, _) => {
                        self.diags.push(
                            Diagnostic::error(
                                "pipeline::manifest::unknown_override",
                                format!("--set {ov}: more than one `{first}` stage"),
                            )
                            .help(format!(
                                "name the stage instead: {}",
                                by_kind
                                    .iter()
                                    .map(|i| format!("`{}`", stage_names[*i]))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            )),
                        );
                        continue;
                    }
                };
                if ov.path.len() == 1 {
                    let keys = schema::stage(stage_nodes[index].0).key_names();
                    self.diags.push(
                        Diagnostic::error(
                            "pipeline::manifest::unknown_override",
                            format!("--set {ov}: `{first}` is a stage; set one of its keys"),
                        )
                        .help(format!(
                            "for example `--set {first}.{}=…`; {}",
                            keys.get(1).copied().unwrap_or("name"),
                            suggest::help_for("", "key", &keys)
                        )),
                    );
                    continue;
                }
                let mut t = vec![format!("#stage{index}")];
                t.extend(ov.path[1..].iter().cloned());
                t
            };
            target.shrink_to_fit();
            self.pending.push(Pending {
                target,
                ov,
                used: false,
            });
        }

        let read_section = |this: &mut Self, section: &'static Section| {
            this.read(
                sections.get(section.name).copied(),
                section,
                &[section.name.to_string()],
                section.name,
            )
        };
        let pipeline = read_section(self, &schema::PIPELINE);
        let seed_f = read_section(self, &schema::SEED);
        let data_f = read_section(self, &schema::DATA);
        let loss_f = read_section(self, losses::section());
        let opt_f = read_section(self, optimizers::section());
        let sched_f = read_section(self, schedules::section());
        let acc_f = read_section(self, &schema::ACCELERATOR);
        let logging_f = read_section(self, &schema::LOGGING);
        let sweep_f = read_section(self, &schema::SWEEP);
        let sweep = self.sweep(&sweep_f, sections.get(schema::SWEEP.name).copied());

        for (section, required) in [
            ("data", "data { source \"…\" }"),
            ("model", "model { linear 10 }"),
            ("loss", "loss \"cross-entropy\""),
            ("optimizer", "optimizer \"adam\" lr=1e-3"),
        ] {
            if !sections.contains_key(section) {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::manifest::missing_section",
                        format!("the manifest has no `{section}`"),
                    )
                    .help(format!("add `{required}`")),
                );
            }
        }

        let name = if pipeline.span.is_some() {
            pipeline.text("name")
        } else {
            default_name.to_string()
        };
        let seed = seed_f.int("value") as u64;
        let mut data = self.data(&data_f, sections.get("data").copied(), seed);
        data.extra_inputs = self.extra_inputs(sections.get("data").copied(), &data);
        data.categorical = self.categorical(sections.get("data").copied(), &data);
        data.dates = self.dates(sections.get("data").copied(), &data);
        let blocks = self.blocks(&block_nodes);
        let model = self.model(sections.get("model").copied(), &blocks, base_dir);
        self.unused_blocks(&blocks);
        self.unused_inputs(&data, &model);
        // `None` when `loss` or its kind is left out or unknown: reported, and no member
        // stands in for it (no manifest comes out).
        let loss = self.loss(&loss_f, sections.contains_key("loss"), base_dir);
        let optimizer = self.optimizer(&opt_f, sections.get("optimizer").copied());
        let metrics = self.scripted_metrics(&metric_nodes, base_dir);
        // `None` when its kind is unknown: reported, and no member stands in for it.
        let schedule = self.schedule_kind(&sched_f).map(|kind| ScheduleSpec {
            kind,
            warmup_epochs: sched_f.int("warmup-epochs") as u64,
            interval: sched_f
                .opt_text("interval")
                .and_then(|i| Interval::parse(&i)),
            script: self.schedule_script(&sched_f, base_dir),
        });
        let own_warmup = schedule
            .as_ref()
            .and_then(|s| Some((s.kind.name(), s.kind.member.describe().own_warmup?)))
            .filter(|_| sched_f.int("warmup-epochs") > 0);
        if let Some((name, own)) = own_warmup {
            self.diags.push(
                Diagnostic::error(
                    "pipeline::schedule::warmup_twice",
                    format!("`{name}` warms up by itself: it rises for `{own}` of the training"),
                )
                .label_opt(sched_f.span("warmup-epochs"), "a second warm-up")
                .help(format!("remove `warmup-epochs`, or set `{own}`")),
            );
        }
        let accelerator = AcceleratorSpec {
            device: match acc_f.value("device") {
                Some(Value::Device(d)) => *d,
                _ => DeviceSpec::Auto,
            },
            // Not reached: `precision` has a default, and the reader took only names
            // that are registered.
            precision: Precision::named(&acc_f.text("precision")).unwrap_or(Precision::FP32),
            // `None` when not written (no default); a written value is one of the names.
            loss_scale: acc_f
                .opt_text("loss-scale")
                .and_then(|s| LossScale::parse(&s)),
            accumulate: acc_f.int("accumulate") as u64,
            clipping: Clipping {
                max_norm: acc_f.opt_float("max-norm"),
                norm_type: acc_f.float("norm-type"),
                value: acc_f.opt_float("clip-value"),
            },
            deterministic: acc_f.bool("deterministic"),
            threads: acc_f.opt_int("threads").map(|t| t as u64),
            distributed: Distributed {
                // The fallbacks of these four are not reached: each key has a default.
                strategy: Strategy::named(&acc_f.text("strategy")).unwrap_or(Strategy::NONE),
                backend: CommBackend::parse(&acc_f.text("backend")).unwrap_or(CommBackend::Auto),
                sync_batch_norm: acc_f.bool("sync-batch-norm"),
                drop_remainder: match ShardRemainder::parse(&acc_f.text("shard-remainder"))
                    .unwrap_or(ShardRemainder::Pad)
                {
                    ShardRemainder::Pad => false,
                    ShardRemainder::Drop => true,
                },
                bucket_by: acc_f.opt_int("bucket-by").map(|c| c as u64),
                bucketed: match SamplerName::parse(&acc_f.text("sampler"))
                    .unwrap_or(SamplerName::Distributed)
                {
                    SamplerName::Distributed => false,
                    SamplerName::Bucketed => true,
                },
                buckets: acc_f.int("buckets") as u64,
                bucket_mb: acc_f.float("bucket-mb"),
                timeout_seconds: acc_f.float("timeout"),
            },
            spans: [
                "device",
                "precision",
                "loss-scale",
                "accumulate",
                "max-norm",
                "norm-type",
                "clip-value",
                "deterministic",
                "threads",
                "strategy",
                "backend",
                "sync-batch-norm",
                "shard-remainder",
                "sampler",
                "bucket-by",
                "buckets",
                "bucket-mb",
                "timeout",
            ]
            .into_iter()
            .filter_map(|k| Some((k, acc_f.span(k)?)))
            .collect(),
            from_set: acc_f.set.clone(),
        };

        self.folds = data.split.folds;
        let mut stages = Vec::new();
        for (i, (kind, node)) in stage_nodes.iter().enumerate() {
            let f = self.read(
                Some(node),
                schema::stage(*kind),
                &[format!("#stage{i}")],
                &stage_names[i],
            );
            let mut stage = self.stage(&f, *kind);
            let inputs = self.stage_inputs(node, &stage_names[i]);
            match &mut stage.config {
                StageConfig::Eval(e) => e.inputs = inputs,
                StageConfig::Predict(p) => p.inputs = inputs,
                // Their sections have no `input` node.
                StageConfig::Train(_) | StageConfig::Checkpoint(_) => {}
            }
            stages.push(stage);
        }

        if let Some(k) = data.split.folds {
            stages = crate::folds::cut(stages, k, &mut self.diags);
        }

        for p in &self.pending {
            if !p.used {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::manifest::unknown_override",
                        format!("--set {}: no such key", p.ov),
                    )
                    .help("paths look like `optimizer.lr`, `data.split.train` or `<stage>.epochs`"),
                );
            }
        }

        Some(Manifest {
            name,
            seed,
            data,
            model,
            loss: loss?,
            optimizer: optimizer?,
            schedule: schedule?,
            accelerator,
            logging: LoggingSpec {
                tensorboard: logging_f.bool("tensorboard"),
                log_every_steps: logging_f.int("log-every-steps") as u64,
                grad_norm: logging_f.bool("grad-norm"),
            },
            sweep,
            metrics,
            stages,
            base_dir: base_dir.to_path_buf(),
            fetched: Default::default(),
        })
    }

    /// The loss the manifest names, with the keys its member declares (a key of another
    /// member is warned about by the reader, and left out here), or its TorchScript
    /// module. `None` when it names neither or both (said here when `loss` is written).
    fn loss(&mut self, f: &Fields, written: bool, base_dir: &Path) -> Option<LossSpec> {
        let kind = match (f.opt_text("kind"), f.opt_text("torchscript")) {
            (Some(_), Some(_)) => {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::loss::kind_and_torchscript",
                        "`loss` names a loss and a TorchScript module: it is one or the other",
                    )
                    .label_opt(f.span("kind"), "a loss")
                    .label_opt(f.span("torchscript"), "a module")
                    .help("remove `torchscript`, or the loss's name"),
                );
                return None;
            }
            (None, None) => {
                // A name that was refused has had its error.
                if written && !f.refused.contains(&"kind") {
                    self.diags.push(
                        Diagnostic::error(
                            "pipeline::manifest::missing_key",
                            "`loss` needs `kind` (or `torchscript`)",
                        )
                        .label_opt(f.name_span, "`kind` is missing here")
                        .help("name the loss, `loss \"cross-entropy\"`, or a module scripted in Python, `loss { torchscript \"loss.pt\" }` (`pipeline explain loss`)"),
                    );
                }
                return None;
            }
            (None, Some(path)) => {
                let path = PathBuf::from(path);
                let spec = LossSpec {
                    kind: LossKind::Script {
                        script: TorchScriptSpec {
                            file: base_dir.join(&path),
                            path: Spanned {
                                value: path,
                                span: f.span("torchscript"),
                            },
                        },
                        // The reader took only the names; `target` has a default.
                        target: Target::parse(&f.text("target")).unwrap_or(Target::Classes),
                    },
                    label_smoothing: 0.0,
                    class_weights: None,
                    pos_weight: None,
                    delta: None,
                    settings: BTreeMap::new(),
                    span: f.span,
                };
                return Some(spec);
            }
            // The reader took only registered names.
            (Some(name), None) => Loss::named(&name)?,
        };
        if f.value("target").is_some() {
            self.diags.push(
                Diagnostic::warning(
                    "pipeline::manifest::ignored_key",
                    format!("`loss.target` has no effect with `{}`", kind.as_str()),
                )
                .label_opt(f.span("target"), "ignored")
                .help("`target` applies to a `torchscript` loss; a registered loss says what it compares itself: remove it"),
            );
        }
        let takes = |key: &str| kind.takes(key);
        let class_weights = match f.value("class-weights") {
            _ if !takes("class-weights") => None,
            Some(Value::Floats(w)) => Some(ClassWeights::Given(w.clone())),
            Some(Value::Texts(_)) => Some(ClassWeights::Balanced),
            _ => None,
        };
        Some(LossSpec {
            kind: LossKind::Member(kind),
            label_smoothing: match takes("label-smoothing") {
                true => f.float("label-smoothing"),
                false => 0.0,
            },
            class_weights: class_weights.map(|value| Spanned {
                value,
                span: f.span("class-weights"),
            }),
            pos_weight: (takes("pos-weight") && f.value("pos-weight").is_some()).then(|| Spanned {
                value: f.floats("pos-weight"),
                span: f.span("pos-weight"),
            }),
            delta: takes("delta").then(|| f.float("delta")),
            settings: kind
                .describe()
                .keys
                .iter()
                .filter(|k| !TYPED_KEYS.contains(&k.name))
                .map(|k| (k.name.to_string(), f.float(k.name)))
                .collect(),
            span: f.span,
        })
    }

    fn data(&mut self, f: &Fields, node: Option<&KdlNode>, seed: u64) -> DataSpec {
        let source = PathBuf::from(f.text("source"));
        let source_span = f.span("source");
        // The schema's list is `auto` and the formats' names, and `auto` is the default.
        let format =
            DataFormat::parse(&f.text("format")).or_else(|| DataFormat::of_source(&source));
        let format = match format {
            Some(format) => format,
            None => {
                if f.value("source").is_some() {
                    self.diags.push(
                        Diagnostic::error("pipeline::data::unknown_format", format!("cannot tell the format of `{}` from its name", source.display()))
                            .label_opt(source_span, "unknown extension")
                            .help(format!("name the file {}, or add `format \"csv\"` (a directory of images: `format \"image-folder\"`)", DataFormat::endings(false))),
                    );
                }
                // Only so that the other keys are still checked: no manifest comes out.
                DataFormat::builtin(&formats::CSV)
            }
        };
        self.keys_for_format(f, format, crate::inputs::any_csv(node));
        let split_f = f.section_fields("split");
        let get = |key: &str, fallback: f64| split_f.map_or(fallback, |s| s.float(key));
        let folds = split_f.and_then(|s| s.opt_int("folds")).map(|k| k as u64);
        // k-fold cross-validation holds each fold out in turn: all the samples are in
        // the folds unless a test split is written.
        let test = match folds {
            Some(_) => split_f
                .and_then(|s| s.value("test"))
                .map_or(0.0, |_| get("test", 0.0)),
            None => get("test", 0.2),
        };
        let split = SplitSpec {
            train: match (folds, split_f.and_then(|s| s.value("train"))) {
                (Some(_), None) => 1.0 - test,
                _ => get("train", 0.8),
            },
            val: get("val", 0.0),
            test,
            seed: split_f
                .and_then(|s| s.opt_int("seed"))
                .map_or(seed, |s| s as u64),
            // Windows are split in time order.
            shuffle: f.section_fields("window").is_none()
                && split_f.is_none_or(|s| s.bool("shuffle")),
            stratify: split_f.is_some_and(|s| s.bool("stratify")),
            folds,
        };
        if let (Some(k), true) = (folds, split.val > 0.0) {
            self.diags.push(
                Diagnostic::error(
                    "pipeline::data::folds_and_val",
                    format!("with `folds={k}` each fold is held out in turn as the validation split: there is no `val` beside them"),
                )
                .label_opt(split_f.and_then(|s| s.span("val")), "a validation split")
                .help("remove `val`; a test split kept out of the folds is `test=0.2`"),
            );
        }
        let sum = split.train + split.val + split.test;
        if (sum - 1.0).abs() > 1e-6 || split.train <= 0.0 {
            let message = if split.train <= 0.0 {
                "the training split is empty".to_string()
            } else {
                format!(
                    "the split fractions add up to {}, not 1",
                    (sum * 1e6).round() / 1e6
                )
            };
            self.diags.push(
                Diagnostic::error("pipeline::data::bad_split", message)
                    .label_opt(split_f.and_then(|s| s.span), "train + val + test must be 1")
                    .help("for example `split train=0.8 val=0.1 test=0.1`"),
            );
        }
        let (labels_file, labels_array) = self.labels(f, format);
        let written = |key: &str| {
            f.columns(key)
                .into_iter()
                .map(|c| c.value)
                .collect::<Vec<_>>()
        };
        // `label` with another format is reported by `keys_for_format`.
        let columns = format.is_table() || format.kind() == FormatKind::Images { listed: true };
        let csv_label = f.value("label").is_some() && columns;
        let label = match (csv_label, &labels_file) {
            (true, Some(file)) => {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::data::label_and_labels",
                        "the labels come either from a column (`label`) or from a file (`labels`), not both",
                    )
                    .label_opt(f.span("label"), "a label column")
                    .label_opt(file.span, "a labels file")
                    .help("remove one: with a labels file, every column of `source` can be a feature"),
                );
                Vec::new()
            }
            (true, None) => written("label"),
            (false, Some(_)) => Vec::new(),
            (false, None) if columns => {
                vec![Column::Last]
            }
            (false, None) => Vec::new(),
        };
        if format.kind() == FormatKind::Array && labels_file.is_none() && f.span.is_some() {
            self.diags.push(
                Diagnostic::error(
                    "pipeline::data::no_labels",
                    format!(
                        "{} data needs a labels file: the file in `source` holds the features only",
                        format.title()
                    ),
                )
                .label_opt(source_span, "features only")
                .help("add `labels \"labels.npy\"` (or a `.csv` of labels) to `data`"),
            );
        }
        let features = match format.kind() {
            FormatKind::Table { .. } | FormatKind::Images { listed: true } => written("features"),
            FormatKind::Images { listed: false } | FormatKind::Array | FormatKind::Samples => {
                Vec::new()
            }
            FormatKind::Arrays => match written("features").as_slice() {
                [] => vec![Column::Name("x".to_string())],
                [Column::Name(name)] => vec![Column::Name(name.clone())],
                _ => {
                    self.diags.push(
                        Diagnostic::error(
                            "pipeline::data::features_not_an_array",
                            format!(
                                "for {} data, `features` is the name of one array in the file",
                                format.title()
                            ),
                        )
                        .label_opt(f.span("features"), "not one array name")
                        .help("write `features \"x\"`; the array holds every feature of a sample"),
                    );
                    vec![Column::Name("x".to_string())]
                }
            },
        };
        let comment = match f.opt_text("comment") {
            None => None,
            Some(c) if c.len() == 1 && c.is_ascii() && c != "\"" => Some(c.as_bytes()[0]),
            Some(c) => {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::data::bad_comment",
                        format!("`data.comment` is one ASCII character, not `{c}`"),
                    )
                    .label_opt(f.span("comment"), "one character")
                    .help("for example `comment \"#\"`"),
                );
                None
            }
        };
        DataSpec {
            source: Spanned {
                value: source,
                span: source_span,
            },
            format,
            dialect: Dialect {
                // Not reached: `delimiter` has a default.
                delimiter: Delimiter::parse(&f.text("delimiter")).unwrap_or(Delimiter::Auto),
                header: f.bool("header"),
                skip_rows: f.int("skip-rows").max(0) as u64,
                comment,
            },
            label,
            features,
            labels_array,
            labels_file,
            // Not reached: `missing` and `scale` have defaults.
            missing: Missing::parse(&f.text("missing")).unwrap_or(Missing::Error),
            scale: Scale::parse(&f.text("scale")).unwrap_or(Scale::None),
            scale_label: Spanned {
                // Not reached: `scale-label` has a default.
                value: Scale::parse(&f.text("scale-label")).unwrap_or(Scale::None),
                span: f.span("scale-label"),
            },
            split,
            window: self.window(f, format),
            text: self.text(f, format),
            images: self.images(node, f, format),
            padding_id: self.padding_id(f, format),
            extra_inputs: Vec::new(),
            categorical: Vec::new(),
            dates: Vec::new(),
            max_categories: f.int("max-categories").max(2) as u64,
            load: self.load(f, format),
            workers: f.opt_int("workers").map(|w| w.max(0) as u64),
            prefetch: f.int("prefetch").max(1) as u64,
            span: f.span,
        }
    }

    /// `data.window`: rows of numbers held in memory, in their order: not images, texts,
    /// token ids or streamed rows, not rows left out or shuffled.
    fn window(&mut self, f: &Fields, format: DataFormat) -> Option<WindowSpec> {
        let w = f.section_fields("window")?;
        let split = f.section_fields("split");
        let refuse = |why: String, other: Option<miette::SourceSpan>, help: &str| {
            Diagnostic::error("pipeline::data::window_not_rows", why)
                .label_opt(w.span, "windows of rows")
                .label_opt(other, "this")
                .help(help.to_string())
        };
        let what = if format.is_images() {
            Some((
                "images are not rows of a series",
                f.span("source"),
                "remove `window`",
            ))
        } else if let Some(text) = f.section_fields("text") {
            Some((
                "a text column is tokenised into a sequence already",
                text.span,
                "remove `window`",
            ))
        } else if f.value("padding-id").is_some() {
            Some((
                "token ids are a sequence already",
                f.span("padding-id"),
                "remove `window`",
            ))
        } else if f.text("load") == Load::Stream.as_str() {
            Some((
                "windows are cut from rows held in memory, not streamed",
                f.span("load"),
                "remove `load`",
            ))
        } else if f.text("missing") == Missing::DropRow.as_str() {
            Some((
                "leaving a row out would join the rows around it into one window",
                f.span("missing"),
                "fill missing values instead: `missing \"mean\"` or `\"median\"`",
            ))
        } else if w.value("time").is_some() && !format.is_table() {
            Some((
                "`time` names a column, and this data is not a table",
                w.span("time"),
                "order the rows in the file, and remove `time`",
            ))
        } else if split.is_some_and(|s| s.bool("stratify")) {
            Some((
                "windows are split in time order, not by class",
                split.and_then(|s| s.span),
                "remove `stratify`",
            ))
        } else if split.is_some_and(|s| s.value("shuffle").is_some() && s.bool("shuffle")) {
            Some((
                "windows are split in time order: shuffling would train on the future",
                split.and_then(|s| s.span),
                "remove `shuffle`",
            ))
        } else if split.is_some_and(|s| s.value("folds").is_some()) {
            Some((
                "windows are split in time order: a fold before the last would train on the future",
                split.and_then(|s| s.span),
                "remove `folds`, and evaluate on the later rows (`split train=0.8 test=0.2`)",
            ))
        } else {
            None
        };
        if let Some((why, span, help)) = what {
            self.diags.push(refuse(
                format!("`window` makes samples of consecutive rows, but {why}"),
                span,
                help,
            ));
        }
        Some(WindowSpec {
            length: w.int("length").max(1) as u64,
            horizon: w.int("horizon").max(0) as u64,
            stride: w.int("stride").max(1) as u64,
            time: w.opt_text("time").map(|value| Spanned {
                value,
                span: w.span("time"),
            }),
            span: w.span,
        })
    }

    /// `data.load`: `stream` reads `.npy` and Parquet features and images only, and not
    /// what needs every value at once (a median) or the ids in memory (`padding-id`, a
    /// text column).
    fn load(&mut self, f: &Fields, format: DataFormat) -> Spanned<Load> {
        // Not reached: `load` has a default.
        let load = Load::parse(&f.text("load")).unwrap_or(Load::Auto);
        let span = f.span("load");
        if load == Load::Stream {
            let refuse = |why: String, other: Option<miette::SourceSpan>, help: &str| {
                Diagnostic::error("pipeline::data::not_streamable", why)
                    .label_opt(span, "streams")
                    .label_opt(other, "this")
                    .help(help.to_string())
            };
            let format_span = f.span("format").or(f.span("source"));
            if !format.streams() && !format.is_images() {
                let streamed: Vec<&str> = DataFormat::all()
                    .into_iter()
                    .filter(|f| f.streams())
                    .map(DataFormat::title)
                    .collect();
                self.diags.push(refuse(
                    format!("`load \"stream\"` reads {} features and images, and this data is {}", formats::listed(&streamed, "and"), format.as_str()),
                    format_span,
                    "save the features as `.npy` (one file, or shards: `source \"x-*.npy\"`) or Parquet, or remove `load`",
                ));
            } else if let Some(text) = f.section_fields("text") {
                self.diags.push(refuse(
                    "texts are tokenised into memory: `load \"stream\"` does not take a text column yet".into(),
                    text.span,
                    "remove `load`: the token ids are held in memory",
                ));
            } else if f.text("missing") == Missing::Median.as_str() {
                self.diags.push(refuse(
                    "a streamed data set cannot fill with the median: it would need every training value at once".into(),
                    f.span("missing"),
                    "fill with `missing \"mean\"`, leave the rows out (`\"drop-row\"`), or `load \"memory\"`",
                ));
            } else if f.value("padding-id").is_some() {
                self.diags.push(refuse(
                    "token ids (`padding-id`) are read into memory: `load \"stream\"` does not take them yet".into(),
                    f.span("padding-id"),
                    "remove `load`: token ids are read into memory",
                ));
            }
        }
        Spanned { value: load, span }
    }

    /// `data.labels`: a labels file (a name with the extension of a format that holds
    /// labels, [`DataFormat::holds_labels`]), or for NPZ / safetensors the name of the
    /// labels array (default `y`).
    fn labels(&mut self, f: &Fields, format: DataFormat) -> (Option<Spanned<PathBuf>>, String) {
        let Some(text) = f.opt_text("labels") else {
            return (None, "y".to_string());
        };
        let named = DataFormat::of_name(Path::new(&text));
        if named.is_some_and(DataFormat::holds_labels) {
            let file = Spanned {
                value: PathBuf::from(&text),
                span: f.span("labels"),
            };
            return (Some(file), "y".to_string());
        }
        match format.kind() {
            FormatKind::Arrays => (None, text),
            // Reported by `keys_for_format`.
            FormatKind::Images { .. } => (None, "y".to_string()),
            FormatKind::Table { .. } | FormatKind::Array | FormatKind::Samples => {
                let endings = DataFormat::endings(true);
                let d = if named.is_some() {
                    Diagnostic::error(
                        "pipeline::data::bad_labels_file",
                        format!("a labels file is {endings}, not `{text}`"),
                    )
                    .label_opt(f.span("labels"), "not a labels file format")
                    .help("save the labels as one .npy array, or as a CSV with one row per sample")
                } else {
                    Diagnostic::error(
                        "pipeline::data::bad_labels_file",
                        format!("`{text}` is not a labels file: its name needs the extension {endings}"),
                    )
                    .label_opt(f.span("labels"), "a labels file?")
                    .help("name the labels file with its extension (`labels \"y.csv\"`); a label column of the data is `label \"name\"`")
                };
                self.diags.push(d);
                (None, "y".to_string())
            }
        }
    }

    /// Keys written in `data` that the format does not read are errors, never ignored.
    /// `csv_inputs`: some `data.inputs` file is a CSV, read with the dialect keys.
    fn keys_for_format(&mut self, f: &Fields, format: DataFormat, csv_inputs: bool) {
        const DIALECT: &[(&str, &str)] = &[
            ("header", "only CSV files have a header"),
            ("delimiter", "only CSV files have delimiters"),
            ("skip-rows", "only CSV files have rows to skip"),
            ("comment", "only CSV files have comment lines"),
        ];
        const NOT_TEXT: (&str, &str) = ("text", "texts are a column of a CSV or Parquet file");
        const NOT_IMAGES: (&str, &str) = (
            "images",
            "images come from `format \"image-folder\"` or `\"image-list\"`",
        );
        const IMAGES: &[(&str, &str)] = &[
            ("missing", "images have no missing values"),
            ("scale", "images are scaled by `normalize` in `data.images`"),
            ("padding-id", "images are not token ids"),
        ];
        let name = format.title();
        let unused: Vec<(&str, &str)> = match format.kind() {
            FormatKind::Table { text: true, .. } => vec![NOT_IMAGES],
            FormatKind::Table { text: false, .. } => DIALECT
                .iter()
                .map(|&(key, _)| (key, "the file names and types its columns: only `label` and `features` choose among them"))
                .chain([NOT_IMAGES])
                .collect(),
            FormatKind::Images { listed: false } => [
                DIALECT,
                IMAGES,
                &[
                    NOT_TEXT,
                    ("label", "the labels are the class directories' names"),
                    ("features", "the features are the images"),
                    ("labels", "the labels are the class directories' names"),
                ],
            ]
            .concat(),
            FormatKind::Images { listed: true } => [
                IMAGES,
                &[
                    ("labels", "the labels are the listing's `label` column"),
                    NOT_TEXT,
                ],
            ]
            .concat(),
            FormatKind::Array => [
                DIALECT,
                &[
                    ("label", "name the labels file: `labels \"labels.npy\"`"),
                    ("features", "the features are the array in `source`"),
                    NOT_IMAGES,
                    NOT_TEXT,
                ],
            ]
            .concat(),
            FormatKind::Arrays => [
                DIALECT,
                &[
                    ("label", "name the labels array: `labels \"y\"`, or a labels file: `labels \"y.npy\"`"),
                    NOT_IMAGES,
                    NOT_TEXT,
                ],
            ]
            .concat(),
            FormatKind::Samples => [
                DIALECT,
                &[
                    ("label", "its code reads the labels, or name a labels file: `labels \"y.npy\"`"),
                    ("features", "its code reads every feature of a sample"),
                    NOT_IMAGES,
                    NOT_TEXT,
                ],
            ]
            .concat(),
        };
        // A CSV labels file (or input) is read with the dialect keys, whatever the data's
        // format.
        let csv_labels = csv_inputs
            || f.opt_text("labels").is_some_and(|l| {
                DataFormat::of_name(Path::new(&l)).is_some_and(DataFormat::is_text_table)
            });
        for (key, help) in unused {
            if csv_labels && DIALECT.iter().any(|(k, _)| *k == key) {
                continue;
            }
            if f.value(key).is_some() {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::data::key_not_for_format",
                        format!("`data.{key}` does not apply to {name} data"),
                    )
                    .label_opt(f.span(key), format!("not read for {name}"))
                    .help(help),
                );
            }
        }
    }

    /// The optimizer `f` (its node `node`, for its groups); `None` when its kind is left
    /// out or unknown (reported: no member stands in for it).
    fn optimizer(&mut self, f: &Fields, node: Option<&KdlNode>) -> Option<OptimizerSpec> {
        // The reader took only registered names; `optimizer` left out is reported.
        let kind = Optimizer::named(&f.opt_text("kind")?)?;
        let spec = OptimizerSpec {
            kind,
            lr: f.float("lr"),
            weight_decay: f.float("weight-decay"),
            momentum: f.float("momentum"),
            nesterov: f.bool("nesterov"),
            beta1: f.float("beta1"),
            beta2: f.float("beta2"),
            eps: f.float("eps"),
            alpha: f.float("alpha"),
            centered: f.bool("centered"),
            settings: kind
                .describe()
                .keys
                .iter()
                .filter(|k| !optimizers::TYPED_KEYS.contains(&k.name))
                .map(|k| (k.name.to_string(), f.float(k.name)))
                .collect(),
            groups: self.param_groups(node, kind),
        };
        // `nesterov` is `sgd`'s only.
        if spec.nesterov && spec.momentum <= 0.0 {
            self.diags.push(
                Diagnostic::error(
                    "pipeline::optimizer::nesterov_without_momentum",
                    "Nesterov momentum needs a momentum above 0",
                )
                .label_opt(f.span("nesterov"), "nesterov is on")
                .label_opt(f.span("momentum"), "momentum is 0")
                .help("add `momentum=0.9`, or remove `nesterov=#true`"),
            );
        }
        Some(spec)
    }

    /// The registered callbacks a `train` stage turns on: each a registered name, once.
    /// `schedule { torchscript "lr.pt" }`: the module, which computes the whole curve (a
    /// `kind` or a warm-up beside it is refused, an `interval` ignored).
    fn schedule_script(&mut self, f: &Fields, base_dir: &Path) -> Option<TorchScriptSpec> {
        let path = PathBuf::from(f.opt_text("torchscript")?);
        for (key, why) in [("kind", "a curve"), ("warmup-epochs", "a warm-up")] {
            if f.value(key).is_some() {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::schedule::kind_and_torchscript",
                        format!("`schedule` has {why} and a TorchScript module: the module computes the whole curve"),
                    )
                    .label_opt(f.span(key), why)
                    .label_opt(f.span("torchscript"), "a module")
                    .help(format!("remove `{key}` (the module's `forward(step, epoch)` gives every step's factor), or the module")),
                );
            }
        }
        if f.value("interval").is_some() {
            self.diags.push(
                Diagnostic::warning(
                    "pipeline::manifest::ignored_key",
                    "`schedule.interval` has no effect with a `torchscript` schedule",
                )
                .label_opt(f.span("interval"), "ignored")
                .help("the module's `forward(step, epoch)` is given both: remove `interval`"),
            );
        }
        Some(TorchScriptSpec {
            file: base_dir.join(&path),
            path: Spanned {
                value: path,
                span: f.span("torchscript"),
            },
        })
    }

    /// Reports each of `patterns` that is not a glob pattern.
    pub(crate) fn bad_patterns(&mut self, patterns: &[Spanned<String>]) {
        for pattern in patterns {
            if let Err(e) = glob::Pattern::new(&pattern.value) {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::train::bad_pattern",
                        format!("`{}` is not a glob pattern: {}", pattern.value, e.msg),
                    )
                    .label_opt(pattern.span, "in this pattern")
                    .help("`*` matches any characters (dots included), `?` one character, `[…]` one of a set: `\"0.*\"`, `\"*.bias\"`"),
                );
            }
        }
    }

    /// The schedule `schedule.kind` names, with the numbers it takes (defaults applied)
    /// and, for one that takes a `monitor`, what it watches.
    fn schedule_kind(&mut self, f: &Fields) -> Option<ScheduleKind> {
        // The reader took only registered names (and reported any other); not written,
        // `kind` is the schema's default.
        if f.refused.contains(&"kind") {
            return None;
        }
        let member = Schedule::named(&f.text("kind"))?;
        let mut settings = schedules::Settings::default();
        for key in member.describe().keys {
            let value = match key.ty {
                Ty::Int { .. } => f.opt_int(key.name).map(schedules::Number::Int),
                Ty::Float { .. } => f
                    .opt_float(key.name)
                    .or(match f.default(key.name) {
                        Some(Val::Float(v)) => Some(v),
                        _ => None,
                    })
                    .map(schedules::Number::Float),
                // `monitor` and `mode`: below.
                _ => None,
            };
            if let Some(value) = value {
                settings.insert(key.name, value);
            }
        }
        let plateau = member
            .describe()
            .keys
            .iter()
            .any(|k| std::ptr::eq(*k, &schedules::MONITOR))
            .then(|| PlateauWatch {
                monitor: self.plateau_monitor(f),
                mode: f.opt_text("mode").and_then(|m| Mode::parse(&m)),
            });
        Some(ScheduleKind {
            member,
            settings,
            plateau,
        })
    }

    /// `reduce-on-plateau`'s `monitor`, which it cannot do without.
    fn plateau_monitor(&mut self, f: &Fields) -> Spanned<Monitor> {
        if f.opt_text("monitor").is_none() {
            self.diags.push(
                Diagnostic::error(
                    "pipeline::schedule::no_monitor",
                    "`reduce-on-plateau` needs a `monitor`: the value whose plateau reduces the learning rate",
                )
                .label_opt(f.span("kind").or(f.span), "reduces on the plateau of nothing")
                .help("add `monitor=\"val.loss\"` (or `loss`, `val.accuracy`, `val.f1-macro`, …)"),
            );
            return Spanned {
                value: Monitor::parse("val.loss"),
                span: None,
            };
        }
        monitor(f)
    }

    fn stage(&mut self, f: &Fields, kind: StageKind) -> StageSpec {
        let name = f.text("name");
        let name_span = f.span("name").or(f.name_span);
        if !valid_stage_name(&name) {
            self.diags.push(
                Diagnostic::error(
                    "pipeline::stage::bad_name",
                    format!("`{name}` is not a valid stage name"),
                )
                .label_opt(name_span, "invalid name")
                .help("use letters, digits, `-` and `_`, e.g. `fine-tune`"),
            );
        }
        let config = self.stage_config(f, kind);
        StageSpec {
            name: Spanned {
                value: name,
                span: name_span,
            },
            needs: f.texts("needs"),
            config,
            span: f.span,
        }
    }
}

/// A file path key, located.
pub(crate) fn path(f: &Fields, key: &str) -> Option<Spanned<PathBuf>> {
    f.opt_text(key).map(|p| Spanned {
        value: PathBuf::from(p),
        span: f.span(key),
    })
}

/// The `monitor` of an `early-stop` or `keep-best` block, located.
pub(crate) fn monitor(block: &Fields) -> Spanned<Monitor> {
    Spanned {
        value: Monitor::parse(&block.text("monitor")),
        span: block.span("monitor").or(block.span),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the bounds of `limits.rs` let through must parse within `PARSE_STACK`,
    /// even where the lexer's depth and the parser's would differ.
    #[test]
    fn the_worst_text_within_the_limits_parses_on_the_parse_stack() {
        let braces = "a{".repeat(limits::MAX_BRACES);
        assert!(parse(&braces).is_err());
        let marks = format!("/*{}", "*/".repeat(limits::MAX_BYTES / 2 - 1));
        assert!(marks.len() <= limits::MAX_BYTES);
        assert!(parse(&marks).is_err());
        let stars = format!("/*{}*/", "*".repeat(limits::MAX_BYTES - 4));
        assert!(parse(&stars).is_ok());
    }

    /// How lowering reads the choice key `section.key` back from the manifest it built,
    /// as a manifest name; `None` for a key this test does not know.
    fn lowered(section: &str, key: &str) -> Option<fn(&Manifest) -> &'static str> {
        Some(match (section, key) {
            ("data", "format") => |m| m.data.format.as_str(),
            ("data", "scale") => |m| m.data.scale.as_str(),
            ("data", "delimiter") => |m| m.data.dialect.delimiter.as_str(),
            ("data", "missing") => |m| m.data.missing.as_str(),
            ("loss", "kind") => |m| m.loss.kind.as_str(),
            ("loss", "target") => |m| m.loss.kind.target().as_str(),
            ("optimizer", "kind") => |m| m.optimizer.kind.as_str(),
            ("schedule", "kind") => |m| m.schedule.kind.name(),
            ("schedule", "interval") => |m| m.schedule.interval.map_or("", Interval::as_str),
            ("schedule", "mode") => |m| match &m.schedule.kind.plateau {
                Some(p) => p.mode.map_or("", Mode::as_str),
                None => panic!("not reduce-on-plateau: {:?}", m.schedule.kind),
            },
            ("accelerator", "precision") => |m| m.accelerator.precision.as_str(),
            ("accelerator", "loss-scale") => {
                |m| m.accelerator.loss_scale.map_or("", LossScale::as_str)
            }
            ("accelerator", "strategy") => |m| m.accelerator.distributed.strategy.as_str(),
            ("accelerator", "backend") => |m| m.accelerator.distributed.backend.as_str(),
            ("accelerator", "shard-remainder") => {
                |m| match m.accelerator.distributed.drop_remainder {
                    false => ShardRemainder::Pad.as_str(),
                    true => ShardRemainder::Drop.as_str(),
                }
            }
            ("accelerator", "sampler") => |m| match m.accelerator.distributed.bucketed {
                false => SamplerName::Distributed.as_str(),
                true => SamplerName::Bucketed.as_str(),
            },
            ("data", "load") => |m| m.data.load.value.as_str(),
            ("data", "scale-label") => |m| m.data.scale_label.value.as_str(),
            ("sweep", "mode") => |m| {
                m.sweep
                    .as_ref()
                    .and_then(|s| s.mode)
                    .map_or("", Mode::as_str)
            },
            ("eval", "split") => |m| match &m.stages[1].config {
                StageConfig::Eval(e) => e.split.value.as_str(),
                other => panic!("not the eval stage: {other:?}"),
            },
            _ => return None,
        })
    }

    /// Every name of every `Ty::Choice` list (and `Ty::Member` family) in the schema,
    /// given with `--set`, lowers to the value of that name, and every default is one of
    /// its list: the fallbacks of the choice keys are reached only for a required key
    /// that was left out.
    #[test]
    fn every_name_of_every_choice_list_lowers_to_that_name() {
        // A labels file, which every format but images may have (and NPY needs).
        const BASE: &str = "data \"d.csv\" labels=\"y.npy\"\nmodel { linear 4 }\nloss \"cross-entropy\"\noptimizer \"adam\"\ntrain\neval needs=\"train\"\ncheckpoint needs=\"train\"\n";
        let mut sections: Vec<&Section> = schema::sections()
            .into_iter()
            .chain(schema::STAGES.iter().copied())
            .collect();
        // Layers and structures: `every_name_of_every_model_choice_lowers_to_that_name`.
        sections.push(&schema::SPLIT);
        let mut keys = 0;
        for section in sections {
            for key in section.keys {
                // Member keys too: every registered precision and strategy.
                let names = key.ty.names();
                if names.is_empty() {
                    continue;
                }
                let what = format!("{}.{}", section.name, key.name);
                let lowered = lowered(section.name, key.name).unwrap_or_else(|| {
                    panic!("`{what}` is a choice this test does not know: lower it with its enum's `parse`, and add it to `lowered`")
                });
                if let Some(default) = key.default {
                    assert!(
                        matches!(default, schema::Val::Text(d) if names.contains(&d)),
                        "`{what}`: the default {default:?} is not one of {names:?}"
                    );
                }
                for name in &names {
                    let ov = Override::parse(&format!("{what}={name}")).unwrap();
                    // Images take their labels from the folder or the listing; only
                    // `.npy` data and images stream.
                    // … and `reduce-on-plateau` needs its monitor, and alone has a mode.
                    let plateau = "schedule \"reduce-on-plateau\" monitor=\"loss\"\n";
                    let base = match (name.starts_with("image-"), what.as_str()) {
                        (true, _) => BASE.replace(" labels=\"y.npy\"", ""),
                        (false, "data.load") => BASE.replace("d.csv", "d.npy"),
                        // A registered loss says its target itself.
                        (false, "loss.target") => {
                            BASE.replace("loss \"cross-entropy\"", "loss torchscript=\"l.pt\"")
                        }
                        (false, "schedule.mode") => format!("{BASE}{plateau}"),
                        (false, "sweep.mode") => {
                            format!("{BASE}sweep {{ grid {{ optimizer.lr 0.1 0.2; }}; }}\n")
                        }
                        (false, "schedule.kind") if *name == "reduce-on-plateau" => {
                            format!("{BASE}{plateau}")
                        }
                        (false, _) => BASE.to_string(),
                    };
                    let out = lower(&base, "t", Path::new(""), &[ov]);
                    assert!(
                        out.diagnostics.is_empty(),
                        "{what}={name}: {:#?}",
                        out.diagnostics
                    );
                    let m = out.manifest.unwrap();
                    // `auto` goes by the extension of `d.csv`.
                    let expected = match (what.as_str(), *name) {
                        ("data.format", schema::AUTO_FORMAT) => formats::CSV.name,
                        _ => name,
                    };
                    assert_eq!(lowered(&m), expected, "{what}={name}");
                }
                keys += 1;
            }
        }
        assert_eq!(keys, 20, "every choice key was tried");
    }
    /// The same for the choice keys of layers and structures (which `--set` cannot
    /// reach): each name, written in a model, is the value the lowered node holds.
    #[test]
    fn every_name_of_every_model_choice_lowers_to_that_name() {
        let mut keys = 0;
        for section in schema::LAYERS.iter().chain(schema::STRUCTURES).copied() {
            for key in section.keys {
                let schema::Ty::Choice(names) = key.ty else {
                    continue;
                };
                let required: String = section
                    .keys
                    .iter()
                    .filter(|k| k.required)
                    .map(|k| format!(" {}=1", k.name))
                    .collect();
                let body = match section.children {
                    Children::Keys => "",
                    Children::Layers => " { relu; }",
                    Children::Branches => " { branch { relu; }; branch { relu; }; }",
                    Children::Transforms
                    | Children::Inputs
                    | Children::Swept
                    | Children::Repeated(_) => {
                        unreachable!(
                            "no layer holds transforms, inputs, swept keys or repeated nodes"
                        )
                    }
                };
                for name in names {
                    let text = format!(
                        "data \"d.csv\"\nmodel {{ {}{required} {}=\"{name}\"{body} }}\nloss \"mse\"\noptimizer \"adam\"\ntrain\n",
                        section.name, key.name
                    );
                    let out = lower(&text, "t", Path::new(""), &[]);
                    assert!(out.diagnostics.is_empty(), "{text}: {:#?}", out.diagnostics);
                    let m = out.manifest.unwrap();
                    let node = serde_json::to_value(&m.model.nodes[0]).unwrap();
                    assert_eq!(
                        node[key.name.replace('-', "_")],
                        *name,
                        "{}.{}={name}: {node}",
                        section.name,
                        key.name
                    );
                }
                keys += 1;
            }
        }
        assert_eq!(
            keys, 8,
            "every choice key of a layer or structure was tried"
        );
    }
}
