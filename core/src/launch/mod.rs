//! Where a worker stands in a distributed run, as whatever started it says: one trait,
//! [`ClusterEnvironment`], and a registry of its members, one file each (Lightning's
//! `ClusterEnvironment` plugins), so that a scheduler can start the workers itself.
//!
//! | member | started by | says so with | file |
//! |---|---|---|---|
//! | `torchrun` | torchrun, `pipeline run --nproc-per-node` | `WORLD_SIZE` | `torchrun.rs` |
//! | `slurm` | `srun` | `SLURM_NTASKS` | `slurm.rs` |
//! | `openmpi` | Open MPI's `mpirun` | `OMPI_COMM_WORLD_SIZE` | `openmpi.rs` |
//!
//! The first registered member that detects its variables decides; a library user's
//! members ([`register`]) are asked before the built-ins.

/// The exit status of a run a signal stopped (`--requeue-signal`: its trainings'
/// snapshots written): 128 + SIGTERM's number, as a shell reports a process SIGTERM
/// ended. The launcher passes it on.
pub const STOPPED_STATUS: u8 = 143;

/// The code of a stage a signal stopped, or kept from starting.
pub const STOPPED: &str = "pipeline::run::preempted";

mod openmpi;
mod slurm;
mod torchrun;

pub use slurm::first_host;

use std::sync::{Arc, OnceLock, RwLock};

/// The rendezvous of one worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendezvous {
    pub host: String,
    pub port: u16,
    pub rank: usize,
    pub world: usize,
    pub local_rank: usize,
}

/// The port rank 0 serves the rendezvous on when none is given (as torchrun's).
pub const DEFAULT_PORT: u16 = 29500;

/// The process's environment, as a function (tests give a map).
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// A kind of cluster that starts the processes of a distributed run.
pub trait ClusterEnvironment: Send + Sync {
    /// Its name in messages and `pipeline explain`.
    fn name(&self) -> &'static str;

    /// Whether this process was started by it (its variables are set).
    fn detect(&self, env: Env) -> bool;

    /// This process's place in the run; `Err` when the variables contradict or are
    /// malformed.
    fn rendezvous(&self, env: Env) -> Result<Rendezvous, String>;
}

fn registry() -> &'static RwLock<Vec<Arc<dyn ClusterEnvironment>>> {
    static MEMBERS: OnceLock<RwLock<Vec<Arc<dyn ClusterEnvironment>>>> = OnceLock::new();
    MEMBERS.get_or_init(|| {
        RwLock::new(vec![
            Arc::new(torchrun::Torchrun),
            Arc::new(slurm::Slurm),
            Arc::new(openmpi::OpenMpi),
        ])
    })
}

/// Adds a kind of cluster, asked before those registered so far (one with the same name
/// is replaced).
pub fn register(member: Arc<dyn ClusterEnvironment>) {
    let mut members = registry().write().unwrap_or_else(|e| e.into_inner());
    members.retain(|m| m.name() != member.name());
    members.insert(0, member);
}

/// The registered kinds of cluster, in the order they are asked.
pub fn members() -> Vec<Arc<dyn ClusterEnvironment>> {
    registry().read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// `name=value` read as a whole number of `T` (a rank, a count: 0 or more); a value
/// that is not one is refused, naming the variable, the value and what it takes.
pub fn number<T: std::str::FromStr + Bounded>(env: Env, name: &str) -> Result<Option<T>, String> {
    env(name)
        .map(|v| {
            v.trim().parse().map_err(|_| {
                format!(
                    "{name}={} is not a whole number from 0 to {}",
                    v.escape_debug(),
                    T::MAX
                )
            })
        })
        .transpose()
}

/// The largest value of an integer type, for messages.
pub trait Bounded {
    const MAX: u64;
}

impl Bounded for usize {
    const MAX: u64 = usize::MAX as u64;
}

impl Bounded for u16 {
    const MAX: u64 = u16::MAX as u64;
}

/// `name` as a number, which must be set.
pub fn required<T: std::str::FromStr + Bounded>(
    env: Env,
    name: &str,
    why: &str,
) -> Result<T, String> {
    number(env, name)?.ok_or_else(|| format!("{why} but {name} is not"))
}

/// The rendezvous port: `MASTER_PORT` (1 to 65535), else [`DEFAULT_PORT`].
pub fn port(env: Env) -> Result<u16, String> {
    match number(env, "MASTER_PORT")? {
        Some(0) => Err("MASTER_PORT=0 is not a port: it takes 1 to 65535".into()),
        Some(port) => Ok(port),
        None => Ok(DEFAULT_PORT),
    }
}

/// The rendezvous host: `MASTER_ADDR` when set, which must name one (not be empty or
/// hold spaces).
pub fn master_addr(env: Env) -> Result<Option<String>, String> {
    match env("MASTER_ADDR") {
        None => Ok(None),
        Some(host)
            if !host.is_empty() && !host.chars().any(|c| c.is_whitespace() || c.is_control()) =>
        {
            Ok(Some(host))
        }
        Some(host) => Err(format!(
            "MASTER_ADDR={} is not a host: it takes rank 0's host name or IP address",
            host.escape_debug()
        )),
    }
}

impl Rendezvous {
    /// The rendezvous the environment `get` describes, by the first cluster that detects
    /// its variables: `None` when this is not a distributed run (no cluster, or a world of
    /// one), `Err` when the variables contradict or are malformed.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Option<Rendezvous>, String> {
        let env: Env = &get;
        let Some(cluster) = members().into_iter().find(|m| m.detect(env)) else {
            return Ok(None);
        };
        let r = cluster
            .rendezvous(env)
            .map_err(|why| format!("{} environment: {why}", cluster.name()))?;
        if r.world == 0 {
            return Err(format!(
                "{} environment: the world size is 0: it takes 1 or more processes",
                cluster.name()
            ));
        }
        if r.world == 1 {
            return Ok(None);
        }
        if r.rank >= r.world {
            return Err(format!(
                "{} environment: rank {} is not below the world size {}",
                cluster.name(),
                r.rank,
                r.world
            ));
        }
        Ok(Some(r))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::HashMap;

    pub(crate) fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn no_cluster_or_a_world_of_one_is_not_distributed() {
        assert_eq!(Rendezvous::from_env(env(&[])), Ok(None));
        assert_eq!(
            Rendezvous::from_env(env(&[("WORLD_SIZE", "1"), ("RANK", "0")])),
            Ok(None)
        );
        assert_eq!(
            Rendezvous::from_env(env(&[("WORLD_SIZE", "2"), ("RANK", "2")])),
            Err("torchrun environment: rank 2 is not below the world size 2".into())
        );
    }

    #[test]
    fn malformed_variables_are_named_with_what_they_take() {
        let refused = |pairs: &[(&str, &str)]| Rendezvous::from_env(env(pairs)).unwrap_err();
        assert_eq!(
            refused(&[("WORLD_SIZE", "two"), ("RANK", "0")]),
            format!(
                "torchrun environment: WORLD_SIZE=two is not a whole number from 0 to {}",
                usize::MAX
            )
        );
        assert_eq!(
            refused(&[("WORLD_SIZE", "2"), ("RANK", "-1")]),
            format!(
                "torchrun environment: RANK=-1 is not a whole number from 0 to {}",
                usize::MAX
            )
        );
        assert_eq!(
            refused(&[("WORLD_SIZE", "0"), ("RANK", "0")]),
            "torchrun environment: the world size is 0: it takes 1 or more processes"
        );
        let two = [("WORLD_SIZE", "2"), ("RANK", "0")];
        let with = |extra: (&'static str, &'static str)| {
            let mut pairs = two.to_vec();
            pairs.push(extra);
            refused(&pairs)
        };
        assert_eq!(
            with(("MASTER_PORT", "70000")),
            "torchrun environment: MASTER_PORT=70000 is not a whole number from 0 to 65535"
        );
        assert_eq!(
            with(("MASTER_PORT", "0")),
            "torchrun environment: MASTER_PORT=0 is not a port: it takes 1 to 65535"
        );
        assert_eq!(
            with(("MASTER_ADDR", "")),
            "torchrun environment: MASTER_ADDR= is not a host: it takes rank 0's host name or IP address"
        );
        assert_eq!(
            with(("MASTER_ADDR", "a\u{7}")),
            "torchrun environment: MASTER_ADDR=a\\u{7} is not a host: it takes rank 0's host name or IP address"
        );
    }

    /// A cluster of a library user's, asked before the built-ins.
    struct Fixed;

    impl ClusterEnvironment for Fixed {
        fn name(&self) -> &'static str {
            "fixed"
        }
        fn detect(&self, env: Env) -> bool {
            env("FIXED_RANK").is_some()
        }
        fn rendezvous(&self, env: Env) -> Result<Rendezvous, String> {
            Ok(Rendezvous {
                host: "head".into(),
                port: 1,
                rank: required(env, "FIXED_RANK", "FIXED_RANK is read")?,
                world: 4,
                local_rank: 0,
            })
        }
    }

    #[test]
    fn a_registered_cluster_is_asked_first() {
        register(Arc::new(Fixed));
        let r = Rendezvous::from_env(env(&[
            ("FIXED_RANK", "3"),
            ("WORLD_SIZE", "2"),
            ("RANK", "0"),
        ]));
        assert_eq!(r.unwrap().unwrap().rank, 3);
        assert_eq!(members()[0].name(), "fixed");
        assert_eq!(
            members().iter().map(|m| m.name()).collect::<Vec<_>>()[1..],
            ["torchrun", "slurm", "openmpi"]
        );
    }
}
