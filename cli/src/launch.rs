//! `pipeline run FILE --nproc-per-node N`: starts N `pipeline-worker` processes on this
//! machine (like `torchrun --standalone`), with the environment contract torchrun uses
//! (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`). Rank 0 keeps the
//! terminal (its progress bar, its report on stdout); the others' output is prefixed with
//! their rank. When a worker fails, the others are stopped at once and its exit code is
//! returned; a worker that hangs is caught by the collectives' timeout. With
//! `--max-restarts N`, a group a worker's death ended is started again, up to N times:
//! each worker resumes the training from its latest snapshot, so that the run ends as
//! one never interrupted, bit for bit.

use crate::cli::RunArgs;
use pipeline_core::launch::STOPPED_STATUS;
use std::io::{BufRead, BufReader, IsTerminal};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitCode, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// A port nobody listens on now, for a rendezvous on this machine.
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Copies `from`'s lines to stderr, each prefixed with the worker's rank.
fn prefix_lines(
    from: impl std::io::Read + Send + 'static,
    rank: u32,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines().map_while(Result::ok) {
            eprintln!("[rank {rank}] {line}");
        }
    })
}

pub fn launch(args: &RunArgs) -> ExitCode {
    let (local, nodes) = (args.nproc_per_node, args.nnodes);
    if args.node_rank >= nodes {
        eprintln!(
            "error: --node-rank {} is not below --nnodes {nodes}",
            args.node_rank
        );
        return ExitCode::FAILURE;
    }
    if args.max_restarts > 0 && nodes > 1 {
        eprintln!("error: --max-restarts restarts the processes of one machine, and this run spans {nodes} (--nnodes)");
        eprintln!("  help: restart a job of several machines with its scheduler (SLURM: `sbatch --requeue`, which resumes from the snapshot)");
        return ExitCode::from(2);
    }
    let addr = match (&args.master_addr, args.node_rank) {
        (Some(addr), _) => addr.clone(),
        (None, 0) => "127.0.0.1".into(),
        (None, _) => {
            eprintln!("error: --node-rank {} needs --master-addr: the address of the machine started with --node-rank 0", args.node_rank);
            return ExitCode::FAILURE;
        }
    };
    forward_signals(local as usize, args.requeue_signal.signals());
    // A manifest `check` refuses fails the same way every time: not worth a restart.
    let refused = || {
        let loaded = crate::load::Loaded::read_to_run(&args.file, &args.set, &args.cache);
        loaded.checked.valid().is_none()
    };
    let mut restarts_left = match args.max_restarts {
        0 => 0,
        _ if refused() => 0,
        n => n,
    };
    loop {
        let port = match (args.master_port, nodes) {
            (Some(p), _) => p,
            (None, 1) => match free_port() {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("error: cannot find a free port for the rendezvous: {e}");
                    return ExitCode::FAILURE;
                }
            },
            (None, _) => pipeline_core::launch::DEFAULT_PORT,
        };
        let (ended, report) = match run_group(args, &addr, port, restarts_left > 0) {
            Ok(ended) => ended,
            Err(code) => return code,
        };
        let code = match ended {
            Ended::Done => ExitCode::SUCCESS,
            Ended::Stopped => ExitCode::from(STOPPED_STATUS),
            Ended::Failed(code) if restarts_left == 0 => ExitCode::from(code),
            Ended::Failed(code) => {
                if let Some(signal) = stop_asked() {
                    eprintln!(
                        "error: not restarting: the run was asked to stop ({})",
                        signal_name(signal)
                    );
                    return ExitCode::from(code);
                }
                let done = args.max_restarts - restarts_left + 1;
                eprintln!(
                    "restarting the {} from the latest snapshot (restart {done} of {})",
                    match local {
                        1 => "worker".to_string(),
                        n => format!("{n} workers"),
                    },
                    args.max_restarts
                );
                restarts_left -= 1;
                continue;
            }
        };
        if args.json {
            print_report(&report);
        }
        return code;
    }
}

/// How a group of workers ended.
enum Ended {
    /// Every worker finished the run.
    Done,
    /// A signal stopped the training (`--requeue-signal`), its snapshot written.
    Stopped,
    /// A worker died or failed, with this exit code; the others were stopped.
    Failed(u8),
}

/// Starts this machine's workers of one attempt and waits for them: how they ended, and
/// rank 0's report when `--json` holds it. `Err` when they could not all start.
fn run_group(
    args: &RunArgs,
    addr: &str,
    port: u16,
    will_restart: bool,
) -> Result<(Ended, Vec<u8>), ExitCode> {
    let local = args.nproc_per_node;
    let world = local * args.nnodes;
    let worker = crate::app::worker_program();
    let rank0_terminal = std::io::stderr().is_terminal();
    // Under `--json`, rank 0's report is held here, so that exactly one JSON document
    // reaches stdout even when a worker fails before rank 0 could print one.
    let report = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut children: Vec<(u32, Child)> = Vec::new();
    let mut readers = Vec::new();
    for local_rank in 0..local {
        let rank = args.node_rank * local + local_rank;
        let mut cmd = match crate::app::worker_command() {
            Ok(cmd) => cmd,
            Err(e) => {
                eprintln!("error: cannot find the worker: {e}");
                stop(&mut children);
                return Err(ExitCode::FAILURE);
            }
        };
        cmd.args(std::env::args_os().skip(1));
        // One worker alone (`--max-restarts` without `--nproc-per-node`) is the run a
        // plain `pipeline run` is, without a process group.
        if world > 1 {
            cmd.env("RANK", rank.to_string())
                .env("LOCAL_RANK", local_rank.to_string())
                .env("WORLD_SIZE", world.to_string())
                .env("MASTER_ADDR", addr)
                .env("MASTER_PORT", port.to_string());
        }
        // One worker alone writes to the terminal or log as a plain run does.
        let keeps_terminal = rank == 0 && (rank0_terminal || world == 1);
        if rank != 0 || args.json {
            cmd.stdout(Stdio::piped());
        }
        if !keeps_terminal {
            cmd.stderr(Stdio::piped());
        }
        match cmd.spawn() {
            Ok(mut child) => {
                if let Some(mut out) = child.stdout.take() {
                    readers.push(match rank {
                        0 => {
                            let report = report.clone();
                            std::thread::spawn(move || {
                                let mut bytes = Vec::new();
                                let _ = std::io::Read::read_to_end(&mut out, &mut bytes);
                                report.lock().expect("one writer").extend(bytes);
                            })
                        }
                        _ => prefix_lines(out, rank),
                    });
                }
                if let Some(err) = child.stderr.take() {
                    readers.push(prefix_lines(err, rank));
                }
                watch(local_rank as usize, child.id());
                children.push((rank, child));
            }
            Err(e) => {
                eprintln!("error: cannot start {}: {e}", worker.display());
                stop(&mut children);
                return Err(ExitCode::FAILURE);
            }
        }
    }
    let ended = wait(&mut children, will_restart);
    for slot in 0..local as usize {
        watch(slot, 0);
    }
    for r in readers {
        let _ = r.join();
    }
    let report = std::mem::take(&mut *report.lock().expect("readers joined"));
    Ok((ended, report))
}

/// Prints rank 0's report held under `--json`, or the one document saying why there is
/// none.
fn print_report(report: &[u8]) {
    if report.iter().all(u8::is_ascii_whitespace) {
        let d = manifests::Diagnostic::error(
            "pipeline::launch::worker_failed",
            "a worker failed before rank 0 could report the run",
        )
        .help("the workers' messages are above, on stderr");
        println!("{}", crate::render::json_failure(&[d], None));
    } else {
        let _ = std::io::Write::write_all(&mut std::io::stdout(), report);
    }
}

/// The workers' process ids by local rank (0: none running), for the signal handlers,
/// which may not allocate.
static WORKERS: std::sync::OnceLock<Vec<AtomicI32>> = std::sync::OnceLock::new();
/// The signal that asked the run to stop, once one did (0 before).
static STOP_ASKED: AtomicI32 = AtomicI32::new(0);

/// Passes `signals` (`--requeue-signal`) on to every worker, which stop their training
/// together at a step, its snapshot written; the launcher itself keeps running, to
/// report how they ended.
fn forward_signals(workers: usize, signals: &[i32]) {
    if WORKERS
        .set((0..workers).map(|_| AtomicI32::new(0)).collect())
        .is_err()
    {
        return;
    }
    for &signal in signals {
        // SAFETY: the action reads a vector set before it was registered, stores to an
        // atomic and calls kill(2), all async-signal-safe.
        let registered = unsafe {
            signal_hook::low_level::register(signal, move || {
                STOP_ASKED.store(signal, Ordering::SeqCst);
                for pid in WORKERS.get().into_iter().flatten() {
                    let pid = pid.load(Ordering::SeqCst);
                    if pid > 0 {
                        libc::kill(pid, signal);
                    }
                }
            })
        };
        if let Err(e) = registered {
            eprintln!("warning: signals will not reach the workers: {e}");
        }
    }
}

/// Records the worker of `slot` (its pid; 0 once it ended) for the signal handlers.
fn watch(slot: usize, pid: u32) {
    if let Some(w) = WORKERS.get().and_then(|w| w.get(slot)) {
        w.store(pid as i32, Ordering::SeqCst);
    }
}

/// The signal that asked the run to stop, if one did.
fn stop_asked() -> Option<i32> {
    Some(STOP_ASKED.load(Ordering::SeqCst)).filter(|&s| s != 0)
}

/// A signal's name (`SIGKILL`), as the worker's `backends::preemption::name` says it.
fn signal_name(signal: i32) -> String {
    signal_hook::low_level::signal_name(signal)
        .map_or_else(|| format!("signal {signal}"), String::from)
}

/// Waits for every worker; on the first failure stops the others. A failure is an
/// error, or with `will_restart` a warning: the group is started again.
fn wait(children: &mut [(u32, Child)], will_restart: bool) -> Ended {
    let mut running: Vec<bool> = vec![true; children.len()];
    loop {
        for (i, (rank, child)) in children.iter_mut().enumerate() {
            if !running[i] {
                continue;
            }
            match child.try_wait() {
                Ok(Some(status)) if status.success() => running[i] = false,
                Ok(Some(status)) => {
                    let code = status.code();
                    let rank = *rank;
                    let what = match (code, status.signal()) {
                        (Some(c), _) => format!("exited with code {c}"),
                        (None, Some(s)) => format!("was killed by {}", signal_name(s)),
                        (None, None) => "was killed by a signal".into(),
                    };
                    // A worker a signal stopped (`--requeue-signal`): the others stop at
                    // the same step, and rank 0 has said what happened.
                    if code == Some(i32::from(STOPPED_STATUS)) {
                        let_the_others_end(children, Duration::from_secs(30));
                        stop(children);
                        return Ended::Stopped;
                    }
                    // Code 1 is a worker that reported a problem with the run (a refused
                    // manifest, bad data): the others find it too, each a moment later on
                    // a loaded machine, and may print their own view of it first.
                    if code == Some(1) {
                        let_the_others_end(children, Duration::from_secs(2));
                    }
                    let level = if will_restart { "warning" } else { "error" };
                    match children.len() {
                        // One worker that reported its failure has said it all.
                        1 if code == Some(1) && !will_restart => {}
                        1 => eprintln!("{level}: the worker {what}"),
                        _ => eprintln!("{level}: worker rank {rank} {what}; stopping the others"),
                    }
                    // A peer that hangs makes the healthy ones time out: name it.
                    for (other, child) in children.iter_mut() {
                        let state = match child.try_wait() {
                            Ok(None) => stopped_state(child.id()),
                            _ => None,
                        };
                        if let Some(state) = state {
                            eprintln!("  worker rank {other} was {state}: the others timed out waiting for it");
                        }
                    }
                    stop(children);
                    return Ended::Failed(code.map_or(1, |c| c.clamp(1, 255) as u8));
                }
                Ok(None) => {}
                Err(e) => {
                    eprintln!("error: cannot wait for worker rank {rank}: {e}");
                    stop(children);
                    return Ended::Failed(1);
                }
            }
        }
        if running.iter().all(|r| !r) {
            return Ended::Done;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits up to `grace` for the workers still running to end by themselves.
fn let_the_others_end(children: &mut [(u32, Child)], grace: Duration) {
    let until = Instant::now() + grace;
    while Instant::now() < until
        && children
            .iter_mut()
            .any(|(_, c)| matches!(c.try_wait(), Ok(None)))
    {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How a process that does not run is held, from `/proc/PID/stat` (Linux): stopped by a
/// signal (SIGSTOP, SIGTSTP, Ctrl-Z) or by a debugger; `None` when it runs or sleeps.
fn stopped_state(pid: u32) -> Option<&'static str> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state follows the command name, which is in parentheses and may hold spaces.
    let state = stat.rsplit_once(')')?.1.split_whitespace().next()?;
    match state {
        "T" => Some("stopped by a signal (SIGSTOP or Ctrl-Z)"),
        "t" => Some("stopped by a debugger"),
        _ => None,
    }
}

/// Stops the workers still running, with SIGKILL: a SIGTERM would ask them to stop
/// cleanly (`--requeue-signal`), which they cannot without their peer, and under SLURM
/// would requeue the job. Their snapshots are whole (each is renamed into place).
fn stop(children: &mut [(u32, Child)]) {
    for (_, child) in children.iter_mut() {
        if let Ok(None) = child.try_wait() {
            let _ = child.kill();
        }
        let _ = child.wait();
    }
}
