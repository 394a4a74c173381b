//! The command line, shared by `pipeline` and `pipeline-worker` (which parses the same
//! arguments for the `run` that `pipeline` hands it).

use clap::{Args, Parser, Subcommand};
use manifests::Override;
use pipeline_core::sweep::{Axis, Random};
use std::path::PathBuf;

/// Output formats of `pipeline graph`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Format {
    Dot,
    Mermaid,
}

#[derive(Parser)]
#[command(
    name = "pipeline",
    version,
    about = "Declarative, cached, accelerated PyTorch training from one KDL manifest"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Check manifests without running them: every problem, with where it is.
    Check {
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// Override a manifest value, e.g. `--set optimizer.lr=3e-4` (repeatable).
        #[arg(long = "set", value_name = "PATH=VALUE", value_parser = Override::parse)]
        set: Vec<Override>,
        /// Print `{"ok", "diagnostics": [...]}` on stdout instead of reports on stderr.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        launch: LaunchContext,
    },
    /// Print the stage DAG.
    Graph {
        #[arg(default_value = "pipeline.kdl", value_name = "FILE")]
        file: PathBuf,
        #[arg(long, value_enum, default_value_t = Format::Dot)]
        format: Format,
        #[arg(long = "set", value_name = "PATH=VALUE", value_parser = Override::parse)]
        set: Vec<Override>,
    },
    /// Run the pipeline's stages; stages whose fingerprint is in the cache are not run again.
    Run(RunArgs),
    /// Say which stages are fresh (cached) and why the others would run.
    Status {
        #[arg(default_value = "pipeline.kdl", value_name = "FILE")]
        file: PathBuf,
        #[arg(long = "set", value_name = "PATH=VALUE", value_parser = Override::parse)]
        set: Vec<Override>,
        /// Print `{"stages": [{"name", "fresh", "reasons", …}]}` on stdout.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cache: CacheDir,
    },
    /// Document the manifest's keys: type, default, allowed values, the rules they meet.
    Explain {
        /// A section (`accelerator`), a key (`accelerator.precision`), a stage kind or a
        /// layer; everything when absent.
        #[arg(value_name = "KEY")]
        key: Option<String>,
    },
    /// List past runs of a manifest; `show` one, or `diff` two: what changed, in words,
    /// and the metrics' deltas.
    Runs(RunsArgs),
    /// Draw the curves of runs (the manifest's latest by default): a panel per metric, a
    /// line per run, by optimizer step, as SVG or PNG.
    Plot(PlotArgs),
    /// Write one self-contained HTML page on a manifest's runs: what changed between
    /// them, their curves, the stages, confusion matrices and the cache's state.
    Report(ReportArgs),
    /// Run the manifest at every point of a grid of `--set` values, computing each stage a
    /// point shares with another once; the points ranked by a metric.
    Sweep(SweepArgs),
    /// Inspect and tidy the stage cache.
    Cache {
        #[command(subcommand)]
        command: CacheCommand,
        #[command(flatten)]
        cache: CacheDir,
    },
}

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    #[arg(default_value = "pipeline.kdl", value_name = "FILE")]
    pub file: PathBuf,
    /// Run only this stage and the stages it needs.
    #[arg(long, value_name = "NAME")]
    pub stage: Option<String>,
    /// Override a manifest value, e.g. `--set train.epochs=2` (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE", value_parser = Override::parse)]
    pub set: Vec<Override>,
    /// Print one JSON object with every stage's status and metrics on stdout.
    #[arg(long)]
    pub json: bool,
    /// Rerun every stage, or only STAGE and the stages after it, even if cached.
    #[arg(long, value_name = "STAGE", num_args = 0..=1, default_missing_value = "")]
    pub force: Option<String>,
    /// Neither read nor write the cache.
    #[arg(long)]
    pub no_cache: bool,
    /// Write TensorBoard's event files to DIR/PIPELINE/RUN/STAGE/ rather than into the
    /// run directory, so that `tensorboard --logdir DIR` compares the runs of every
    /// manifest (unless `logging { tensorboard #false }`).
    #[arg(long, value_name = "DIR")]
    pub tensorboard_dir: Option<PathBuf>,
    /// Start this many worker processes on this machine (like `torchrun --nproc-per-node`).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub nproc_per_node: u32,
    /// Machines taking part (each runs `pipeline run` with its `--node-rank`).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub nnodes: u32,
    /// This machine's index among `--nnodes`, from 0 (0 serves the rendezvous).
    #[arg(long, value_name = "I", default_value_t = 0)]
    pub node_rank: u32,
    /// The address of node 0 [default: 127.0.0.1 on one machine].
    #[arg(long, value_name = "HOST")]
    pub master_addr: Option<String>,
    /// The port node 0 serves the rendezvous on [default: a free port on one machine,
    /// 29500 on several].
    #[arg(long, value_name = "PORT", value_parser = parse_port)]
    pub master_port: Option<u16>,
    /// The signals that stop a training cleanly: at its next optimizer step every process
    /// writes its snapshot, then under SLURM the job is requeued (`scontrol requeue`),
    /// elsewhere the run exits with status 143; the same command resumes it. SLURM sends
    /// one before a time limit with `sbatch --requeue --signal=B:USR1@120`; `none` leaves
    /// both signals their default action.
    #[arg(long, value_enum, value_name = "SIGNAL", default_value_t = RequeueSignal::Both)]
    pub requeue_signal: RequeueSignal,
    /// When a worker dies (killed by a signal, or a non-zero exit), stop the others and
    /// start them all again from the latest snapshot, up to N times (like `torchrun
    /// --max-restarts`); 0 fails at the first death. Processes of this machine only: under
    /// srun or torchrun, their own restarts apply.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub max_restarts: u32,
    /// Continue a training from the snapshots the same training left with another global
    /// batch (batch size × accumulation × processes): the order of samples changes from
    /// the resume on. With the same global batch, another number of processes continues
    /// without it.
    #[arg(long)]
    pub reshard: bool,
    #[command(flatten)]
    pub cache: CacheDir,
}

/// `pipeline check`'s view of the job a run will be, so that the rules that depend on
/// how it is launched are decided before it is queued.
#[derive(Args, Debug, Clone, Default)]
pub struct LaunchContext {
    /// The processes the job starts per machine (as `pipeline run --nproc-per-node`, or
    /// srun's tasks per node).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub nproc_per_node: Option<u32>,
    /// The machines it runs on [default: 1 with `--nproc-per-node`].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub nnodes: Option<u32>,
    /// What the job's machines have: `cuda` (GPUs) or `cpu` (none) [default: what this
    /// machine has, as far as `check` can tell].
    #[arg(long, value_enum, value_name = "DEVICE")]
    pub device: Option<JobDevice>,
}

/// `pipeline check --device`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum JobDevice {
    Cpu,
    Cuda,
}

impl LaunchContext {
    /// Whether the command line says anything of the job.
    pub fn is_given(&self) -> bool {
        self.nproc_per_node.is_some() || self.nnodes.is_some() || self.device.is_some()
    }

    /// Its processes, when said.
    pub fn processes(&self) -> Option<usize> {
        match (self.nproc_per_node, self.nnodes) {
            (None, None) => None,
            (n, m) => Some(n.unwrap_or(1) as usize * m.unwrap_or(1) as usize),
        }
    }
}

/// `pipeline run --requeue-signal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RequeueSignal {
    Usr1,
    Term,
    Both,
    None,
}

impl RequeueSignal {
    /// The signals it names.
    pub fn signals(self) -> &'static [i32] {
        match self {
            RequeueSignal::Usr1 => &[libc::SIGUSR1],
            RequeueSignal::Term => &[libc::SIGTERM],
            RequeueSignal::Both => &[libc::SIGUSR1, libc::SIGTERM],
            RequeueSignal::None => &[],
        }
    }
}

#[derive(Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true)]
pub struct RunsArgs {
    #[command(subcommand)]
    pub command: Option<RunsCommand>,
    /// The manifest whose runs to list.
    #[arg(default_value = "pipeline.kdl", value_name = "FILE")]
    pub file: PathBuf,
    /// Print `{"runs": [...]}` on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone)]
pub struct PlotArgs {
    /// Runs to draw (ids, unique prefixes, `last`, `last~N`, or run directories) and the
    /// manifest they are runs of [default: pipeline.kdl, its latest run that trained].
    #[arg(value_name = "RUN|FILE")]
    pub targets: Vec<String>,
    /// The metrics, a panel each: `loss`, `accuracy`, `val.NAME`, `lr`,
    /// `samples_per_second`, `step.NAME` (step records), `eval.NAME` [default: loss,
    /// val.loss and val.accuracy, those recorded].
    #[arg(long, value_delimiter = ',', value_name = "METRIC,…")]
    pub metric: Vec<String>,
    /// Where to write the plot: a .svg or .png file.
    #[arg(long, default_value = "curves.svg", value_name = "FILE")]
    pub out: PathBuf,
    /// A logarithmic y axis (values at or below 0 are left out).
    #[arg(long)]
    pub log_y: bool,
}

#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// Runs to show (ids, unique prefixes, `last`, `last~N`, or run directories) and the
    /// manifest they are runs of [default: pipeline.kdl, its latest five runs that
    /// trained].
    #[arg(value_name = "RUN|FILE")]
    pub targets: Vec<String>,
    /// Where to write the page.
    #[arg(long, default_value = "report.html", value_name = "FILE")]
    pub out: PathBuf,
    #[command(flatten)]
    pub cache: CacheDir,
}

#[derive(Args, Debug, Clone)]
pub struct SweepArgs {
    #[arg(default_value = "pipeline.kdl", value_name = "FILE")]
    pub file: PathBuf,
    /// A swept key and its values, `optimizer.lr=1e-3,3e-3` (repeatable: the points are
    /// every combination). Added to the manifest's `sweep` block, whose own grid of the
    /// same key it replaces.
    #[arg(long = "grid", value_name = "KEY=V1,V2,…", value_parser = Axis::parse)]
    pub grid: Vec<Axis>,
    /// A key drawn at random for each of `--trials` points: `optimizer.lr=log(1e-4,1e-2)`,
    /// `uniform(a,b)`, `int(a,b)` or `choice(v1,v2,…)` (repeatable; with `--grid`, every
    /// grid point gets every draw).
    #[arg(long = "random", value_name = "KEY=DRAW", value_parser = Random::parse)]
    pub random: Vec<Random>,
    /// How many points `--random` draws [default: the `sweep` block's `trials`].
    #[arg(long, value_name = "N")]
    pub trials: Option<u64>,
    /// The seed of the draws (the same seed, the same points) [default: the block's, or 0].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Successive halving: every point trains `min-epochs`, the best 1/`eta` continue
    /// to `eta` × as many (from where they were: no step is trained twice), and so on to
    /// the manifest's epochs; `stage=NAME` names the train stage [default: the last]
    /// [default: the `sweep` block's `halving`, if any]. Given once.
    #[arg(long, value_name = "min-epochs=N [eta=3]", num_args = 1..=3, value_delimiter = ',', action = clap::ArgAction::Set)]
    pub halving: Option<Vec<String>>,
    /// Points run at once, the cores divided between them [default: the block's, or 1;
    /// with `--executor slurm`, every point].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: Option<u32>,
    /// Where the points run: `local` (processes on this machine) or `slurm` (each point a
    /// SLURM job, `sbatch --wait`, sharing the cache) [default: local].
    #[arg(long, value_name = "NAME")]
    pub executor: Option<String>,
    /// `sbatch`'s options for every point's job under `--executor slurm`, as one string
    /// (`--slurm-args "--partition=gpu --gres=gpu:1 --time=1:00:00"`).
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub slurm_args: Option<String>,
    /// The metric the points are ranked by, `STAGE.METRIC` (`test.accuracy`,
    /// `train.val_loss`) [default: the `sweep` block's, else the first eval stage's
    /// accuracy (loss for a regression), else the last train stage's loss].
    #[arg(long, value_name = "STAGE.METRIC")]
    pub monitor: Option<String>,
    /// Whether the best is the lowest or the highest [default: the `sweep` block's, else
    /// highest for accuracy, F1, precision, recall, AUROC and R², else lowest].
    #[arg(long, value_enum)]
    pub mode: Option<SweepMode>,
    /// An override every point has, e.g. `--set train.epochs=5` (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE", value_parser = Override::parse)]
    pub set: Vec<Override>,
    /// Print `{"ok", "monitor", "mode", "points": [...]}` (best first) on stdout.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub cache: CacheDir,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SweepMode {
    Min,
    Max,
}

#[derive(Subcommand, Debug, Clone)]
pub enum RunsCommand {
    /// One run: its stages, their status, time, metrics and fingerprints.
    Show {
        /// A run's id (its directory under `.pipeline/runs/`), a unique prefix of one,
        /// `last` or `last~N`.
        #[arg(value_name = "RUN")]
        run: String,
        #[arg(long, default_value = "pipeline.kdl", value_name = "FILE")]
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// What changed from one run to another: settings and inputs, and metrics.
    Diff {
        #[arg(value_name = "RUN")]
        a: String,
        #[arg(value_name = "RUN")]
        b: String,
        #[arg(long, default_value = "pipeline.kdl", value_name = "FILE")]
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

/// Where the cache lives.
#[derive(Args, Debug, Clone, Default)]
pub struct CacheDir {
    /// The cache directory [default: $PIPELINE_CACHE_DIR, or .pipeline/cache next to the
    /// manifest]. An empty one counts as unset. A URL, `s3://BUCKET/PREFIX`, shares the
    /// cache through object storage (endpoint and credentials from the AWS_* variables),
    /// with the local directory in front of it.
    #[arg(long = "cache-dir", value_name = "DIR", global = true, value_parser = parse_dir)]
    pub dir: Option<PathBuf>,
    /// Only the local directory, whatever URL is given (`cache gc` computes the keys to
    /// keep without fetching anything).
    #[arg(skip)]
    pub local_only: bool,
}

#[derive(Subcommand, Debug, Clone)]
pub enum CacheCommand {
    /// List the entries: fingerprint, stage kind, size, last use, and the stages that use them.
    Ls {
        #[arg(long)]
        json: bool,
    },
    /// Remove entries: those no given manifest reaches, or by age or total size.
    Gc {
        /// Keep the entries these manifests' stages would use now.
        #[arg(value_name = "FILE")]
        keep: Vec<PathBuf>,
        /// Override a value of the manifests, as given to `run` (repeatable): the entries
        /// a run with `--set` made are kept only when gc is given the same.
        #[arg(long = "set", value_name = "PATH=VALUE", value_parser = Override::parse)]
        set: Vec<Override>,
        /// Remove entries not used for this many days (0 or more; fractions allowed).
        #[arg(long, value_name = "DAYS", value_parser = parse_days, allow_negative_numbers = true)]
        older_than: Option<f64>,
        /// Remove the least recently used entries until the cache is at most this size,
        /// e.g. `500M`, `2G`.
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        max_size: Option<u64>,
        /// Say what would be removed, remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Re-hash every output in the cache and report corrupt entries.
    Verify {
        /// Remove the corrupt entries (they are rebuilt by the next run that needs them).
        #[arg(long)]
        remove: bool,
    },
}

/// A directory argument; an empty one (`--cache-dir ""`) is unset, as an empty
/// `PIPELINE_CACHE_DIR` is, never the current directory.
fn parse_dir(text: &str) -> Result<PathBuf, String> {
    Ok(PathBuf::from(text))
}

/// A number of days: finite and not negative.
pub fn parse_days(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(days) if days.is_finite() && days >= 0.0 => Ok(days),
        _ => Err(format!(
            "`{text}` is not a number of days: give 0 or more, such as 30 or 0.5"
        )),
    }
}

/// A TCP port other than 0 (which asks the system for any free port: the other
/// processes could not know which).
pub fn parse_port(text: &str) -> Result<u16, String> {
    match text.trim().parse::<u16>() {
        Ok(0) => Err(
            "port 0 cannot be a rendezvous port: the other processes must know \
             the port, so give one from 1 to 65535, or leave --master-port out on one \
             machine to use a free one"
                .into(),
        ),
        Ok(port) => Ok(port),
        Err(_) => Err(format!(
            "`{text}` is not a port: give a number from 1 to 65535"
        )),
    }
}

/// `500M`, `2G`, `1.5G`, `4096` (bytes) → bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (number, unit) = t.split_at(t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len()));
    let scale: u64 = match unit.to_ascii_uppercase().trim_end_matches(['B', 'I']) {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => return Err(format!("unknown unit `{unit}`: use K, M, G or T")),
    };
    let n: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a size such as 500M or 2G"))?;
    if n < 0.0 || !n.is_finite() {
        return Err(format!("`{text}` is not a size such as 500M or 2G"));
    }
    Ok((n * scale as f64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_finite_and_not_negative() {
        assert_eq!(parse_days("0"), Ok(0.0));
        assert_eq!(parse_days("1.5"), Ok(1.5));
        for bad in [
            "-1", "-0.5", "NaN", "nan", "inf", "-inf", "infinity", "", "soon",
        ] {
            let err = parse_days(bad).unwrap_err();
            assert_eq!(
                err,
                format!("`{bad}` is not a number of days: give 0 or more, such as 30 or 0.5")
            );
        }
    }

    #[test]
    fn port_zero_is_refused() {
        assert_eq!(parse_port("29500"), Ok(29500));
        assert!(parse_port("0").unwrap_err().starts_with("port 0 cannot be"));
        assert!(parse_port("65536").is_err());
        assert!(parse_port("-1").is_err());
    }
}
