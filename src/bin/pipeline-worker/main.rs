//! `pipeline-worker`: executes `pipeline run` (which hands its arguments over unchanged).
//! The only binary that loads libtorch.

fn main() -> std::process::ExitCode {
    pipeline::worker_main()
}
