//! SLURM's `srun`: `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`, and the first host of
//! `SLURM_JOB_NODELIST` as the rendezvous host (unless `MASTER_ADDR` says otherwise).

use super::{master_addr, number, port, required, ClusterEnvironment, Env, Rendezvous};

pub struct Slurm;

impl ClusterEnvironment for Slurm {
    fn name(&self) -> &'static str {
        "slurm"
    }

    fn detect(&self, env: Env) -> bool {
        env("SLURM_NTASKS").is_some()
    }

    fn rendezvous(&self, env: Env) -> Result<Rendezvous, String> {
        let rank = required(env, "SLURM_PROCID", "SLURM_NTASKS is set")?;
        let host =
            master_addr(env)?.or_else(|| env("SLURM_JOB_NODELIST").as_deref().and_then(first_host));
        Ok(Rendezvous {
            host: host.unwrap_or_else(|| "127.0.0.1".into()),
            port: port(env)?,
            rank,
            world: number(env, "SLURM_NTASKS")?.unwrap_or(1),
            local_rank: number(env, "SLURM_LOCALID")?.unwrap_or(rank),
        })
    }
}

/// The first host of a SLURM node list: `node[01-04,07],gpu1` → `node01`.
pub fn first_host(nodelist: &str) -> Option<String> {
    let first = match (nodelist.find(','), nodelist.find('[')) {
        (Some(comma), Some(bracket)) if comma < bracket => &nodelist[..comma],
        (Some(comma), None) => &nodelist[..comma],
        _ => nodelist,
    };
    match first.split_once('[') {
        None => Some(first.trim().to_string()).filter(|h| !h.is_empty()),
        Some((prefix, rest)) => {
            let range = rest.split([',', ']']).next()?;
            let start = range.split('-').next()?;
            Some(format!("{prefix}{start}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::env;
    use super::*;
    use crate::launch::DEFAULT_PORT;

    #[test]
    fn slurm_variables() {
        assert_eq!(
            Rendezvous::from_env(env(&[
                ("SLURM_NTASKS", "8"),
                ("SLURM_PROCID", "5"),
                ("SLURM_LOCALID", "1"),
                ("SLURM_JOB_NODELIST", "gpu[07-08,11],login")
            ])),
            Ok(Some(Rendezvous {
                host: "gpu07".into(),
                port: DEFAULT_PORT,
                rank: 5,
                world: 8,
                local_rank: 1
            }))
        );
    }

    #[test]
    fn slurm_node_lists() {
        assert_eq!(first_host("a,b").as_deref(), Some("a"));
        assert_eq!(first_host("node[3,5]").as_deref(), Some("node3"));
        assert_eq!(first_host("n1").as_deref(), Some("n1"));
        assert_eq!(first_host("x,y[1-2]").as_deref(), Some("x"));
    }
}
