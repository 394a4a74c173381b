//! Open MPI's `mpirun`: `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`,
//! `OMPI_COMM_WORLD_LOCAL_RANK`. MPI names no rendezvous host: on one machine it is this
//! one; across machines give rank 0's with `mpirun -x MASTER_ADDR=… -x MASTER_PORT=…`.

use super::{master_addr, number, port, required, ClusterEnvironment, Env, Rendezvous};

pub struct OpenMpi;

impl ClusterEnvironment for OpenMpi {
    fn name(&self) -> &'static str {
        "openmpi"
    }

    fn detect(&self, env: Env) -> bool {
        env("OMPI_COMM_WORLD_SIZE").is_some()
    }

    fn rendezvous(&self, env: Env) -> Result<Rendezvous, String> {
        let rank = required(env, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE is set")?;
        let world = number(env, "OMPI_COMM_WORLD_SIZE")?.unwrap_or(1);
        let on_this_machine: Option<usize> = number(env, "OMPI_COMM_WORLD_LOCAL_SIZE")?;
        let host = match (master_addr(env)?, on_this_machine) {
            (Some(host), _) => host,
            (None, Some(local)) if local == world => "127.0.0.1".into(),
            (None, _) => {
                return Err("the processes span machines and MASTER_ADDR is not set: \
                            pass rank 0's address with `mpirun -x MASTER_ADDR=HOST`"
                    .into())
            }
        };
        Ok(Rendezvous {
            host,
            port: port(env)?,
            rank,
            world,
            local_rank: number(env, "OMPI_COMM_WORLD_LOCAL_RANK")?.unwrap_or(rank),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::env;
    use super::*;
    use crate::launch::DEFAULT_PORT;

    #[test]
    fn open_mpi_variables() {
        let one_machine = [
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ];
        assert_eq!(
            Rendezvous::from_env(env(&one_machine)),
            Ok(Some(Rendezvous {
                host: "127.0.0.1".into(),
                port: DEFAULT_PORT,
                rank: 1,
                world: 2,
                local_rank: 1
            }))
        );
        let two_machines = [
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ];
        let refused = Rendezvous::from_env(env(&two_machines)).unwrap_err();
        assert!(
            refused.starts_with("openmpi environment: the processes span machines"),
            "{refused}"
        );
        let mut given = two_machines.to_vec();
        given.extend([("MASTER_ADDR", "node0"), ("MASTER_PORT", "4000")]);
        let r = Rendezvous::from_env(env(&given)).unwrap().unwrap();
        assert_eq!(
            (r.host.as_str(), r.port, r.rank, r.local_rank),
            ("node0", 4000, 3, 1)
        );
    }
}
