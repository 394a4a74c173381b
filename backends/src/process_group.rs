//! A c10d process group: PyTorch's own distributed engine (a TCPStore rendezvous served by
//! rank 0, Gloo collectives), reached through the shim (`shim/c10d.cpp`). The strategies
//! (data parallel, sharded optimizer state) are built on these collectives.

use crate::optimizer::check;
use std::ffi::{c_char, c_void, CString};
use std::time::Duration;
use tch::{TchError, Tensor};

mod ffi {
    use std::ffi::{c_char, c_void};

    extern "C" {
        pub fn pipeline_group_new(
            host: *const c_char,
            port: i32,
            rank: i32,
            world: i32,
            timeout_ms: i64,
            out: *mut *mut c_void,
        ) -> *const c_char;
        pub fn pipeline_group_free(group: *mut c_void);
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
    }
}

fn raw(tensors: &mut [Tensor]) -> Vec<*mut c_void> {
    tensors
        .iter_mut()
        .map(|t| t.as_mut_ptr() as *mut c_void)
        .collect()
}

/// This process's membership of a group of `world` processes.
#[derive(Debug)]
pub struct ProcessGroup {
    group: *mut c_void,
    pub rank: usize,
    pub world: usize,
}

// SAFETY: a group moves between threads but is used by one at a time (it is not Sync);
// Gloo's own threads are internal to it.
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
    ) -> Result<ProcessGroup, TchError> {
        let host = CString::new(host).map_err(|e| TchError::Torch(e.to_string()))?;
        let mut group: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid C string and out-pointer; on success the shim stores an owned group.
        check(unsafe {
            ffi::pipeline_group_new(
                host.as_ptr() as *const c_char,
                i32::from(port),
                rank as i32,
                world as i32,
                timeout.as_millis() as i64,
                &mut group,
            )
        })?;
        Ok(ProcessGroup { group, rank, world })
    }

    /// Sums the tensors element-wise over the group, in place.
    pub fn all_reduce_sum(&self, tensors: &mut [Tensor]) -> Result<(), TchError> {
        let mut ptrs = raw(tensors);
        // SAFETY: live group and tensors for the duration of the call.
        check(unsafe { ffi::pipeline_group_all_reduce(self.group, ptrs.as_mut_ptr(), ptrs.len()) })
    }

    /// Copies rank `root`'s tensors into everyone's, in place.
    pub fn broadcast(&self, tensors: &mut [Tensor], root: usize) -> Result<(), TchError> {
        let mut ptrs = raw(tensors);
        // SAFETY: live group and tensors for the duration of the call.
        check(unsafe {
            ffi::pipeline_group_broadcast(self.group, ptrs.as_mut_ptr(), ptrs.len(), root as i32)
        })
    }

    /// Every rank's `input`, in rank order, into `outputs` (one tensor per rank).
    pub fn all_gather(&self, input: &mut Tensor, outputs: &mut [Tensor]) -> Result<(), TchError> {
        let mut ptrs = raw(outputs);
        // SAFETY: live group and tensors for the duration of the call.
        check(unsafe {
            ffi::pipeline_group_all_gather(
                self.group,
                input.as_mut_ptr() as *mut c_void,
                ptrs.as_mut_ptr(),
                ptrs.len(),
            )
        })
    }

    /// The sum over the group of every rank's `inputs[self.rank]`, into `output`.
    pub fn reduce_scatter_sum(
        &self,
        output: &mut Tensor,
        inputs: &mut [Tensor],
    ) -> Result<(), TchError> {
        let mut ptrs = raw(inputs);
        // SAFETY: live group and tensors for the duration of the call.
        check(unsafe {
            ffi::pipeline_group_reduce_scatter(
                self.group,
                output.as_mut_ptr() as *mut c_void,
                ptrs.as_mut_ptr(),
                ptrs.len(),
            )
        })
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

    /// Waits for every rank.
    pub fn barrier(&self) -> Result<(), TchError> {
        // SAFETY: live group.
        check(unsafe { ffi::pipeline_group_barrier(self.group) })
    }
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
    /// processes), returning each rank's result.
    fn in_group<T: Send + 'static>(
        world: usize,
        body: impl Fn(&ProcessGroup) -> T + Send + Sync + Copy + 'static,
    ) -> Vec<T> {
        let port = free_port();
        let threads: Vec<_> = (0..world)
            .map(|rank| {
                std::thread::spawn(move || {
                    let mut group =
                        ProcessGroup::join("127.0.0.1", port, rank, world, Duration::from_secs(30))
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

    #[test]
    fn a_missing_peer_is_an_error_after_the_timeout_not_a_hang() {
        let port = free_port();
        let started = std::time::Instant::now();
        let Err(e) = ProcessGroup::join("127.0.0.1", port, 0, 2, Duration::from_secs(2)) else {
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
