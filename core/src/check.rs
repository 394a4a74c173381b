//! The rules that need the whole manifest: stage names, dependencies, cycles, and which
//! trained model each stage uses; then the accelerator's compatibility rules
//! (`compat.rs`). Each rule is one function; all of them run, and every problem they find
//! is returned.

use crate::plan::stage_graph;
use manifests::{
    suggest, DataFormat, Diagnostic, EvalSpec, FormatKind, InputFile, Manifest, Spanned,
    StageConfig, StageKind, StageSpec, Target, TrainSpec, WeightsFrom,
};
use petgraph::algo::tarjan_scc;
use petgraph::graph::NodeIndex;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::PathBuf;

/// Every cross-cutting rule, in a stable order.
pub fn check(manifest: &Manifest) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    no_stages(manifest, &mut diags);
    duplicate_stage_names(manifest, &mut diags);
    unknown_dependencies(manifest, &mut diags);
    cycles(manifest, &mut diags);
    model_sources(manifest, &mut diags);
    empty_eval_splits(manifest, &mut diags);
    stage_sources(manifest, &mut diags);
    labels_and_loss(manifest, &mut diags);
    monitors(manifest, &mut diags);
    best_weights(manifest, &mut diags);
    eval_metrics(manifest, &mut diags);
    scripted_metrics(manifest, &mut diags);
    diags.extend(crate::compat::check(
        manifest,
        &crate::compat::Facts::at_check(),
    ));
    diags
}

fn no_stages(m: &Manifest, diags: &mut Vec<Diagnostic>) {
    if m.stages.is_empty() {
        diags.push(
            Diagnostic::error(
                "pipeline::stage::none",
                "the manifest has no stages, so there is nothing to run",
            )
            .help("add a stage, for example `train { epochs 10 }`"),
        );
    }
}

fn duplicate_stage_names(m: &Manifest, diags: &mut Vec<Diagnostic>) {
    let mut first: BTreeMap<&str, &StageSpec> = BTreeMap::new();
    for stage in &m.stages {
        match first.get(stage.name()) {
            Some(earlier) => diags.push(
                Diagnostic::error(
                    "pipeline::stage::duplicate_name",
                    format!("two stages are named `{}`", stage.name()),
                )
                .label_opt(stage.name.span, "named again here")
                .label_opt(earlier.name.span, "first named here")
                .help(format!(
                    "give the second one its own name, e.g. `{} \"{}-2\"`",
                    stage.kind().as_str(),
                    stage.name()
                )),
            ),
            None => {
                first.insert(stage.name(), stage);
            }
        }
    }
}

/// Distinct unknown names given a "did you mean": each search is linear in the stages,
/// so past this many the help lists stages only, and `check` stays linear in them.
const SUGGESTED: usize = 32;

fn unknown_dependencies(m: &Manifest, diags: &mut Vec<Diagnostic>) {
    let names: Vec<&str> = m.stages.iter().map(StageSpec::name).collect();
    let known: HashSet<&str> = names.iter().copied().collect();
    // The closest stage to each unknown name, searched once (every stage may need the
    // same missing one).
    let mut closest: HashMap<&str, Option<&str>> = HashMap::new();
    for stage in &m.stages {
        let me = stage.name();
        for need in &stage.needs {
            let need_name = need.value.as_str();
            if known.contains(need_name) {
                continue;
            }
            let near = match closest.get(need_name) {
                Some(near) => *near,
                None if closest.len() < SUGGESTED => {
                    let near = suggest::closest(need_name, names.iter().copied());
                    closest.insert(need_name, near);
                    near
                }
                None => None,
            };
            // A stage does not need itself: the closest of the others then.
            let near = match near {
                Some(n) if n == me => {
                    suggest::closest(need_name, names.iter().copied().filter(|n| *n != me))
                }
                other => other,
            };
            let help = match near {
                Some(n) => format!("did you mean `{n}`?"),
                None if names.len() <= 1 => "there is no other stage here".into(),
                None => format!(
                    "expected one of: {}",
                    suggest::listing_of(
                        names.iter().copied().filter(|n| *n != me),
                        names.len() - 1
                    )
                ),
            };
            diags.push(
                Diagnostic::error(
                    "pipeline::stage::unknown_dependency",
                    format!("stage `{me}` needs `{need_name}`, which does not exist"),
                )
                .label_opt(need.span, "no stage has this name")
                .help(help),
            );
        }
    }
}

fn cycles(m: &Manifest, diags: &mut Vec<Diagnostic>) {
    let graph = stage_graph(m);
    let mut components = tarjan_scc(&graph);
    components.sort_by_key(|c| c.iter().map(|n| n.index()).min());
    for component in components {
        let start = *component
            .iter()
            .min_by_key(|n| n.index())
            .expect("components are not empty");
        let looped = component.len() > 1 || graph.contains_edge(start, start);
        if !looped {
            continue;
        }
        let members: HashSet<NodeIndex> = component.iter().copied().collect();
        // The shortest path from `start` back to itself, inside the component.
        let mut parent: BTreeMap<NodeIndex, NodeIndex> = BTreeMap::new();
        let mut queue = VecDeque::from([start]);
        let mut last = start;
        'search: while let Some(n) = queue.pop_front() {
            for next in graph.neighbors(n) {
                if next == start {
                    last = n;
                    break 'search;
                }
                if members.contains(&next) && !parent.contains_key(&next) {
                    parent.insert(next, n);
                    queue.push_back(next);
                }
            }
        }
        let mut path = vec![last];
        while let Some(p) = parent.get(path.last().expect("not empty")) {
            path.push(*p);
        }
        path.reverse(); // start … last; each needs the previous one
        let stages: Vec<&StageSpec> = path.iter().map(|n| &m.stages[graph[*n]]).collect();
        let mut names: Vec<&str> = stages.iter().map(|s| s.name()).collect();
        names.push(stages[0].name());
        let mut d = Diagnostic::error(
            "pipeline::stage::cycle",
            format!(
                "stages depend on each other in a cycle: {}",
                names.join(" → ")
            ),
        );
        for (i, stage) in stages.iter().enumerate() {
            let previous = stages[(i + stages.len() - 1) % stages.len()].name();
            let span = stage
                .needs
                .iter()
                .find(|n| n.value == previous)
                .and_then(|n| n.span);
            d = d.label_opt(span, format!("`{}` needs `{previous}`", stage.name()));
        }
        diags.push(d.help("remove one of these `needs` so the stages can run in order"));
    }
}

/// Each stage by its name (the first of two with one name: a duplicate is reported).
fn stages_by_name(m: &Manifest) -> HashMap<&str, &StageSpec> {
    let mut by_name = HashMap::with_capacity(m.stages.len());
    for stage in &m.stages {
        by_name.entry(stage.name()).or_insert(stage);
    }
    by_name
}

/// An `eval`, `checkpoint` or `predict` stage takes its model from exactly one `train` stage it
/// needs; a `train` stage may start from at most one.
fn model_sources(m: &Manifest, diags: &mut Vec<Diagnostic>) {
    let mut trainers: Vec<&str> = Vec::new();
    for stage in m.stages.iter().filter(|s| s.kind() == StageKind::Train) {
        if !trainers.contains(&stage.training()) {
            trainers.push(stage.training());
        }
    }
    let by_name = stages_by_name(m);
    for stage in &m.stages {
        if stage
            .needs
            .iter()
            .any(|n| !by_name.contains_key(n.value.as_str()))
        {
            continue; // reported as an unknown dependency
        }
        // The folds of one training (`data.split folds=K`) are one source.
        let mut trainings = std::collections::HashSet::new();
        let sources: Vec<_> = stage
            .needs
            .iter()
            .filter(|n| {
                let need = by_name[n.value.as_str()];
                need.kind() == StageKind::Train && trainings.insert(need.training())
            })
            .collect();
        let kind = stage.kind().as_str();
        // A stage that takes a trained model's weights (`from`) takes them from a
        // `train` stage it needs; a `train` stage starts from one, or from `init`.
        match (stage.weights_from(), sources.len()) {
            (Some(_), 0) => {
                let help = match trainers.as_slice() {
                    [] => "add a `train` stage and `needs` it".to_string(),
                    [one] => format!("add `needs \"{one}\"`"),
                    many => format!("add `needs` with one of: {}", suggest::listing(many)),
                };
                diags.push(
                    Diagnostic::error(
                        "pipeline::stage::no_model",
                        format!(
                            "{kind} stage `{}` has no model: it needs no `train` stage",
                            stage.name()
                        ),
                    )
                    .label_opt(stage.name.span, "needs a trained model")
                    .help(help),
                );
            }
            (None, 1) => {
                if let StageConfig::Train(TrainSpec {
                    init: Some(init), ..
                }) = &stage.config
                {
                    diags.push(
                        Diagnostic::error(
                            "pipeline::stage::two_starts",
                            format!(
                                "train stage `{}` starts from two sets of weights",
                                stage.name()
                            ),
                        )
                        .label_opt(init.span, "weights from a file")
                        .label_opt(sources[0].span, "weights from this stage")
                        .help("keep `init` or the `train` stage in `needs`, not both"),
                    );
                }
            }
            (_, n) if n > 1 => {
                let mut d = Diagnostic::error(
                    "pipeline::stage::ambiguous_model",
                    format!("{kind} stage `{}` needs {n} `train` stages; it can take its model from only one", stage.name()),
                );
                for s in &sources {
                    d = d.label_opt(s.span, "a train stage");
                }
                diags.push(d.help(
                    "keep one `train` stage in `needs`; order the others through that stage",
                ));
            }
            _ => {}
        }
    }
}

/// Class labels are one column; a stratified split needs classes.
fn labels_and_loss(m: &Manifest, diags: &mut Vec<Diagnostic>) {
    let classification = m.loss.kind.is_classification();
    let loss = m.loss.kind.as_str();
    if classification && m.data.label.len() > 1 {
        diags.push(
            Diagnostic::error(
                "pipeline::data::several_class_labels",
                format!(
                    "`{loss}` takes one class label per sample, but `data.label` names {} columns",
                    m.data.label.len()
                ),
            )
            .label_opt(m.data.span, "several label columns")
            .label_opt(m.loss.span, "one class per sample")
            .help("keep one label column, or use a regression loss (`mse`) for several targets"),
        );
    }
    if m.data.split.stratify && !classification {
        diags.push(
            Diagnostic::error(
                "pipeline::data::stratify_without_classes",
                format!("a stratified split needs class labels, but `{loss}` is a regression loss"),
            )
            .label_opt(m.data.span, "split stratify=#true")
            .label_opt(m.loss.span, "regression loss")
            .help("remove `stratify=#true`, or use `cross-entropy` or `nll`"),
        );
    }
    let scale_label = &m.data.scale_label;
    if !scale_label.is_unscaled() && !m.loss.kind.is_regression() {
        diags.push(
            Diagnostic::error(
                "pipeline::data::scale_label_without_values",
                format!(
                    "`scale-label` scales the values a regression approaches, but `{loss}` trains on {}",
                    match classification {
                        true => "class indices",
                        false => "0/1 labels",
                    }
                ),
            )
            .label_opt(scale_label.span, "scales the labels")
            .label_opt(m.loss.span, "not a regression loss")
            .help("remove `scale-label`, or use a regression loss (`mse`, `l1`, `huber`)"),
        );
    }
}

fn empty_eval_splits(m: &Manifest, diags: &mut Vec<Diagnostic>) {
    for stage in &m.stages {
        if let StageConfig::Eval(eval) = &stage.config {
            if eval.source.is_some() {
                continue; // evaluates on the whole of another file
            }
            let split = eval.split.value;
            if m.data.split.fraction(split) <= 0.0 {
                diags.push(
                    Diagnostic::error(
                        "pipeline::stage::empty_split",
                        format!(
                            "eval stage `{}` evaluates on the `{}` split, which is empty",
                            stage.name(),
                            split.as_str()
                        ),
                    )
                    .label_opt(
                        eval.split.span.or(stage.name.span),
                        format!("`{}` has no samples", split.as_str()),
                    )
                    .help(format!(
                        "give it a fraction in `data`, e.g. `split train=0.8 {}=0.2 …`",
                        split.as_str()
                    )),
                );
            }
        }
    }
}

/// A stage's own `source` (an `eval` on another file, a `predict`) is read as the data
/// file is: a format that holds what the data holds (a text column, labels for an
/// `eval`), and nothing that comes from other files (images, `data.inputs`, a labels
/// file for an `eval`). An `eval` with a `source` evaluates all of it, not a split.
fn stage_sources(m: &Manifest, diags: &mut Vec<Diagnostic>) {
    for stage in &m.stages {
        let (source, labelled, inputs) = match &stage.config {
            StageConfig::Eval(EvalSpec {
                source: None,
                inputs,
                ..
            }) => {
                if let Some(input) = inputs.first() {
                    diags.push(
                        Diagnostic::error(
                            "pipeline::stage::unknown_input",
                            format!(
                                "eval stage `{}` gives a file of the input `{}`, but it evaluates a split of the data, whose inputs are the data's",
                                stage.name(),
                                input.name.value
                            ),
                        )
                        .label_opt(input.name.span, "for another file's samples")
                        .help("remove the `input` node, or evaluate another file: `source \"new.csv\"`"),
                    );
                }
                continue;
            }
            StageConfig::Eval(EvalSpec {
                source: Some(source),
                split,
                inputs,
                ..
            }) => {
                if split.span.is_some() {
                    diags.push(
                        Diagnostic::error(
                            "pipeline::stage::source_and_split",
                            format!(
                                "eval stage `{}` names a split and a `source`: it evaluates all of its source",
                                stage.name()
                            ),
                        )
                        .label_opt(split.span, "a split of the data file")
                        .label_opt(source.span, "the whole of this file")
                        .help("keep `source` to evaluate another file, or `split` to evaluate part of the data file"),
                    );
                }
                (source, true, inputs)
            }
            // Without a `source` (reported as a missing key) there is nothing to check.
            StageConfig::Predict(p) if p.source.value.as_os_str().is_empty() => continue,
            StageConfig::Predict(p) => (&p.source, false, &p.inputs),
            _ => continue,
        };
        let kind = stage.kind().as_str();
        let refuse = |code: &'static str, message: String, label: &str, help: &str| {
            Diagnostic::error(code, format!("{kind} stage `{}`: {message}", stage.name()))
                .label_opt(source.span.or(stage.name.span), label.to_string())
                .help(help.to_string())
        };
        if m.data.format.is_images() {
            if let Some(d) = images_source(m, stage, source, labelled, &refuse) {
                diags.push(d);
            }
            continue;
        }
        if !source_inputs(m, stage, inputs, &refuse, diags) {
            continue;
        }
        let format = DataFormat::of_name(&source.value);
        let table = format.is_some_and(DataFormat::is_table);
        // A file of samples may hold labels (its code says when it is read); an array
        // is features alone. (`of_name` gives no images.)
        let holds_labels = format.is_some_and(|f| f.kind() != FormatKind::Array);
        if format.is_none() {
            let endings = DataFormat::endings(false);
            diags.push(refuse(
                "pipeline::stage::bad_source",
                format!("{} is not a data file this reads", source.value.display()),
                &format!("not {endings}"),
                &format!("name a file the data could be: {endings}"),
            ));
        } else if m.data.text.is_some() && !table {
            diags.push(refuse(
                "pipeline::stage::bad_source",
                format!(
                    "{} has no text column: the data are texts",
                    source.value.display()
                ),
                "not a table",
                "give the texts as a .csv, .csv.gz or .parquet file with the data's text column",
            ));
        } else if labelled && m.data.labels_file.is_some() {
            diags.push(
                refuse(
                    "pipeline::stage::source_without_labels",
                    "the data's labels come from a labels file, which a `source` cannot give"
                        .into(),
                    "its labels would be in another file",
                    "evaluate a split of the data, or give the labels in the data file",
                )
                .label_opt(
                    m.data.labels_file.as_ref().and_then(|l| l.span),
                    "labels file",
                ),
            );
        } else if labelled && !holds_labels {
            diags.push(refuse(
                "pipeline::stage::source_without_labels",
                format!("{} holds no labels: an .npy file is features alone", source.value.display()),
                "features without labels",
                "evaluate on a .csv, .parquet, .npz or .safetensors file that holds the labels as the data file does",
            ));
        }
    }
}

/// A stage's `source` of image data: a `predict` stage's is a directory of images (every
/// one below it, named by its file in the predictions); an `eval` stage's is not read.
fn images_source(
    m: &Manifest,
    stage: &StageSpec,
    source: &Spanned<PathBuf>,
    labelled: bool,
    refuse: &dyn Fn(&'static str, String, &str, &str) -> Diagnostic,
) -> Option<Diagnostic> {
    let code = "pipeline::stage::source_of_images";
    if labelled {
        return Some(refuse(
            code,
            "an evaluation of images reads a split of the data: a `source` of images to evaluate is not read yet".into(),
            "another set of images",
            "evaluate a split of the data (`split \"test\"`); a `predict` stage reads a directory of images",
        ));
    }
    let StageConfig::Predict(predict) = &stage.config else {
        return None;
    };
    if DataFormat::of_name(&source.value).is_some() {
        return Some(refuse(
            code,
            format!(
                "a prediction of images reads a directory of them, not {}",
                source.value.display()
            ),
            "not a directory",
            "name a directory: every image below it is predicted, in torchvision's order",
        ));
    }
    if let Some(input) = m.data.extra_inputs.first() {
        return Some(refuse(
            code,
            format!("the model also reads `{}` (`data.inputs`), which a directory of images cannot give", input.name),
            "images alone",
            "predict on a split of the data with an `eval` stage's `output`, or export the model with a `checkpoint` stage",
        ));
    }
    predict.id.as_ref().map(|id| {
        Diagnostic::error(
            code,
            format!(
                "predict stage `{}`: `id` names a column, and images have none",
                stage.name()
            ),
        )
        .label_opt(id.span, "a column of a table")
        .help("remove `id`: each prediction of an image names its file (`file`)")
    })
}

/// Each of `data.inputs` has a file of `stage`'s (whose own `source` gives other samples
/// than the training's files hold), and each file is for one of them; `false` when not,
/// the diagnostics pushed.
fn source_inputs(
    m: &Manifest,
    stage: &StageSpec,
    inputs: &[InputFile],
    refuse: &dyn Fn(&'static str, String, &str, &str) -> Diagnostic,
    diags: &mut Vec<Diagnostic>,
) -> bool {
    let kind = stage.kind().as_str();
    // Each of `data.inputs` from a file for these samples: the training's files
    // hold the training's.
    let missing: Vec<&str> = m
        .data
        .extra_inputs
        .iter()
        .map(|i| i.name.as_str())
        .filter(|name| !inputs.iter().any(|i| i.name.value == *name))
        .collect();
    if let Some(first) = missing.first() {
        let listed: Vec<String> = missing.iter().map(|n| format!("`{n}`")).collect();
        diags.push(refuse(
            "pipeline::stage::source_and_inputs",
            format!(
                "the model also reads {} (`data.inputs`), and no file of {} is given for these samples",
                listed.join(", "),
                if missing.len() == 1 { "it" } else { "them" }
            ),
            "samples of the data file's kind only",
            &format!("give each input its file for these samples, one row per sample: `input \"{first}\" \"new-{first}.csv\"`"),
        ));
    }
    let unknown = inputs
        .iter()
        .find(|i| !m.data.extra_inputs.iter().any(|d| d.name == i.name.value));
    if let Some(input) = unknown {
        let known: Vec<String> = m
            .data
            .extra_inputs
            .iter()
            .map(|i| format!("`{}`", i.name))
            .collect();
        diags.push(
            Diagnostic::error(
                "pipeline::stage::unknown_input",
                format!(
                    "{kind} stage `{}` gives a file of the input `{}`, which `data.inputs` does not name",
                    stage.name(),
                    input.name.value
                ),
            )
            .label_opt(input.name.span, "not an input of the model")
            .help(match known.is_empty() {
                true => "the model reads the data file alone: remove the `input` node".to_string(),
                false => format!("the inputs of `data.inputs` are {}", known.join(", ")),
            }),
        );
    }
    missing.is_empty() && unknown.is_none()
}

/// What `early-stop`, `keep-best` and `reduce-on-plateau` monitor is computed: a validation metric needs a
/// validation split and is a metric of one value for the run's task; the training
/// batches give `loss` and, for classification, `accuracy`. Validation metrics need a
/// validation split too.
fn monitors(m: &Manifest, diags: &mut Vec<Diagnostic>) {
    for stage in &m.stages {
        let StageConfig::Train(train) = &stage.config else {
            continue;
        };
        for (watcher, monitor) in m.monitors(train) {
            let does = watcher.does();
            let name = monitor.value.to_string();
            let metric = &monitor.value.metric;
            if monitor.value.validation && !m.data.split.validates() {
                diags.push(
                    Diagnostic::error(
                        "pipeline::train::monitor_not_computed",
                        format!(
                            "stage `{}` {does} `{name}`, but there is no validation split to measure it on",
                            stage.name()
                        ),
                    )
                    .label_opt(monitor.span, "measured on the validation split")
                    .label_opt(m.data.span, "no `val` fraction")
                    .help("hold out a validation split (`split train=0.7 val=0.1 test=0.2`), or monitor `loss`"),
                );
            } else if !monitor.value.validation && !["loss", "accuracy"].contains(&metric.as_str())
            {
                let known =
                    crate::metrics::parse(metric).is_some() || m.scripted_metric(metric).is_some();
                let help = match known {
                    true => format!("metrics are measured on the validation split: monitor `val.{metric}`"),
                    false => "monitor `loss` or `accuracy` of the training batches, or `val.METRIC` of the validation split".into(),
                };
                diags.push(
                    Diagnostic::error(
                        "pipeline::train::monitor_not_computed",
                        format!(
                            "stage `{}` {does} `{name}`, which the training batches do not measure",
                            stage.name()
                        ),
                    )
                    .label_opt(monitor.span, "not measured")
                    .help(help),
                );
            } else if metric == "accuracy" && m.loss.kind.is_regression() {
                diags.push(
                    Diagnostic::error(
                        "pipeline::train::monitor_not_computed",
                        format!(
                            "stage `{}` {does} `{name}`, but `{}` is a regression loss: there is no accuracy",
                            stage.name(),
                            m.loss.kind.as_str()
                        ),
                    )
                    .label_opt(monitor.span, "classification only")
                    .label_opt(m.loss.span, "regression loss")
                    .help("monitor `val.loss` (or `loss`, `val.r2`)"),
                );
            } else if monitor.value.validation && metric != "loss" {
                let written = Spanned {
                    value: metric.clone(),
                    span: monitor.span,
                };
                match metric_problem(m, &written) {
                    Some(d) => diags.push(d),
                    None => diags.extend(not_one_value(&written, &name, stage, does)),
                }
            }
        }
        if !train.validate.metrics.is_empty() && !m.data.split.validates() {
            diags.push(
                Diagnostic::error(
                    "pipeline::train::no_validation_split",
                    format!(
                        "stage `{}` validates with metrics, but there is no validation split",
                        stage.name()
                    ),
                )
                .label_opt(train.validate.span, "measured on the validation split")
                .label_opt(m.data.span, "no `val` fraction")
                .help("hold out a validation split (`split train=0.7 val=0.1 test=0.2`)"),
            );
        }
        for written in &train.validate.metrics {
            match metric_problem(m, written) {
                Some(d) => diags.push(d),
                None => diags.extend(not_one_value(
                    written,
                    &written.value,
                    stage,
                    "validates with",
                )),
            }
        }
    }
}

/// A metric that gives more than one value (per class, a matrix), where one is needed;
/// `shown` is how the manifest names it there.
fn not_one_value(
    written: &Spanned<String>,
    shown: &str,
    stage: &StageSpec,
    does: &str,
) -> Option<Diagnostic> {
    let metric = crate::metrics::parse(&written.value)?;
    (!metric.one_value()).then(|| {
        Diagnostic::error(
            "pipeline::train::not_one_value",
            format!(
                "stage `{}` {does} `{shown}`, which gives more than one value",
                stage.name(),
            ),
        )
        .label_opt(written.span, "more than one value")
        .help("take one value: `f1-macro` rather than `f1-per-class`; a confusion matrix is an `eval` stage's `metrics`")
    })
}

/// `from "best"` takes weights that the `train` stage it needs keeps with `keep-best`.
fn best_weights(m: &Manifest, diags: &mut Vec<Diagnostic>) {
    let by_name = stages_by_name(m);
    for stage in &m.stages {
        let Some(from) = stage.weights_from() else {
            continue;
        };
        let WeightsFrom::Best(n) = from.value else {
            continue;
        };
        let source = stage.needs.iter().find_map(|need| {
            by_name
                .get(need.value.as_str())
                .copied()
                .filter(|s| s.kind() == StageKind::Train)
                .map(|s| (s, need))
        });
        let Some((source, need)) = source else {
            continue; // no model: reported by `model_sources`
        };
        let StageConfig::Train(train) = &source.config else {
            continue;
        };
        let kept = train.keep_best.as_ref().map_or(0, |k| k.k);
        if n > kept {
            let message = match kept {
                0 => format!(
                    "stage `{}` takes the `{}` weights of `{}`, which keeps no best weights",
                    stage.name(),
                    from.value,
                    source.name()
                ),
                k => format!(
                    "stage `{}` takes the `{}` weights of `{}`, which keeps the best {k}",
                    stage.name(),
                    from.value,
                    source.name()
                ),
            };
            diags.push(
                Diagnostic::error("pipeline::stage::no_best_weights", message)
                    .label_opt(from.span, "these weights")
                    .label_opt(need.span, "from this stage")
                    .help(match kept {
                        0 => format!(
                            "add `keep-best monitor=\"val.loss\"` to `{}`, or take `from \"last\"`",
                            source.name()
                        ),
                        k => format!(
                            "raise `keep-best k={n}` in `{}`, or take one of the best {k}",
                            source.name()
                        ),
                    }),
            );
        }
    }
}

/// The problem with metric `written` for the run's task, if any: not a metric, or a
/// metric of another kind of task.
fn metric_problem(m: &Manifest, written: &Spanned<String>) -> Option<Diagnostic> {
    let loss = &m.loss.kind;
    // A scripted metric reads the predictions of any target.
    if m.scripted_metric(&written.value).is_some() {
        return None;
    }
    let Some(metric) = crate::metrics::parse(&written.value) else {
        let scripted: Vec<String> = m
            .metrics
            .iter()
            .map(|s| format!("`{}`", s.name.value))
            .collect();
        let help = match scripted.is_empty() {
            true => format!(
                "the metrics are {}; a metric of your own is a `metric \"NAME\" {{ torchscript \"….pt\"; mode \"min\" }}` (`pipeline explain metric`)",
                crate::metrics::names()
            ),
            false => format!(
                "the metrics are {}, and this manifest's {}",
                crate::metrics::names(),
                scripted.join(", ")
            ),
        };
        return Some(
            Diagnostic::error(
                "pipeline::eval::unknown_metric",
                format!("`{}` is not a metric", written.value),
            )
            .label_opt(written.span, "not a metric")
            .help(help),
        );
    };
    // Class metrics read class indices; regression ones, the outputs of `mse`; some
    // class metrics also read multi-label outputs.
    let fits = match (loss.target(), metric.classification()) {
        (Target::Labels, _) => metric.multi_label(),
        (Target::Classes, classification) => classification,
        (Target::Values, classification) => !classification,
    };
    if fits {
        return None;
    }
    let what = match (loss.target(), metric.classification()) {
        (Target::Labels, true) => "single-label classification (one class per sample)".into(),
        (Target::Classes | Target::Values, true) => "classification (class indices)".into(),
        (Target::Classes | Target::Labels | Target::Values, false) => {
            let regressions: Vec<String> = manifests::losses::LOSSES
                .all()
                .iter()
                .filter(|l| l.target == Target::Values)
                .map(|l| format!("`{}`", l.name))
                .collect();
            format!("regression ({})", regressions.join(", "))
        }
    };
    let help = match loss.target() {
        Target::Values => "measure a regression with `mse`, `rmse`, `mae` or `r2`",
        Target::Classes => "measure a classification with `accuracy`, `f1-macro`, `auroc` …",
        Target::Labels => {
            "measure multi-label outputs with `precision-`, `recall-` or `f1-` (per label, averaged) or `auroc`; every eval reports `accuracy`, each label's"
        }
    };
    Some(
        Diagnostic::error(
            "pipeline::eval::metric_for_another_task",
            format!(
                "`{}` measures {what}, but the loss is `{}`",
                written.value,
                loss.as_str()
            ),
        )
        .label_opt(written.span, "this metric")
        .label_opt(m.loss.span, "this loss")
        .help(help),
    )
}

/// Every metric of an `eval` stage is one (`metrics.rs`), of the run's kind of task.
fn eval_metrics(m: &Manifest, diags: &mut Vec<Diagnostic>) {
    for stage in &m.stages {
        let StageConfig::Eval(eval) = &stage.config else {
            continue;
        };
        diags.extend(eval.metrics.iter().filter_map(|w| metric_problem(m, w)));
    }
}

/// A scripted metric may not take a built-in metric's name (nor `loss`, which a monitor
/// watches as `val.loss`), and one that no stage measures is warned about.
fn scripted_metrics(m: &Manifest, diags: &mut Vec<Diagnostic>) {
    for metric in &m.metrics {
        let name = &metric.name.value;
        if name == "loss" || crate::metrics::parse(name).is_some() {
            diags.push(
                Diagnostic::error(
                    "pipeline::metric::shadows_builtin",
                    format!("the metric `{name}` has the name of a built-in one"),
                )
                .label_opt(metric.name.span, "a built-in metric's name")
                .help("give the metric a name of its own (`pipeline explain eval.metrics` lists the built-in ones)"),
            );
        } else if (0..m.stages.len()).all(|i| {
            m.scripted_metrics_of(i)
                .iter()
                .all(|s| s.name.value != *name)
        }) {
            diags.push(
                Diagnostic::warning(
                    "pipeline::metric::unused",
                    format!("the metric `{name}` is measured by no stage"),
                )
                .label_opt(metric.name.span, "defined here")
                .help(format!("name it in an `eval`'s `metrics`, in `validate`'s, or monitor `val.{name}`; or remove it")),
            );
        }
    }
}

/// `bucket-by N` is a feature of the samples, when their shape is known before loading
/// the data (`first`: the data's own input's).
pub fn bucket_key(m: &Manifest, first: &[i64]) -> Option<Diagnostic> {
    let d = &m.accelerator.distributed;
    // Images have no feature column: the run says so.
    let column = d
        .bucket_by
        .filter(|_| d.bucketed && !m.data.format.is_images())?;
    let width: i64 = first.iter().product();
    (column as i64 >= width).then(|| {
        Diagnostic::error(
            "pipeline::accelerator::bad_bucket_key",
            format!("`bucket-by {column}`: a sample has {width} features"),
        )
        .label_opt(m.accelerator.span("bucket-by"), "this feature")
        .help("`bucket-by` is an index into a sample's flattened features, from 0")
    })
}
