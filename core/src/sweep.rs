//! Sweeps (`pipeline sweep`): the points of a grid of `--set` values, the metric they are
//! ranked by, and which of them may run side by side without computing a stage twice.

use crate::rng::Rng;
use manifests::{Diagnostic, Manifest, Mode, Override, Severity, StageConfig, SweepSpec, SweptKey};
use std::collections::BTreeSet;

/// One swept key and its values: `optimizer.lr=1e-3,3e-3`.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    pub key: String,
    pub values: Vec<String>,
}

impl Axis {
    pub fn parse(text: &str) -> Result<Axis, String> {
        let (key, values) = text.split_once('=').ok_or_else(|| {
            format!("`{text}` is not KEY=V1,V2,… (for example optimizer.lr=1e-3,3e-3)")
        })?;
        let key = key.trim();
        if key.is_empty() || key.split('.').any(str::is_empty) {
            return Err(format!("`{text}`: the key has an empty segment"));
        }
        let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
        if values.iter().all(String::is_empty) {
            return Err(format!("`{text}`: the grid of `{key}` is empty"));
        }
        if values.iter().any(String::is_empty) {
            return Err(format!("`{text}`: a value of `{key}` is empty"));
        }
        let mut seen = BTreeSet::new();
        if let Some(twice) = values.iter().find(|v| !seen.insert(v.as_str())) {
            return Err(format!("`{text}`: `{twice}` is there twice"));
        }
        Ok(Axis {
            key: key.to_string(),
            values,
        })
    }
}

/// A key drawn at random (`--random`): `lr=log(1e-4,1e-2)` (log-uniform),
/// `dropout=uniform(0,0.5)`, `batch-size=int(16,128)` (both ends included) or
/// `kind=choice(adam,sgd)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Random {
    pub key: String,
    pub draw: Draw,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Draw {
    Log(f64, f64),
    Uniform(f64, f64),
    Int(i64, i64),
    Choice(Vec<String>),
}

impl Random {
    pub fn parse(text: &str) -> Result<Random, String> {
        let form = "KEY=log(a,b), uniform(a,b), int(a,b) or choice(v1,v2,…)";
        let (key, spec) = text
            .split_once('=')
            .ok_or_else(|| format!("`{text}` is not {form}"))?;
        let key = key.trim();
        if key.is_empty() || key.split('.').any(str::is_empty) {
            return Err(format!("`{text}`: the key has an empty segment"));
        }
        let spec = spec.trim();
        let (kind, args) = spec
            .strip_suffix(')')
            .and_then(|s| s.split_once('('))
            .ok_or_else(|| format!("`{text}` is not {form}"))?;
        let args: Vec<&str> = args.split(',').map(str::trim).collect();
        let numbers = || -> Result<(f64, f64), String> {
            let [a, b] = args.as_slice() else {
                return Err(format!("`{text}`: `{kind}` takes two numbers"));
            };
            let n = |x: &str| {
                x.parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite())
                    .ok_or_else(|| format!("`{text}`: `{x}` is not a number"))
            };
            let (a, b) = (n(a)?, n(b)?);
            match a < b {
                true => Ok((a, b)),
                false => Err(format!(
                    "`{text}`: the range is empty ({a} is not below {b})"
                )),
            }
        };
        let draw = match kind.trim() {
            "log" => {
                let (a, b) = numbers()?;
                if a <= 0.0 {
                    return Err(format!("`{text}`: a log-uniform range is above 0"));
                }
                Draw::Log(a, b)
            }
            "uniform" => {
                let (a, b) = numbers()?;
                Draw::Uniform(a, b)
            }
            "int" => {
                let (a, b) = numbers()?;
                if a.fract() != 0.0 || b.fract() != 0.0 {
                    return Err(format!("`{text}`: `int` takes two integers"));
                }
                Draw::Int(a as i64, b as i64)
            }
            "choice" if args.iter().all(|a| !a.is_empty()) => {
                Draw::Choice(args.iter().map(|a| a.to_string()).collect())
            }
            "choice" => return Err(format!("`{text}`: a choice is empty")),
            other => return Err(format!("`{text}`: `{other}` is not one of {form}")),
        };
        Ok(Random {
            key: key.to_string(),
            draw,
        })
    }

    /// A value, as `--set` takes it: four significant digits for a real number.
    fn sample(&self, rng: &mut Rng) -> String {
        // A uniform number in [0, 1) from 53 random bits.
        let mut unit = || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let real = |x: f64| {
            let digits = 3 - x.abs().log10().floor() as i32;
            let scale = 10f64.powi(digits);
            format!("{}", (x * scale).round() / scale)
        };
        match &self.draw {
            Draw::Log(a, b) => real((a.ln() + unit() * (b.ln() - a.ln())).exp()),
            Draw::Uniform(a, b) => real(a + unit() * (b - a)),
            Draw::Int(a, b) => (a + (unit() * (b - a + 1) as f64) as i64)
                .min(*b)
                .to_string(),
            Draw::Choice(values) => values[(unit() * values.len() as f64) as usize].clone(),
        }
    }
}

/// `trials` draws of every random key, from `seed` (the same every time).
pub fn draws(randoms: &[Random], trials: u64, seed: u64) -> Vec<Vec<Override>> {
    let mut rng = Rng::new(seed);
    (0..trials)
        .map(|_| {
            randoms
                .iter()
                .map(|r| Override {
                    path: r.key.split('.').map(str::to_string).collect(),
                    value: r.sample(&mut rng),
                })
                .collect()
        })
        .collect()
}

/// The most points a sweep runs: its grids' values multiplied together, times the random
/// draws. Past it `check` refuses a `sweep` block and `pipeline sweep` its flags, before
/// anything is allocated for the points (each point is checked, then run: ten thousand
/// is already days of training for all but the smallest models).
pub const MAX_POINTS: u64 = 10_000;

/// How many points grids of `lengths` values give, each with every one of `draws` random
/// draws (`None`: no random keys); `None` when the number does not fit in a `u64`.
pub fn count(lengths: impl IntoIterator<Item = usize>, draws: Option<u64>) -> Option<u64> {
    let grid = lengths
        .into_iter()
        .try_fold(1u64, |n, l| n.checked_mul(l as u64))?;
    grid.checked_mul(draws.unwrap_or(1))
}

/// `12000` as `12,000`: the counts of a refused sweep are read at a glance.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The message of a sweep with more than [`MAX_POINTS`] points: how many (`None`: too
/// many to count) and what they multiply (`factors`, as the user wrote them).
pub fn too_many(points: Option<u64>, factors: &[String]) -> String {
    let points = points.map_or("more than 18,446,744,073,709,551,615".into(), thousands);
    format!(
        "{points} points ({}): a sweep runs at most {}",
        factors.join(" × "),
        thousands(MAX_POINTS)
    )
}

/// Whether `key` is a setting of the sweep itself (`sweep.jobs`), which a point cannot
/// set: `pipeline run` leaves the `sweep` block alone.
pub fn is_sweep_setting(key: &str) -> bool {
    key == "sweep" || key.starts_with("sweep.")
}

/// Every combination of the axes' values, the first axis varying slowest, each with
/// every draw of the random keys (`trials` of them, when there are any), as the
/// overrides it adds to the manifest. Refused, before anything is allocated, past
/// [`MAX_POINTS`]; a key swept twice, a setting of the sweep swept, nothing swept.
pub fn points(
    axes: &[Axis],
    randoms: &[Random],
    trials: u64,
    seed: u64,
) -> Result<Vec<Vec<Override>>, Diagnostic> {
    let mut keys = BTreeSet::new();
    let swept = axes
        .iter()
        .map(|a| &a.key)
        .chain(randoms.iter().map(|r| &r.key));
    for key in swept {
        if !keys.insert(key.as_str()) {
            return Err(Diagnostic::error(
                "pipeline::sweep::swept_twice",
                format!("`{}` is swept twice", escaped(key)),
            ));
        }
        if is_sweep_setting(key) {
            return Err(Diagnostic::error(
                "pipeline::sweep::swept_setting",
                format!(
                    "`{}` is a setting of the sweep, not of its points: it cannot be swept",
                    escaped(key)
                ),
            )
            .help("give it once: `pipeline sweep --jobs 2` (or `--set sweep.jobs=2`)"));
        }
    }
    if axes.is_empty() && randoms.is_empty() {
        return Err(Diagnostic::error(
            "pipeline::sweep::empty",
            "nothing to sweep: give --grid KEY=V1,V2,… or --random KEY=… with --trials N, or write a `sweep` block",
        ));
    }
    if !randoms.is_empty() && trials == 0 {
        return Err(Diagnostic::error(
            "pipeline::sweep::no_trials",
            "--random draws --trials N points (N ≥ 1)",
        ));
    }
    let each = (!randoms.is_empty()).then_some(trials);
    let n = count(axes.iter().map(|a| a.values.len()), each);
    if n.is_none_or(|n| n > MAX_POINTS) {
        let mut factors: Vec<String> = axes
            .iter()
            .map(|a| {
                format!(
                    "`{}` {} values",
                    escaped(&a.key),
                    thousands(a.values.len() as u64)
                )
            })
            .collect();
        if let Some(trials) = each {
            factors.push(format!("{} trials", thousands(trials)));
        }
        return Err(
            Diagnostic::error("pipeline::sweep::too_many_points", too_many(n, &factors))
                .help("sweep fewer values, or draw fewer --trials"),
        );
    }
    let mut points: Vec<Vec<Override>> = vec![Vec::new()];
    for axis in axes {
        points = points
            .into_iter()
            .flat_map(|p| {
                axis.values.iter().map(move |v| {
                    let mut p = p.clone();
                    p.push(Override {
                        path: axis.key.split('.').map(str::to_string).collect(),
                        value: v.clone(),
                    });
                    p
                })
            })
            .collect();
    }
    if !randoms.is_empty() {
        let drawn = draws(randoms, trials, seed);
        points = points
            .into_iter()
            .flat_map(|p| {
                drawn.iter().map(move |d| {
                    let mut p = p.clone();
                    p.extend(d.iter().cloned());
                    p
                })
            })
            .collect();
    }
    Ok(points)
}

/// A manifest's text without its `sweep` block: what each point of the sweep is checked
/// and planned with. A point ignores the block (`pipeline run` leaves it alone), and a
/// block of many values read again for each of them would make checking the points
/// quadratic in their number.
pub struct PointText {
    pub text: String,
    /// Where the block was cut out of the text as written: its offset and length.
    cut: Option<(usize, usize)>,
}

impl PointText {
    /// `text` without the `sweep` block `spec` was read from (none: the text as it is).
    pub fn of(text: &str, spec: Option<&SweepSpec>) -> PointText {
        let whole = || PointText {
            text: text.to_string(),
            cut: None,
        };
        let Some(span) = spec.and_then(|s| s.span) else {
            return whole();
        };
        let (start, end) = (span.offset(), span.offset() + span.len());
        match (text.get(..start), text.get(end..)) {
            (Some(before), Some(after)) => PointText {
                text: format!("{before}{after}"),
                cut: Some((start, span.len())),
            },
            _ => whole(),
        }
    }

    /// Diagnostics found in [`PointText::text`] pointed back into the text as written.
    pub fn relocate(&self, diagnostics: &mut [Diagnostic]) {
        let Some((start, len)) = self.cut else {
            return;
        };
        for label in diagnostics.iter_mut().flat_map(|d| &mut d.labels) {
            if label.span.offset() >= start {
                label.span = (label.span.offset() + len, label.span.len()).into();
            }
        }
    }
}

/// The `--set`s of a point read from a [`PointText`]: those of the sweep's own settings
/// (`sweep.jobs`) left out, which only the block takes.
pub fn point_overrides(overrides: &[Override]) -> Vec<Override> {
    (overrides.iter())
        .filter(|o| !is_sweep_setting(&o.path.join(".")))
        .cloned()
        .collect()
}

/// `text` with its control characters escaped (`\u{1b}`), as every message quoting user
/// data shows it: a key or value never reaches the terminal raw.
pub fn escaped(text: &str) -> String {
    text.chars()
        .map(|c| match c.is_control() {
            true => c.escape_default().to_string(),
            false => c.to_string(),
        })
        .collect()
}

/// What a sweep ranks its points by: a metric of a stage's report.
#[derive(Debug, Clone, PartialEq)]
pub struct Monitor {
    pub stage: String,
    pub metric: String,
    /// Higher is better.
    pub maximize: bool,
}

/// Metrics where higher is better.
fn higher_is_better(metric: &str) -> bool {
    let name = metric.strip_prefix("val_").unwrap_or(metric);
    let name = name.split('.').next().unwrap_or(name);
    [
        "accuracy",
        "r2",
        "auroc",
        "f1",
        "precision",
        "recall",
        "top",
    ]
    .iter()
    .any(|m| name.starts_with(m))
}

impl Monitor {
    /// `STAGE.METRIC` (`test.accuracy`, `train.val_loss`), or by default the first eval
    /// stage's accuracy (its loss for a regression), else the last train stage's loss;
    /// `maximize` as asked, else by the metric (accuracy up, loss down). Refused, with
    /// what the stages compute, when no stage computes it.
    pub fn of(
        manifest: &Manifest,
        written: Option<&str>,
        maximize: Option<bool>,
    ) -> Result<Monitor, String> {
        let classification = manifest.loss.kind.is_classification();
        let (stage, metric) = match written {
            Some(text) => {
                let (stage, metric) = text.split_once('.').ok_or_else(|| {
                    format!("--monitor `{text}`: write STAGE.METRIC (for example test.accuracy)")
                })?;
                (stage.to_string(), metric.to_string())
            }
            None => {
                let eval = manifest
                    .stages
                    .iter()
                    .find(|s| matches!(s.config, StageConfig::Eval(_)));
                let train = manifest
                    .stages
                    .iter()
                    .rev()
                    .find(|s| matches!(s.config, StageConfig::Train(_)));
                match (eval, train) {
                    (Some(e), _) => (
                        e.name().to_string(),
                        if classification { "accuracy" } else { "loss" }.into(),
                    ),
                    (None, Some(t)) => (t.name().to_string(), "loss".into()),
                    (None, None) => {
                        return Err("no stage computes a metric to rank the points by: the manifest has no train or eval stage".into())
                    }
                }
            }
        };
        let found = manifest.stages.iter().find(|s| s.name() == stage);
        let Some(found) = found else {
            let names: Vec<&str> = manifest.stages.iter().map(|s| s.name()).collect();
            return Err(format!(
                "--monitor `{stage}.{metric}`: there is no stage `{stage}` (the stages: {})",
                names.join(", ")
            ));
        };
        let computed = computed(manifest, &found.config, classification);
        let per_class = |m: &String| metric.starts_with(&format!("{m}."));
        if !computed.contains(&metric) && !computed.iter().any(per_class) {
            return Err(format!(
                "--monitor `{stage}.{metric}`: stage `{stage}` does not compute `{metric}`; it computes {}",
                computed.join(", ")
            ));
        }
        Ok(Monitor {
            maximize: maximize.unwrap_or_else(|| higher_is_better(&metric)),
            stage,
            metric,
        })
    }

    pub fn name(&self) -> String {
        format!("{}.{}", self.stage, self.metric)
    }

    /// Whether `a` ranks before `b` (a missing value last).
    pub fn order(&self, a: Option<f64>, b: Option<f64>) -> std::cmp::Ordering {
        match (a, b) {
            (Some(a), Some(b)) if self.maximize => b.total_cmp(&a),
            (Some(a), Some(b)) => a.total_cmp(&b),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        }
    }
}

/// The metrics a stage's report holds (per-class metrics as their name, `NAME.CLASS` in
/// the report).
fn computed(manifest: &Manifest, config: &StageConfig, classification: bool) -> Vec<String> {
    crate::stages::member(config).reported_metrics(manifest, classification)
}

/// Successive halving (`--halving min-epochs=2 eta=3`): every point trains `min-epochs`,
/// the best 1/`eta` of them continue to `eta` times as many epochs, and so on up to the
/// manifest's epochs (Jamieson and Talwalkar's successive halving, Hyperband's inner
/// loop). A rung continues the one before through the cache ([`crate::extend`]): no
/// step is trained twice.
#[derive(Debug, Clone, PartialEq)]
pub struct Halving {
    pub min_epochs: u64,
    pub eta: u64,
    /// The `train` stage whose epochs are the budget [default: the last train stage].
    pub stage: Option<String>,
}

impl Halving {
    /// From `KEY=VALUE` settings: `min-epochs=N` (required), `eta=N` (default 3),
    /// `stage=NAME`.
    pub fn parse(settings: &[String]) -> Result<Halving, String> {
        let mut halving = Halving {
            min_epochs: 0,
            eta: 3,
            stage: None,
        };
        let mut min_epochs = None;
        let mut given: Vec<(&str, &str)> = Vec::new();
        for setting in settings {
            let (key, value) = setting.split_once('=').ok_or_else(|| {
                let file = match setting.ends_with(".kdl") {
                    true => "; give the manifest before --halving",
                    false => "",
                };
                format!(
                    "--halving `{}` is not KEY=VALUE (min-epochs=2 eta=3){file}",
                    escaped(setting)
                )
            })?;
            if let Some((_, first)) = given.iter().find(|(k, _)| *k == key.trim()) {
                return Err(format!(
                    "--halving {} is given twice ({}, then {}): give each setting once",
                    escaped(key.trim()),
                    escaped(first),
                    escaped(setting)
                ));
            }
            given.push((key.trim(), setting));
            let count = |least: u64| match value.trim().parse::<u64>() {
                Ok(n) if n >= least => Ok(n),
                _ => Err(format!(
                    "--halving {}={}: a whole number ≥ {least}",
                    escaped(key),
                    escaped(value)
                )),
            };
            match key.trim() {
                "min-epochs" => min_epochs = Some(count(1)?),
                "eta" => halving.eta = count(2)?,
                "stage" => halving.stage = Some(value.trim().to_string()),
                other => {
                    return Err(format!(
                        "--halving has no setting `{}` (min-epochs, eta, stage)",
                        escaped(other)
                    ))
                }
            }
        }
        halving.min_epochs =
            min_epochs.ok_or("--halving needs min-epochs=N (the first rung's epochs)")?;
        Ok(halving)
    }

    /// The `train` stage whose epochs are the budget, and those epochs (the last rung).
    pub fn budget<'m>(&self, manifest: &'m Manifest) -> Result<(&'m str, u64), String> {
        // A training of k-fold cross-validation by its name (its folds' epochs are its).
        let trains = manifest.stages.iter().filter_map(|s| match &s.config {
            StageConfig::Train(t) if t.fold.as_ref().is_none_or(|f| f.index == 1) => {
                Some((s.training(), t.epochs))
            }
            _ => None,
        });
        let found = match &self.stage {
            Some(name) => trains.clone().find(|(n, _)| n == name),
            None => trains.clone().next_back(),
        };
        let (stage, epochs) = found.ok_or_else(|| match &self.stage {
            Some(name) => {
                let names: Vec<&str> = trains.map(|(n, _)| n).collect();
                format!(
                    "--halving stage={name}: no train stage is named so (train stages: {})",
                    names.join(", ")
                )
            }
            None => "--halving needs a train stage: the manifest has none".into(),
        })?;
        if self.min_epochs >= epochs {
            return Err(format!(
                "--halving min-epochs={} is not below stage `{stage}`'s {epochs} epochs: there is nothing to halve",
                self.min_epochs
            ));
        }
        Ok((stage, epochs))
    }

    /// The epochs of each rung: `min-epochs`, × `eta` each time, the last `epochs`.
    pub fn rungs(&self, epochs: u64) -> Vec<u64> {
        let mut rungs = vec![self.min_epochs];
        while let Some(next) = rungs.last().map(|r| r.saturating_mul(self.eta)) {
            if next >= epochs {
                break;
            }
            rungs.push(next);
        }
        rungs.push(epochs);
        rungs
    }

    /// How many of `n` points continue to the next rung: the best 1/`eta`, at least one.
    pub fn survivors(&self, n: usize) -> usize {
        n.div_ceil(self.eta as usize).max(1).min(n)
    }
}

impl Halving {
    /// The `halving` of a `sweep` block.
    pub fn of(spec: &manifests::HalvingSpec) -> Halving {
        Halving {
            min_epochs: spec.min_epochs,
            eta: spec.eta,
            stage: spec.stage.as_ref().map(|s| s.value.clone()),
        }
    }
}

impl Axis {
    /// A `grid` key of a `sweep` block.
    pub fn of(swept: &SweptKey) -> Axis {
        Axis {
            key: swept.key.value.clone(),
            values: swept.values.iter().map(|v| v.value.clone()).collect(),
        }
    }
}

impl Random {
    /// A `random` key of a `sweep` block (`Err`: why its draw is not one).
    pub fn of(swept: &SweptKey) -> Result<Random, String> {
        Random::parse(&format!("{}={}", swept.key.value, swept.values[0].value))
    }

    /// Values the draw can give that decide whether it fits its key: both ends of a
    /// range, every choice.
    fn extremes(&self) -> Vec<String> {
        match &self.draw {
            Draw::Log(a, b) | Draw::Uniform(a, b) => vec![a.to_string(), b.to_string()],
            Draw::Int(a, b) => vec![a.to_string(), b.to_string()],
            Draw::Choice(values) => values.clone(),
        }
    }
}

/// The errors of a `sweep` block, found as `pipeline sweep` would find them but located
/// in the block: each key set to each of its values alone (`point` checks the manifest
/// with those `--set`s), an error that a value brings said at the value (or once at the
/// key, when every value of the key brings it: a key that does not exist); a random key's
/// draw parsed, and its ends (or choices) set; the monitor and the halving budget found.
pub fn check_block(
    manifest: &Manifest,
    spec: &SweepSpec,
    mut point: impl FnMut(&[Override]) -> Vec<Diagnostic>,
) -> Vec<Diagnostic> {
    let mut found = Vec::new();
    // Bounded first: a block of too many points is refused before its values are tried.
    let too_many = too_many_points(spec);
    let over = too_many.is_some();
    found.extend(too_many);
    for swept in spec.grid.iter().chain(&spec.random) {
        if is_sweep_setting(&swept.key.value) {
            found.push(
                Diagnostic::error(
                    "pipeline::sweep::swept_setting",
                    format!(
                        "sweep: `{}` is a setting of the sweep, not of its points: it cannot be swept",
                        escaped(&swept.key.value)
                    ),
                )
                .label_opt(swept.key.span, "swept here")
                .help("set it once in the block (`jobs 2`), or with `pipeline sweep --jobs 2`"),
            );
        }
    }
    let mut tried: Vec<(&SweptKey, Vec<(usize, String)>)> = Vec::new();
    let tried_keys = (spec.grid.iter()).filter(|s| !over && !is_sweep_setting(&s.key.value));
    for swept in tried_keys {
        tried.push((
            swept,
            swept
                .values
                .iter()
                .map(|v| v.value.clone())
                .enumerate()
                .collect(),
        ));
    }
    for swept in (spec.random.iter()).filter(|s| !over && !is_sweep_setting(&s.key.value)) {
        match Random::of(swept) {
            Ok(random) => tried.push((
                swept,
                random.extremes().into_iter().map(|v| (0, v)).collect(),
            )),
            Err(why) => found.push(
                Diagnostic::error("pipeline::sweep::bad_draw", format!("sweep.random: {why}"))
                    .label_opt(swept.values[0].span, "not a draw")
                    .help("write `log(a,b)`, `uniform(a,b)`, `int(a,b)` or `choice(v1,v2,…)`"),
            ),
        }
    }
    for (swept, values) in tried {
        let block = match spec.grid.iter().any(|g| std::ptr::eq(g, swept)) {
            true => "grid",
            false => "random",
        };
        found.extend(value_errors(swept, &values, block, &mut point));
    }
    let maximize = spec.mode.map(|m| m == Mode::Max);
    let written = spec.monitor.as_ref().map(|m| m.value.as_str());
    if let Err(why) = Monitor::of(manifest, written, maximize) {
        found.push(
            Diagnostic::error(
                "pipeline::sweep::bad_monitor",
                why.replacen("--monitor ", "sweep.monitor: ", 1),
            )
            .label_opt(
                spec.monitor.as_ref().and_then(|m| m.span).or(spec.span),
                "ranked by this",
            )
            .help("monitor a metric a stage computes: `STAGE.METRIC`"),
        );
    }
    found.extend(halving_error(manifest, spec));
    found
}

/// The error of a block whose points would be more than [`MAX_POINTS`], at its keys and
/// `trials`.
fn too_many_points(spec: &SweepSpec) -> Option<Diagnostic> {
    let each = (!spec.random.is_empty()).then_some(spec.trials);
    let n = count(spec.grid.iter().map(|g| g.values.len()), each);
    if n.is_some_and(|n| n <= MAX_POINTS) {
        return None;
    }
    let mut factors: Vec<String> = (spec.grid.iter())
        .map(|g| {
            format!(
                "`{}` {} values",
                escaped(&g.key.value),
                thousands(g.values.len() as u64)
            )
        })
        .collect();
    factors.extend(each.map(|t| format!("{} trials", thousands(t))));
    let mut d = Diagnostic::error(
        "pipeline::sweep::too_many_points",
        format!("sweep: {}", too_many(n, &factors)),
    );
    for g in &spec.grid {
        d = d.label_opt(
            g.key.span,
            format!("{} values", thousands(g.values.len() as u64)),
        );
    }
    if let Some(t) = each {
        d = d.label_opt(
            spec.trials_span.or(spec.span),
            format!("{} trials", thousands(t)),
        );
    }
    Some(d.help("sweep fewer values, or draw fewer `trials`"))
}

/// The errors the values `values` (each with its place among the key's written values)
/// of the key `swept` in the block's `block` (`grid`, `random`) bring, each checked alone
/// by `point`: said at the values that bring it, or once at the key when every one does.
fn value_errors(
    swept: &SweptKey,
    values: &[(usize, String)],
    block: &str,
    point: &mut impl FnMut(&[Override]) -> Vec<Diagnostic>,
) -> Vec<Diagnostic> {
    let key = &swept.key.value;
    // Each error a value brings, with the value replaced by `…` to tell them apart.
    let mut errors: Vec<(String, String, Vec<usize>)> = Vec::new();
    for (at, value) in values {
        let set = Override {
            path: key.split('.').map(str::to_string).collect(),
            value: value.clone(),
        };
        for d in point(std::slice::from_ref(&set)) {
            if d.severity != Severity::Error {
                continue;
            }
            let message = d.message.replace(&format!("--set {set}: "), "");
            let message = message.replace(&format!(" (from --set {set})"), "");
            let general = message.replace(value.as_str(), "…");
            match errors.iter_mut().find(|e| e.1 == general) {
                Some(e) => e.2.push(*at),
                None => errors.push((message, general, vec![*at])),
            }
        }
    }
    errors
        .into_iter()
        .map(|(message, general, at)| {
            let d = match at.len() == values.len() {
                true => Diagnostic::error(
                    "pipeline::sweep::bad_key",
                    format!("sweep.{block}.{key}: {general}"),
                )
                .label_opt(swept.key.span, "swept here"),
                false => {
                    let mut d = Diagnostic::error(
                        "pipeline::sweep::bad_value",
                        format!("sweep.{block}.{key}: {message}"),
                    );
                    for i in at {
                        d = d.label_opt(swept.values[i].span, "this value");
                    }
                    d
                }
            };
            d.help("each value is checked as `--set KEY=VALUE` would be: name the key as the manifest writes it, with a value it takes")
        })
        .collect()
}

/// The error of a `halving` the manifest cannot run: no budget, or the epochs it sets
/// swept too.
fn halving_error(manifest: &Manifest, spec: &SweepSpec) -> Option<Diagnostic> {
    let halving = spec.halving.as_ref()?;
    match Halving::of(halving).budget(manifest) {
        Err(why) => Some(
            Diagnostic::error(
                "pipeline::sweep::bad_halving",
                why.replacen("--halving ", "sweep.halving: ", 1),
            )
            .label_opt(halving.span, "here")
            .help("halve a train stage's epochs from a `min-epochs` below them"),
        ),
        Ok((stage, _)) => {
            let epochs = format!("{stage}.epochs");
            let mut swept = spec.grid.iter().chain(&spec.random);
            let s = swept.find(|s| s.key.value == epochs)?;
            Some(
                Diagnostic::error(
                    "pipeline::sweep::bad_halving",
                    format!("sweep: `halving` sets `{epochs}` itself: it cannot be swept too"),
                )
                .label_opt(s.key.span, "swept here")
                .label_opt(halving.span, "halving here")
                .help("sweep the other keys; halving gives each point its epochs"),
            )
        }
    }
}

/// The points that may start now, in order, at most `free` of them: a point waits while
/// a stage it would compute (a fingerprint in its stale set) is being computed by a
/// running one, so that no stage is computed twice. A point's stale set is found by
/// `find` the first time it is needed (kept in `stale`, by point), so that a sweep does
/// not plan every point before the first starts: only those it looks at.
pub fn startable(
    pending: &[usize],
    stale: &mut [Option<BTreeSet<String>>],
    running: &[usize],
    free: usize,
    mut find: impl FnMut(usize) -> BTreeSet<String>,
) -> Vec<usize> {
    let mut busy: BTreeSet<String> = BTreeSet::new();
    for &p in running {
        busy.extend(stale[p].get_or_insert_with(|| find(p)).iter().cloned());
    }
    let mut start = Vec::new();
    for &p in pending {
        if start.len() == free {
            break;
        }
        let mine = stale[p].get_or_insert_with(|| find(p));
        if mine.iter().all(|f| !busy.contains(f)) {
            busy.extend(mine.iter().cloned());
            start.push(p);
        }
    }
    start
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halving_rungs_and_survivors() {
        let words = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
        let h = Halving::parse(&words("min-epochs=2 eta=3")).unwrap();
        assert_eq!(h.rungs(20), [2, 6, 18, 20]);
        assert_eq!(h.rungs(18), [2, 6, 18]);
        assert_eq!(h.rungs(3), [2, 3]);
        assert_eq!([9, 8, 3, 2, 1].map(|n| h.survivors(n)), [3, 3, 1, 1, 1]);
        let h = Halving::parse(&words("min-epochs=1")).unwrap();
        assert_eq!((h.eta, h.rungs(10)), (3, vec![1, 3, 9, 10]));
        for (bad, why) in [
            (
                "eta=3",
                "--halving needs min-epochs=N (the first rung's epochs)",
            ),
            ("min-epochs=0", "--halving min-epochs=0: a whole number ≥ 1"),
            ("min-epochs=2 eta=1", "--halving eta=1: a whole number ≥ 2"),
            (
                "min-epochs=2 rate=3",
                "--halving has no setting `rate` (min-epochs, eta, stage)",
            ),
            (
                "min-epochs",
                "--halving `min-epochs` is not KEY=VALUE (min-epochs=2 eta=3)",
            ),
        ] {
            assert_eq!(Halving::parse(&words(bad)).unwrap_err(), why, "{bad}");
        }
    }

    #[test]
    fn axes_and_their_points() {
        let lr = Axis::parse("optimizer.lr=1e-3, 3e-3").unwrap();
        assert_eq!(lr.values, ["1e-3", "3e-3"]);
        let bs = Axis::parse("test.batch-size=100,200").unwrap();
        let p = points(&[lr.clone(), bs], &[], 0, 0).unwrap();
        let shown: Vec<String> = p
            .iter()
            .map(|o| {
                o.iter()
                    .map(|o| o.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        assert_eq!(
            shown,
            [
                "optimizer.lr=1e-3 test.batch-size=100",
                "optimizer.lr=1e-3 test.batch-size=200",
                "optimizer.lr=3e-3 test.batch-size=100",
                "optimizer.lr=3e-3 test.batch-size=200",
            ]
        );
        assert_eq!(
            Axis::parse("optimizer.lr=").unwrap_err(),
            "`optimizer.lr=`: the grid of `optimizer.lr` is empty"
        );
        assert_eq!(
            Axis::parse("optimizer.lr=1,,2").unwrap_err(),
            "`optimizer.lr=1,,2`: a value of `optimizer.lr` is empty"
        );
        assert_eq!(
            Axis::parse("optimizer.lr=1,1").unwrap_err(),
            "`optimizer.lr=1,1`: `1` is there twice"
        );
        assert!(Axis::parse("lr").is_err());
        assert_eq!(
            points(&[lr.clone(), lr], &[], 0, 0).unwrap_err().message,
            "`optimizer.lr` is swept twice"
        );
        let jobs = Axis::parse("sweep.jobs=1,2").unwrap();
        let e = points(&[jobs], &[], 0, 0).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                "pipeline::sweep::swept_setting",
                "`sweep.jobs` is a setting of the sweep, not of its points: it cannot be swept"
            )
        );
    }

    #[test]
    fn random_keys_are_drawn_the_same_from_a_seed() {
        let lr = Random::parse("optimizer.lr=log(1e-4, 1e-1)").unwrap();
        let bs = Random::parse("train.batch-size=int(16,128)").unwrap();
        let kind = Random::parse("optimizer.kind=choice(adam,sgd)").unwrap();
        let randoms = [lr, bs, kind];
        let drawn = draws(&randoms, 200, 7);
        assert_eq!(drawn, draws(&randoms, 200, 7), "a seed draws the same");
        assert_ne!(drawn, draws(&randoms, 200, 8));
        let lrs: Vec<f64> = drawn.iter().map(|d| d[0].value.parse().unwrap()).collect();
        assert!(lrs.iter().all(|x| (1e-4..=1e-1).contains(x)), "{lrs:?}");
        // Log-uniform: about a third in each decade.
        let low = lrs.iter().filter(|x| **x < 1e-3).count();
        assert!((40..100).contains(&low), "{low} of 200 below 1e-3");
        for d in &drawn {
            let digits = d[0].value.trim_start_matches("0.").trim_start_matches('0');
            assert!(digits.len() <= 4, "four significant digits: {}", d[0].value);
        }
        let sizes: BTreeSet<i64> = drawn.iter().map(|d| d[1].value.parse().unwrap()).collect();
        assert!(sizes.iter().all(|s| (16..=128).contains(s)));
        assert!(sizes.contains(&16) || sizes.contains(&128) || sizes.len() > 50);
        let kinds: BTreeSet<&str> = drawn.iter().map(|d| d[2].value.as_str()).collect();
        assert_eq!(kinds, BTreeSet::from(["adam", "sgd"]));
        let grid = Axis::parse("train.epochs=2,4").unwrap();
        let p = points(&[grid], &randoms[..1], 3, 7).unwrap();
        assert_eq!(p.len(), 6, "every grid point with every draw");
        for (text, why) in [
            ("lr=log(0,1)", "`lr=log(0,1)`: a log-uniform range is above 0"),
            ("lr=uniform(2,1)", "`lr=uniform(2,1)`: the range is empty (2 is not below 1)"),
            ("lr=int(1.5,3)", "`lr=int(1.5,3)`: `int` takes two integers"),
            ("lr=normal(0,1)", "`lr=normal(0,1)`: `normal` is not one of KEY=log(a,b), uniform(a,b), int(a,b) or choice(v1,v2,…)"),
            ("lr=log(1e-3)", "`lr=log(1e-3)`: `log` takes two numbers"),
        ] {
            assert_eq!(Random::parse(text).unwrap_err(), why);
        }
        assert_eq!(
            points(&[], &randoms[..1], 0, 1).unwrap_err().message,
            "--random draws --trials N points (N ≥ 1)"
        );
    }

    #[test]
    fn points_past_the_bound_are_refused_before_they_are_made() {
        let values = |n: usize| (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
        let axis = |key: &str, n: usize| Axis::parse(&format!("{key}={}", values(n))).unwrap();
        let lr = Random::parse("optimizer.lr=log(1e-4,1e-2)").unwrap();
        // At the bound: made.
        let at = [axis("a", 100), axis("b", 100)];
        assert_eq!(points(&at, &[], 0, 0).unwrap().len(), 10_000);
        assert_eq!(
            points(&at[..1], std::slice::from_ref(&lr), 100, 0)
                .unwrap()
                .len(),
            10_000
        );
        // Past it, however far: refused at once, without allocating the points.
        let e = points(&at[..1], std::slice::from_ref(&lr), 1_000_000_000_000, 0).unwrap_err();
        assert_eq!(e.code, "pipeline::sweep::too_many_points");
        assert_eq!(
            e.message,
            "100,000,000,000,000 points (`a` 100 values × 1,000,000,000,000 trials): a sweep runs at most 10,000"
        );
        let e = points(&[], std::slice::from_ref(&lr), 0, 0);
        assert!(e.is_err(), "a random key with no trials");
        let many = [
            axis("a", 10),
            axis("b", 10),
            axis("c", 10),
            axis("d", 10),
            axis("e", 2),
        ];
        assert_eq!(
            points(&many, &[], 0, 0).unwrap_err().message,
            "20,000 points (`a` 10 values × `b` 10 values × `c` 10 values × `d` 10 values × `e` 2 values): a sweep runs at most 10,000"
        );
        let huge = points(&at, &[lr], u64::MAX, 0).unwrap_err();
        assert!(
            huge.message
                .starts_with("more than 18,446,744,073,709,551,615 points"),
            "{}",
            huge.message
        );
        assert_eq!(count([3, 0, 5], None), Some(0));
        assert_eq!(count([], Some(7)), Some(7));
    }

    #[test]
    fn a_point_is_read_without_the_block_its_diagnostics_in_place() {
        let text = "seed 1\nsweep {\n    grid { optimizer.lr 1e-3 \"é\"; }\n    jobs 2\n}\ndata { source \"d.csv\"; }\nmodel { linear 2; }\nloss \"cross-entropy\"\noptimizer \"adam\" lr=-1\ntrain\n";
        let path = std::path::Path::new("m.kdl");
        let checked = crate::load(text, path, &[]);
        let spec = checked.manifest.as_ref().unwrap().sweep.clone();
        let cut = PointText::of(text, spec.as_ref());
        assert!(cut.text.starts_with("seed 1\n\ndata {"), "{}", cut.text);
        let sets = point_overrides(&[Override::parse("sweep.jobs=3").unwrap()]);
        let mut point = crate::load(&cut.text, path, &sets);
        assert!(point.manifest.as_ref().unwrap().sweep.is_none());
        cut.relocate(&mut point.diagnostics);
        let located = |c: &crate::Checked| -> Vec<(&str, Option<(usize, usize)>)> {
            (c.diagnostics.iter())
                .map(|d| (d.code, d.location(text)))
                .collect()
        };
        assert!(!point.diagnostics.is_empty());
        assert_eq!(located(&point), located(&checked), "the same places");
        assert!(PointText::of(text, None).text == text);
    }

    #[test]
    fn a_halving_setting_given_twice_is_refused() {
        let words = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
        assert_eq!(
            Halving::parse(&words("min-epochs=1 eta=2 min-epochs=3")).unwrap_err(),
            "--halving min-epochs is given twice (min-epochs=1, then min-epochs=3): give each setting once"
        );
        assert_eq!(
            Halving::parse(&words("min-epochs=1 eta=2\u{7}")).unwrap_err(),
            "--halving eta=2\\u{7}: a whole number ≥ 2"
        );
    }

    #[test]
    fn a_point_waits_for_a_stage_another_is_computing() {
        let s = |f: &[&str]| f.iter().map(|f| f.to_string()).collect::<BTreeSet<_>>();
        // Points 0 and 1 share the training `t`; 2 trains `u`; 3 is never looked at.
        let sets = [s(&["t", "e1"]), s(&["t", "e2"]), s(&["u", "e3"]), s(&["v"])];
        let mut found = Vec::new();
        let mut stale = vec![None; 4];
        let mut find = |p: usize| {
            found.push(p);
            sets[p].clone()
        };
        assert_eq!(
            startable(&[0, 1, 2, 3], &mut stale, &[], 2, &mut find),
            [0, 2]
        );
        assert_eq!(
            startable(&[1, 3], &mut stale, &[0, 2], 0, &mut find),
            Vec::<usize>::new()
        );
        assert_eq!(
            startable(&[1], &mut stale, &[0, 2], 1, &mut find),
            Vec::<usize>::new()
        );
        assert_eq!(startable(&[1], &mut stale, &[2], 1, &mut find), [1]);
        assert_eq!(
            found,
            [0, 1, 2],
            "each point planned once, and only when looked at"
        );
    }

    #[test]
    fn the_monitor_ranks_up_or_down() {
        let text = "data { source \"d.csv\"; split train=0.7 val=0.1 test=0.2; }\nmodel { linear 2; }\nloss \"cross-entropy\"\noptimizer \"adam\"\ntrain\neval \"test\" needs=\"train\" { metrics \"f1-macro\"; }\n";
        let checked = crate::load(text, std::path::Path::new("m.kdl"), &[]);
        let m = checked.valid().unwrap();
        let by_default = Monitor::of(m, None, None).unwrap();
        assert_eq!(by_default.name(), "test.accuracy");
        assert!(by_default.maximize);
        let loss = Monitor::of(m, Some("train.val_loss"), None).unwrap();
        assert!(!loss.maximize);
        assert_eq!(
            loss.order(Some(0.2), Some(0.1)),
            std::cmp::Ordering::Greater
        );
        assert!(
            Monitor::of(m, Some("test.f1-macro"), None)
                .unwrap()
                .maximize
        );
        assert_eq!(
            Monitor::of(m, Some("test.r2"), None).unwrap_err(),
            "--monitor `test.r2`: stage `test` does not compute `r2`; it computes loss, samples, accuracy, f1-macro"
        );
        assert_eq!(
            Monitor::of(m, Some("val.loss"), None).unwrap_err(),
            "--monitor `val.loss`: there is no stage `val` (the stages: train, test)"
        );
    }
}
