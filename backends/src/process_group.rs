//! A c10d process group: PyTorch's own distributed engine (a TCPStore rendezvous served by
//! rank 0; Gloo collectives for CPU tensors, NCCL for CUDA tensors), reached through the
//! shim (`shim/c10d.cpp`, and `shim/nccl.cpp` in a library of its own, loaded only when a
//! group asks for NCCL). The strategies (data parallel, sharded optimizer state) are built
//! on these collectives.

use crate::device::{dl_error, load_cuda, open_library};
use crate::liveness::{self, Heartbeat};
use crate::shim::{check, raw};
use std::ffi::{c_char, c_void, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;
use tch::{Device, TchError, Tensor};

mod ffi {
    use std::ffi::{c_char, c_void};

    extern "C" {
        pub fn pipeline_group_new(
            host: *const c_char,
            port: i32,
            rank: i32,
            world: i32,
            timeout_ms: i64,
            gloo: bool,
            out: *mut *mut c_void,
        ) -> *const c_char;
        pub fn pipeline_group_free(group: *mut c_void);
        pub fn pipeline_group_layout() -> i64;
        pub fn pipeline_group_all_reduce(
            group: *mut c_void,
            tensors: *mut *mut c_void,
            n: usize,
        ) -> *const c_char;
        pub fn pipeline_group_broadcast(
            group: *mut c_void,
            tensors: *mut *mut c_void,
            n: usize,
            root: i32,
        ) -> *const c_char;
        pub fn pipeline_group_all_gather(
            group: *mut c_void,
            input: *mut c_void,
            outputs: *mut *mut c_void,
            world: usize,
        ) -> *const c_char;
        pub fn pipeline_group_reduce_scatter(
            group: *mut c_void,
            output: *mut c_void,
            inputs: *mut *mut c_void,
            world: usize,
        ) -> *const c_char;
        pub fn pipeline_group_barrier(group: *mut c_void) -> *const c_char;
        #[allow(clippy::too_many_arguments)]
        pub fn pipeline_sync_batch_norm(
            group: *mut c_void,
            input: *mut c_void,
            weight: *mut c_void,
            bias: *mut c_void,
            running_mean: *mut c_void,
            running_var: *mut c_void,
            momentum: f64,
            eps: f64,
            out: *mut *mut c_void,
        ) -> *const c_char;
    }
}

/// `pipeline_group_use_nccl` in `libpipeline_nccl.so`.
type UseNccl =
    unsafe extern "C" fn(group: *mut c_void, rank: i32, world: i32, device: i32) -> *const c_char;

/// Loads the NCCL part of the shim (and libtorch_cuda before it) once.
fn nccl() -> Result<UseNccl, String> {
    static LOADED: OnceLock<Result<UseNccl, String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            load_cuda()?;
            let path = nccl_library()?;
            let handle = open_library(&path)?;
            let symbol = |name: &std::ffi::CStr| {
                // SAFETY: a live handle and a NUL-terminated name.
                let symbol = unsafe { libc::dlsym(handle, name.as_ptr()) };
                match symbol.is_null() {
                    true => Err(format!("{}: {}", path.display(), dl_error())),
                    false => Ok(symbol),
                }
            };
            // SAFETY: the symbols have these types (`shim/nccl.cpp`).
            let layout: unsafe extern "C" fn() -> i64 =
                unsafe { std::mem::transmute(symbol(c"pipeline_nccl_group_layout")?) };
            if unsafe { layout() != ffi::pipeline_group_layout() } {
                return Err(format!(
                    "{} comes from another build of pipeline (rebuild, or remove it)",
                    path.display()
                ));
            }
            Ok(unsafe {
                std::mem::transmute::<*mut c_void, UseNccl>(symbol(c"pipeline_group_use_nccl")?)
            })
        })
        .clone()
}

/// `libpipeline_nccl.so`: where the build put it, else beside the executable (an
/// installed copy).
fn nccl_library() -> Result<PathBuf, String> {
    const NAME: &str = "libpipeline_nccl.so";
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join(NAME)));
    match (option_env!("PIPELINE_NCCL_SHIM"), beside) {
        (Some(built), _) if Path::new(built).exists() => Ok(PathBuf::from(built)),
        (_, Some(path)) if path.exists() => Ok(path),
        (Some(built), _) => Err(format!("{built} is missing (rebuild pipeline)")),
        (None, beside) => Err(match option_env!("PIPELINE_NCCL_MISSING") {
            Some(why) => format!("this build of pipeline has no NCCL support: {why}"),
            // A relocatable build (scripts/device-kit.sh) keeps it beside the executable.
            None => format!(
                "{NAME} is not beside the executable ({})",
                beside.map_or("unknown".into(), |p| p.display().to_string())
            ),
        }),
    }
}

/// The engine behind a group's collectives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Gloo: tensors on the CPU.
    Gloo,
    /// NCCL: tensors on this CUDA device (one per process).
    Nccl { device: usize },
}

/// This process's membership of a group of `world` processes.
#[derive(Debug)]
pub struct ProcessGroup {
    group: *mut c_void,
    pub rank: usize,
    pub world: usize,
    /// Where this group's own small tensors (metrics, flags) go: the CPU under Gloo, the
    /// process's GPU under NCCL. Gradients stay where the model is.
    pub device: Device,
    /// The rendezvous store, through which a failed collective names the ranks that
    /// stopped answering.
    store: liveness::Store,
    /// This process's own heartbeat in it (stopped before the group is freed).
    heartbeat: Option<Heartbeat>,
}

// SAFETY: a group moves between threads but is used by one at a time (it is not Sync);
// Gloo's and NCCL's own threads are internal to it.
unsafe impl Send for ProcessGroup {}

impl ProcessGroup {
    /// Joins the group whose rank 0 serves the rendezvous at `host:port`, waiting at most
    /// `timeout` for the others; every collective then fails after `timeout` instead of
    /// hanging when a peer is gone.
    pub fn join(
        host: &str,
        port: u16,
        rank: usize,
        world: usize,
        timeout: Duration,
        backend: Backend,
    ) -> Result<ProcessGroup, TchError> {
        let torch = |e: String| TchError::Torch(e);
        let store = liveness::Store::new(host, port, rank, world)?;
        let use_nccl = match backend {
            Backend::Gloo => None,
            Backend::Nccl { .. } => Some(nccl().map_err(torch)?),
        };
        let host = CString::new(host).map_err(|e| torch(e.to_string()))?;
        let mut group: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid C string and out-pointer; on success the shim stores an owned group.
        check(unsafe {
            ffi::pipeline_group_new(
                host.as_ptr() as *const c_char,
                i32::from(port),
                rank as i32,
                world as i32,
                timeout.as_millis() as i64,
                use_nccl.is_none(),
                &mut group,
            )
        })?;
        let device = match backend {
            Backend::Gloo => Device::Cpu,
            Backend::Nccl { device } => Device::Cuda(device),
        };
        // Owned from here, so that a failure below frees it.
        let mut group = ProcessGroup {
            group,
            rank,
            world,
            device,
            store,
            heartbeat: None,
        };
        if let (Some(use_nccl), Backend::Nccl { device }) = (use_nccl, backend) {
            // SAFETY: a live group without a backend; the shim gives it one.
            check(unsafe { use_nccl(group.group, rank as i32, world as i32, device as i32) })?;
        }
        group.heartbeat = Some(group.store.beat()?);
        Ok(group)
    }

    /// Sums the tensors element-wise over the group, in place.
    pub fn all_reduce_sum(&self, tensors: &mut [Tensor]) -> Result<(), TchError> {
        let mut ptrs = raw(tensors);
        // SAFETY: live group and tensors for the duration of the call.
        self.named(check(unsafe {
            ffi::pipeline_group_all_reduce(self.group, ptrs.as_mut_ptr(), ptrs.len())
        }))
    }

    /// Copies rank `root`'s tensors into everyone's, in place.
    pub fn broadcast(&self, tensors: &mut [Tensor], root: usize) -> Result<(), TchError> {
        let mut ptrs = raw(tensors);
        // SAFETY: live group and tensors for the duration of the call.
        self.named(check(unsafe {
            ffi::pipeline_group_broadcast(self.group, ptrs.as_mut_ptr(), ptrs.len(), root as i32)
        }))
    }

    /// Every rank's `input`, in rank order, into `outputs` (one tensor per rank).
    pub fn all_gather(&self, input: &mut Tensor, outputs: &mut [Tensor]) -> Result<(), TchError> {
        let mut ptrs = raw(outputs);
        // SAFETY: live group and tensors for the duration of the call.
        self.named(check(unsafe {
            ffi::pipeline_group_all_gather(
                self.group,
                input.as_mut_ptr() as *mut c_void,
                ptrs.as_mut_ptr(),
                ptrs.len(),
            )
        }))
    }

    /// Every rank's `value`, in rank order.
    pub fn gather_values(&self, value: f64) -> Result<Vec<f64>, TchError> {
        let mut mine = Tensor::from_slice(&[value]).f_to_device(self.device)?;
        let mut all: Vec<Tensor> = (0..self.world).map(|_| mine.zeros_like()).collect();
        self.all_gather(&mut mine, &mut all)?;
        all.iter()
            .map(|t| t.f_to_device(Device::Cpu)?.f_double_value(&[0]))
            .collect()
    }

    /// The sum over the group of every rank's `inputs[self.rank]`, into `output`.
    pub fn reduce_scatter_sum(
        &self,
        output: &mut Tensor,
        inputs: &mut [Tensor],
    ) -> Result<(), TchError> {
        let mut ptrs = raw(inputs);
        // SAFETY: live group and tensors for the duration of the call.
        self.named(check(unsafe {
            ffi::pipeline_group_reduce_scatter(
                self.group,
                output.as_mut_ptr() as *mut c_void,
                ptrs.as_mut_ptr(),
                ptrs.len(),
            )
        }))
    }

    /// Averages `tensors` over the group, in buckets of at most `bucket_bytes`: each
    /// bucket is flattened into one buffer, all-reduced once and copied back (what DDP's
    /// reducer does).
    pub fn average(&self, tensors: &mut [Tensor], bucket_bytes: usize) -> Result<(), TchError> {
        let scale = 1.0 / self.world as f64;
        bucketed(tensors, bucket_bytes, |bucket| {
            self.all_reduce_sum(std::slice::from_mut(bucket))?;
            bucket.f_mul_scalar_(scale).map(drop)
        })
    }

    /// Copies rank `root`'s tensors (of any shapes) into everyone's, in buckets.
    pub fn broadcast_all(&self, tensors: &mut [Tensor], root: usize) -> Result<(), TchError> {
        bucketed(tensors, 25 << 20, |bucket| {
            self.broadcast(std::slice::from_mut(bucket), root)
        })
    }

    /// Batch-norm in training mode with the statistics of the whole batch, every
    /// process's share of it (torch's SyncBatchNorm, `shim/sync_bn.cpp`): `input` is
    /// (N, C, …), the running statistics are updated in place, and the backward pass
    /// all-reduces what the input gradient needs.
    #[allow(clippy::too_many_arguments)]
    pub fn sync_batch_norm(
        &self,
        input: &Tensor,
        weight: &Tensor,
        bias: &Tensor,
        running_mean: &Tensor,
        running_var: &Tensor,
        momentum: f64,
        eps: f64,
    ) -> Result<Tensor, TchError> {
        let ptr = |t: &Tensor| t.as_ptr() as *mut c_void;
        let mut out: *mut c_void = std::ptr::null_mut();
        // SAFETY: a live group and live tensors for the duration of the call; on success
        // the shim stores a new tensor in `out`, which we own.
        self.named(check(unsafe {
            ffi::pipeline_sync_batch_norm(
                self.group,
                ptr(input),
                ptr(weight),
                ptr(bias),
                ptr(running_mean),
                ptr(running_var),
                momentum,
                eps,
                &mut out,
            )
        }))?;
        Ok(unsafe { Tensor::from_ptr(out as *mut torch_sys::C_tensor) })
    }

    /// Waits for every rank.
    pub fn barrier(&self) -> Result<(), TchError> {
        // SAFETY: live group.
        self.named(check(unsafe { ffi::pipeline_group_barrier(self.group) }))
    }

    /// A collective's `result`, its failure with the ranks that stopped answering named.
    fn named<T>(&self, result: Result<T, TchError>) -> Result<T, TchError> {
        result.map_err(|e| self.store.explain(e))
    }

    /// The group's store, as the liveness checks see it.
    #[cfg(test)]
    pub(crate) fn liveness(&self) -> &liveness::Store {
        &self.store
    }

    /// Stops this process's heartbeat, as a stopped process's stops.
    #[cfg(test)]
    pub(crate) fn stop_heartbeat(&mut self) {
        self.heartbeat = None;
    }
}

/// A group of one process on `backend` (`nccl`: CUDA device 0; `gloo`: the CPU) and every
/// collective through it, with the values each must give: the GPU machine's kit runs it
/// (`pipeline-worker --self-test-group nccl`), where one GPU allows no group of two.
pub fn self_test(backend: &str) -> Result<String, String> {
    let backend = match backend {
        "nccl" => {
            crate::device::load_cuda()?;
            if !tch::Cuda::is_available() {
                return Err("no CUDA device".into());
            }
            Backend::Nccl { device: 0 }
        }
        "gloo" => Backend::Gloo,
        other => return Err(format!("`{other}` is not a backend (gloo, nccl)")),
    };
    let torch = |e: TchError| crate::error::short_message(&e);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port: {e}"))?
        .port();
    let g = ProcessGroup::join("127.0.0.1", port, 0, 1, Duration::from_secs(60), backend)
        .map_err(torch)?;
    let on = |values: &[f64]| Tensor::from_slice(values).to_device(g.device);
    let got = |t: &Tensor| Vec::<f64>::try_from(t.to_device(Device::Cpu)).map_err(torch);
    let mut sum = [on(&[1.0, 2.0])];
    g.all_reduce_sum(&mut sum).map_err(torch)?;
    let mut root = [on(&[7.0])];
    g.broadcast(&mut root, 0).map_err(torch)?;
    let mut all = [on(&[0.0, 0.0])];
    g.all_gather(&mut on(&[3.0, 4.0]), &mut all)
        .map_err(torch)?;
    let mut part = on(&[0.0]);
    g.reduce_scatter_sum(&mut part, &mut [on(&[5.0])])
        .map_err(torch)?;
    g.barrier().map_err(torch)?;
    let results = [
        ("all-reduce", got(&sum[0])?, vec![1.0, 2.0]),
        ("broadcast", got(&root[0])?, vec![7.0]),
        ("all-gather", got(&all[0])?, vec![3.0, 4.0]),
        ("reduce-scatter", got(&part)?, vec![5.0]),
    ];
    for (what, got, want) in &results {
        if got != want {
            return Err(format!("{what} gave {got:?}, not {want:?}"));
        }
    }
    let on = match g.device {
        Device::Cuda(n) => format!("cuda:{n} (NCCL)"),
        _ => "the CPU (Gloo)".into(),
    };
    Ok(format!(
        "a group of one on {on}: all-reduce, broadcast, all-gather, reduce-scatter and barrier gave the right values"
    ))
}

/// Runs `collective` on flat buffers of at most `bucket_bytes` (one dtype each) made of
/// consecutive `tensors`, and copies the results back into them: c10d's Gloo collectives
/// take one tensor per process.
fn bucketed(
    tensors: &mut [Tensor],
    bucket_bytes: usize,
    mut collective: impl FnMut(&mut Tensor) -> Result<(), TchError>,
) -> Result<(), TchError> {
    let mut start = 0;
    while start < tensors.len() {
        let kind = tensors[start].kind();
        let (mut end, mut bytes) = (start, 0);
        while end < tensors.len()
            && tensors[end].kind() == kind
            && (end == start || bytes + nbytes(&tensors[end]) <= bucket_bytes)
        {
            bytes += nbytes(&tensors[end]);
            end += 1;
        }
        let flat: Vec<Tensor> = tensors[start..end]
            .iter()
            .map(|t| t.reshape([-1]))
            .collect();
        let mut bucket = Tensor::f_cat(&flat, 0)?;
        collective(&mut bucket)?;
        let mut offset = 0;
        for t in &mut tensors[start..end] {
            let n = t.numel() as i64;
            let part = bucket.f_narrow(0, offset, n)?.f_view_as(t)?;
            tch::no_grad(|| t.f_copy_(&part))?;
            offset += n;
        }
        start = end;
    }
    Ok(())
}

fn nbytes(t: &Tensor) -> usize {
    t.numel() * t.kind().elt_size_in_bytes()
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.heartbeat = None;
        // SAFETY: the group was created by `join` and is freed once.
        unsafe { ffi::pipeline_group_free(self.group) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    /// A port nobody listens on now.
    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    /// Runs `body` as every rank of a `world`-process group (threads standing in for
    /// processes) on Gloo, returning each rank's result.
    fn in_group<T: Send + 'static>(
        world: usize,
        body: impl Fn(&ProcessGroup) -> T + Send + Sync + Copy + 'static,
    ) -> Vec<T> {
        in_group_on(world, |_| Backend::Gloo, body)
    }

    /// [`in_group`] with each rank's backend.
    fn in_group_on<T: Send + 'static>(
        world: usize,
        backend: fn(usize) -> Backend,
        body: impl Fn(&ProcessGroup) -> T + Send + Sync + Copy + 'static,
    ) -> Vec<T> {
        let port = free_port();
        let threads: Vec<_> = (0..world)
            .map(|rank| {
                std::thread::spawn(move || {
                    let backend = backend(rank);
                    let mut group = ProcessGroup::join(
                        "127.0.0.1",
                        port,
                        rank,
                        world,
                        Duration::from_secs(30),
                        backend,
                    )
                    .unwrap();
                    body(&mut group)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    }

    fn values(t: &Tensor) -> Vec<f32> {
        Vec::<f32>::try_from(t).unwrap()
    }

    #[test]
    fn gloo_collectives_across_two_ranks() {
        let results = in_group(2, |g| {
            let r = g.rank as f32;
            let mut sum = [Tensor::from_slice(&[r + 1.0, 10.0 * r])];
            g.all_reduce_sum(&mut sum).unwrap();
            let mut from_root = [Tensor::from_slice(&[r + 7.0])];
            g.broadcast(&mut from_root, 0).unwrap();
            let mut mine = Tensor::from_slice(&[r, r]);
            let mut all = [
                Tensor::zeros([2], (Kind::Float, Device::Cpu)),
                Tensor::zeros([2], (Kind::Float, Device::Cpu)),
            ];
            g.all_gather(&mut mine, &mut all).unwrap();
            let mut part = Tensor::zeros([1], (Kind::Float, Device::Cpu));
            let mut inputs = [
                Tensor::from_slice(&[1.0 + r]),
                Tensor::from_slice(&[100.0 * (1.0 + r)]),
            ];
            g.reduce_scatter_sum(&mut part, &mut inputs).unwrap();
            g.barrier().unwrap();
            (
                values(&sum[0]),
                values(&from_root[0]),
                values(&all[0]),
                values(&all[1]),
                values(&part),
            )
        });
        let averaged = in_group(2, |g| {
            let r = g.rank as f32;
            let mut ts = [
                Tensor::from_slice(&[r, 2.0 * r]),
                Tensor::from_slice(&[4.0 + r]),
                Tensor::from_slice(&[r; 3]),
            ];
            g.average(&mut ts, 8).unwrap(); // 8 bytes: two floats, so three buckets
            ts.iter().map(values).collect::<Vec<_>>()
        });
        assert_eq!(averaged[0], [vec![0.5, 1.0], vec![4.5], vec![0.5; 3]]);
        assert_eq!(averaged[0], averaged[1]);
        for (rank, (sum, root, all0, all1, part)) in results.into_iter().enumerate() {
            assert_eq!(sum, [3.0, 10.0]);
            assert_eq!(root, [7.0], "rank 0's value everywhere");
            assert_eq!((all0, all1), (vec![0.0, 0.0], vec![1.0, 1.0]));
            assert_eq!(part, [if rank == 0 { 3.0 } else { 300.0 }]);
        }
    }

    /// Synchronised batch-norm on two ranks (8 rows each) gives the outputs, gradients
    /// and running statistics of plain batch-norm over all 16 rows, also for features
    /// whose mean dwarfs their spread (where sums of squares would cancel).
    #[test]
    fn sync_batch_norm_matches_batch_norm_over_the_whole_batch() {
        fn inputs() -> (Tensor, Tensor, Tensor, Tensor, Tensor) {
            let x = (Tensor::arange(48, (Kind::Float, Device::Cpu)).reshape([16, 3]) * 0.7).sin()
                + Tensor::from_slice(&[300.0f32, 0.0, -5.0]);
            let weight = Tensor::from_slice(&[1.5f32, 0.5, 2.0]).set_requires_grad(true);
            let bias = Tensor::from_slice(&[0.1f32, -0.2, 0.3]).set_requires_grad(true);
            (
                x,
                weight,
                bias,
                Tensor::zeros([3], (Kind::Float, Device::Cpu)),
                Tensor::ones([3], (Kind::Float, Device::Cpu)),
            )
        }
        // Each row's loss weight, so that the rows' gradients differ.
        fn loss(out: &Tensor, first_row: i64) -> Tensor {
            let rows = out.size()[0];
            let coeff =
                (Tensor::arange_start(first_row, first_row + rows, (Kind::Float, Device::Cpu))
                    * 0.3)
                    .cos();
            (out * coeff.unsqueeze(1)).sum(Kind::Float)
        }
        let values = |t: &Tensor| Vec::<f32>::try_from(t.flatten(0, -1)).unwrap();
        let per_rank = in_group(2, move |g| {
            let (x, w, b, rm, rv) = inputs();
            let mine = x
                .narrow(0, 8 * g.rank as i64, 8)
                .detach()
                .set_requires_grad(true);
            let out = g
                .sync_batch_norm(&mine, &w, &b, &rm, &rv, 0.1, 1e-5)
                .unwrap();
            loss(&out, 8 * g.rank as i64).backward();
            [
                values(&out),
                values(&mine.grad()),
                values(&w.grad()),
                values(&b.grad()),
                values(&rm),
                values(&rv),
            ]
        });
        let (x, w, b, rm, rv) = inputs();
        let x = x.set_requires_grad(true);
        let out = Tensor::batch_norm(
            &x,
            Some(&w),
            Some(&b),
            Some(&rm),
            Some(&rv),
            true,
            0.1,
            1e-5,
            false,
        );
        loss(&out, 0).backward();
        let close = |what: &str, got: &[f32], want: &[f32]| {
            let worst = got
                .iter()
                .zip(want)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            assert!(
                got.len() == want.len() && worst < 1e-3,
                "{what}: {got:?} against {want:?}"
            );
        };
        let joined = |k: usize| [per_rank[0][k].clone(), per_rank[1][k].clone()].concat();
        close("output", &joined(0), &values(&out));
        close("input gradient", &joined(1), &values(&x.grad()));
        // The parameters' gradients are each rank's share: data parallelism sums (averages) them.
        let summed = |k: usize| {
            per_rank[0][k]
                .iter()
                .zip(&per_rank[1][k])
                .map(|(a, b)| a + b)
                .collect::<Vec<_>>()
        };
        close("weight gradient", &summed(2), &values(&w.grad()));
        close("bias gradient", &summed(3), &values(&b.grad()));
        for rank in &per_rank {
            close("running mean", &rank[4], &values(&rm));
            close("running variance", &rank[5], &values(&rv));
        }
    }

    /// The NCCL part of the shim links and loads wherever libtorch has CUDA support, GPU
    /// or not (every symbol it needs resolves against the libtorch it runs with).
    #[test]
    fn the_nccl_library_loads_with_libtorch_cuda() {
        if crate::device::load_cuda().is_err() {
            eprintln!("skipped: a CPU-only libtorch");
            return;
        }
        if let Err(why) = nccl() {
            panic!("{why}");
        }
    }

    /// NCCL on every GPU there is (up to 2; one rank per GPU, threads standing in for
    /// processes).
    #[test]
    #[ignore = "needs a CUDA GPU: scripts/test-gpu.sh runs it"]
    fn nccl_collectives_on_the_gpus() {
        crate::device::load_cuda().expect("the CUDA library loads");
        assert!(tch::Cuda::is_available(), "no CUDA device");
        let world = (tch::Cuda::device_count() as usize).min(2);
        let results = in_group_on(
            world,
            |rank| Backend::Nccl { device: rank },
            move |g| {
                let (r, w) = (g.rank as f64, g.world as f64);
                let on = |values: &[f64]| Tensor::from_slice(values).to_device(g.device);
                let mut sum = [on(&[r + 1.0, 10.0 * r])];
                g.all_reduce_sum(&mut sum).unwrap();
                let mut from_root = [on(&[r + 7.0])];
                g.broadcast(&mut from_root, 0).unwrap();
                let mut mine = on(&[r, r]);
                let mut all: Vec<Tensor> = (0..g.world).map(|_| on(&[0.0, 0.0])).collect();
                g.all_gather(&mut mine, &mut all).unwrap();
                let mut part = on(&[0.0]);
                let mut inputs: Vec<Tensor> = (0..g.world)
                    .map(|j| on(&[(j as f64 + 1.0) * (r + 1.0)]))
                    .collect();
                g.reduce_scatter_sum(&mut part, &mut inputs).unwrap();
                let mut averaged = [on(&[r, 2.0 * r]), on(&[4.0 + r])];
                g.average(&mut averaged, 8).unwrap();
                g.barrier().unwrap();
                assert_eq!(sum[0].device(), g.device);
                let v = |t: &Tensor| Vec::<f64>::try_from(t.to_device(Device::Cpu)).unwrap();
                let gathered: Vec<Vec<f64>> = all.iter().map(v).collect();
                (
                    v(&sum[0]),
                    v(&from_root[0]),
                    gathered,
                    v(&part),
                    [v(&averaged[0]), v(&averaged[1])],
                    w,
                )
            },
        );
        for (rank, (sum, root, all, part, averaged, w)) in results.into_iter().enumerate() {
            let r = rank as f64;
            let triangle = w * (w + 1.0) / 2.0;
            assert_eq!(sum, [triangle, 10.0 * (triangle - w)]);
            assert_eq!(root, [7.0]);
            let expected: Vec<Vec<f64>> = (0..all.len()).map(|q| vec![q as f64; 2]).collect();
            assert_eq!(all, expected);
            assert_eq!(part, [(r + 1.0) * triangle]);
            let mean = (w - 1.0) / 2.0;
            assert_eq!(averaged, [vec![mean, 2.0 * mean], vec![4.0 + mean]]);
        }
    }

    #[test]
    fn a_missing_peer_is_an_error_after_the_timeout_not_a_hang() {
        let port = free_port();
        let started = std::time::Instant::now();
        let Err(e) = ProcessGroup::join(
            "127.0.0.1",
            port,
            0,
            2,
            Duration::from_secs(2),
            Backend::Gloo,
        ) else {
            panic!("rank 1 never came");
        };
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
        let message = crate::error::short_message(&e);
        assert!(!message.contains("Exception raised from"), "{message}");
    }
}
