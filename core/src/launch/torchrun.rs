//! torchrun's environment contract (also what `pipeline run --nproc-per-node` sets):
//! `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`.

use super::{master_addr, number, port, required, ClusterEnvironment, Env, Rendezvous};

pub struct Torchrun;

impl ClusterEnvironment for Torchrun {
    fn name(&self) -> &'static str {
        "torchrun"
    }

    fn detect(&self, env: Env) -> bool {
        env("WORLD_SIZE").is_some()
    }

    fn rendezvous(&self, env: Env) -> Result<Rendezvous, String> {
        let rank = required(env, "RANK", "WORLD_SIZE is set")?;
        Ok(Rendezvous {
            host: master_addr(env)?.unwrap_or_else(|| "127.0.0.1".into()),
            port: port(env)?,
            rank,
            world: number(env, "WORLD_SIZE")?.unwrap_or(1),
            local_rank: number(env, "LOCAL_RANK")?.unwrap_or(rank),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::env;
    use super::*;

    #[test]
    fn torchrun_variables() {
        assert_eq!(
            Rendezvous::from_env(env(&[
                ("WORLD_SIZE", "4"),
                ("RANK", "2"),
                ("LOCAL_RANK", "0"),
                ("MASTER_ADDR", "h0"),
                ("MASTER_PORT", "1234")
            ])),
            Ok(Some(Rendezvous {
                host: "h0".into(),
                port: 1234,
                rank: 2,
                world: 4,
                local_rank: 0
            }))
        );
        assert!(Rendezvous::from_env(env(&[("WORLD_SIZE", "two"), ("RANK", "0")])).is_err());
        assert_eq!(
            Rendezvous::from_env(env(&[("WORLD_SIZE", "2")])),
            Err("torchrun environment: WORLD_SIZE is set but RANK is not".into())
        );
    }
}
