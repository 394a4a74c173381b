//! Where a worker stands in a distributed run: the environment contract of `torchrun`
//! (`MASTER_ADDR`, `MASTER_PORT`, `RANK`, `WORLD_SIZE`, `LOCAL_RANK`) and of SLURM
//! (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`, the first host of
//! `SLURM_JOB_NODELIST`), so a cluster scheduler can start the workers itself.

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

fn number<T: std::str::FromStr>(name: &str, value: Option<String>) -> Result<Option<T>, String> {
    value
        .map(|v| {
            v.trim()
                .parse()
                .map_err(|_| format!("{name}={v} is not a number"))
        })
        .transpose()
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

impl Rendezvous {
    /// The rendezvous `get` (the environment) describes: `None` when this is not a
    /// distributed run, `Err` when the variables contradict or are malformed.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Option<Rendezvous>, String> {
        let (rank, world, local, host) = if get("WORLD_SIZE").is_some() {
            (
                number::<usize>("RANK", get("RANK"))?.ok_or("WORLD_SIZE is set but RANK is not")?,
                number::<usize>("WORLD_SIZE", get("WORLD_SIZE"))?.unwrap_or(1),
                number::<usize>("LOCAL_RANK", get("LOCAL_RANK"))?,
                get("MASTER_ADDR"),
            )
        } else if get("SLURM_NTASKS").is_some() {
            (
                number::<usize>("SLURM_PROCID", get("SLURM_PROCID"))?
                    .ok_or("SLURM_NTASKS is set but SLURM_PROCID is not")?,
                number::<usize>("SLURM_NTASKS", get("SLURM_NTASKS"))?.unwrap_or(1),
                number::<usize>("SLURM_LOCALID", get("SLURM_LOCALID"))?,
                get("MASTER_ADDR")
                    .or_else(|| get("SLURM_JOB_NODELIST").as_deref().and_then(first_host)),
            )
        } else {
            return Ok(None);
        };
        if world <= 1 {
            return Ok(None);
        }
        if rank >= world {
            return Err(format!("rank {rank} is not below the world size {world}"));
        }
        Ok(Some(Rendezvous {
            host: host.unwrap_or_else(|| "127.0.0.1".into()),
            port: number::<u16>("MASTER_PORT", get("MASTER_PORT"))?.unwrap_or(DEFAULT_PORT),
            rank,
            world,
            local_rank: local.unwrap_or(rank),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn torchrun_and_slurm_variables() {
        assert_eq!(Rendezvous::from_env(env(&[])), Ok(None));
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
        assert_eq!(
            Rendezvous::from_env(env(&[("WORLD_SIZE", "1"), ("RANK", "0")])),
            Ok(None)
        );
        assert!(Rendezvous::from_env(env(&[("WORLD_SIZE", "2"), ("RANK", "2")])).is_err());
        assert!(Rendezvous::from_env(env(&[("WORLD_SIZE", "two"), ("RANK", "0")])).is_err());
    }

    #[test]
    fn slurm_node_lists() {
        assert_eq!(first_host("a,b").as_deref(), Some("a"));
        assert_eq!(first_host("node[3,5]").as_deref(), Some("node3"));
        assert_eq!(first_host("n1").as_deref(), Some("n1"));
        assert_eq!(first_host("x,y[1-2]").as_deref(), Some("x"));
    }
}
