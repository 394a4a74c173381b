//! `pipeline run FILE --nproc-per-node N`: starts N `pipeline-worker` processes on this
//! machine (like `torchrun --standalone`), with the environment contract torchrun uses
//! (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`). Rank 0 keeps the
//! terminal (its progress bar, its report on stdout); the others' output is prefixed with
//! their rank. When a worker fails, the others are stopped at once and its exit code is
//! returned; a worker that hangs is caught by the collectives' timeout.

use crate::cli::RunArgs;
use pipeline_core::launch::STOPPED_STATUS;
use std::io::{BufRead, BufReader, IsTerminal};
use std::process::{Child, ExitCode, Stdio};
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
    let world = local * nodes;
    if args.node_rank >= nodes {
        eprintln!(
            "error: --node-rank {} is not below --nnodes {nodes}",
            args.node_rank
        );
        return ExitCode::FAILURE;
    }
    let addr = match (&args.master_addr, args.node_rank) {
        (Some(addr), _) => addr.clone(),
        (None, 0) => "127.0.0.1".into(),
        (None, _) => {
            eprintln!("error: --node-rank {} needs --master-addr: the address of the machine started with --node-rank 0", args.node_rank);
            return ExitCode::FAILURE;
        }
    };
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
                return ExitCode::FAILURE;
            }
        };
        cmd.args(std::env::args_os().skip(1))
            .env("RANK", rank.to_string())
            .env("LOCAL_RANK", local_rank.to_string())
            .env("WORLD_SIZE", world.to_string())
            .env("MASTER_ADDR", &addr)
            .env("MASTER_PORT", port.to_string());
        let keeps_terminal = rank == 0 && rank0_terminal;
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
                children.push((rank, child));
            }
            Err(e) => {
                eprintln!("error: cannot start {}: {e}", worker.display());
                stop(&mut children);
                return ExitCode::FAILURE;
            }
        }
    }
    forward_signals(&children, args.requeue_signal.signals());
    let code = wait(&mut children);
    for r in readers {
        let _ = r.join();
    }
    if args.json {
        let report = std::mem::take(&mut *report.lock().expect("readers joined"));
        if report.iter().all(u8::is_ascii_whitespace) {
            let d = manifests::Diagnostic::error(
                "pipeline::launch::worker_failed",
                "a worker failed before rank 0 could report the run",
            )
            .help("the workers' messages are above, on stderr");
            println!("{}", crate::render::json_failure(&[d], None));
        } else {
            let _ = std::io::Write::write_all(&mut std::io::stdout(), &report);
        }
    }
    code
}

/// The workers' process ids, for the signal handlers (which may not allocate).
static WORKERS: std::sync::OnceLock<Vec<libc::pid_t>> = std::sync::OnceLock::new();

/// Passes `signals` (`--requeue-signal`) on to every worker, which stop their training
/// together at a step, its snapshot written; the launcher itself keeps running, to
/// report how they ended.
fn forward_signals(children: &[(u32, Child)], signals: &[i32]) {
    let pids = children
        .iter()
        .map(|(_, c)| c.id() as libc::pid_t)
        .collect();
    if WORKERS.set(pids).is_err() {
        return;
    }
    for &signal in signals {
        // SAFETY: the action reads a vector set before it was registered and calls
        // kill(2), which is async-signal-safe.
        let registered = unsafe {
            signal_hook::low_level::register(signal, move || {
                for &pid in WORKERS.get().into_iter().flatten() {
                    libc::kill(pid, signal);
                }
            })
        };
        if let Err(e) = registered {
            eprintln!("warning: signals will not reach the workers: {e}");
        }
    }
}

/// Waits for every worker; on the first failure stops the others and returns its code.
fn wait(children: &mut [(u32, Child)]) -> ExitCode {
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
                    let what = match code {
                        Some(c) => format!("exited with code {c}"),
                        None => "was killed by a signal".into(),
                    };
                    // A worker a signal stopped (`--requeue-signal`): the others stop at
                    // the same step, and rank 0 has said what happened.
                    if code == Some(i32::from(STOPPED_STATUS)) {
                        let_the_others_end(children, Duration::from_secs(30));
                        stop(children);
                        return ExitCode::from(STOPPED_STATUS);
                    }
                    // Code 1 is a worker that reported a problem with the run (a refused
                    // manifest, bad data): the others find it too, each a moment later on
                    // a loaded machine, and may print their own view of it first.
                    if code == Some(1) {
                        let_the_others_end(children, Duration::from_secs(2));
                    }
                    eprintln!("error: worker rank {rank} {what}; stopping the others");
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
                    return ExitCode::from(code.map_or(1, |c| c.clamp(1, 255) as u8));
                }
                Ok(None) => {}
                Err(e) => {
                    eprintln!("error: cannot wait for worker rank {rank}: {e}");
                    stop(children);
                    return ExitCode::FAILURE;
                }
            }
        }
        if running.iter().all(|r| !r) {
            return ExitCode::SUCCESS;
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

/// Stops the workers still running: SIGTERM, then SIGKILL after a grace period.
fn stop(children: &mut [(u32, Child)]) {
    for (_, child) in children.iter_mut() {
        if let Ok(None) = child.try_wait() {
            // SAFETY: kill(2) on a child's pid, which is still ours (not reaped).
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    for (_, child) in children.iter_mut() {
        while let Ok(None) = child.try_wait() {
            if Instant::now() > deadline {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.wait();
    }
}
