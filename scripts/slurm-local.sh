#!/bin/bash
# A one-node SLURM cluster on this machine, for trying `pipeline run` under SLURM (issue
# 36; docs/cluster.md): installs Debian's `slurm-wlm` and `munge` when missing, then starts
# munged, slurmctld and slurmd as root with a generated /etc/slurm/slurm.conf
# (`ProctrackType=proctrack/linuxproc`, `TaskPlugin=task/none`, a `jobcomp/filetxt` log),
# and waits until the node is idle (about a second once installed). Run as root; running
# it again with the daemons up changes nothing. scripts/test.sh starts it for
# tests/e2e/slurm.rs (sbatch, scancel and requeue, srun).
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
    echo "slurm-local: run as root (it starts SLURM's daemons)" >&2
    exit 1
fi
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    echo "slurm-local: installing slurm-wlm and munge" >&2
    install=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurm-wlm munge)
    "${install[@]}" >&2 || { apt-get update -q >&2 && "${install[@]}" >&2; }
fi

host=$(hostname -s)
cpus=$(nproc)
# What slurmd may hand out: the machine's memory less 1 GiB.
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge \
    /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /etc/slurm
if [ ! -f /etc/munge/munge.key ]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 2>/dev/null
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
chmod 400 /etc/munge/munge.key
pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged --force

cat > /etc/slurm/slurm.conf <<CONF
ClusterName=local
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
JobCompType=jobcomp/filetxt
JobCompLoc=/var/log/slurm/jobcomp.log
ReturnToService=2
MpiDefault=none
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF

pgrep -x slurmctld >/dev/null || /usr/sbin/slurmctld
pgrep -x slurmd >/dev/null || /usr/sbin/slurmd
for _ in $(seq 1 30); do
    if sinfo -h -o %t 2>/dev/null | grep -qE "idle|mix|alloc"; then
        echo "slurm-local: node $host is up ($(sinfo -h -o '%P %t %C'))" >&2
        exit 0
    fi
    sleep 1
done
echo "slurm-local: the node did not come up; the daemons' logs:" >&2
tail -20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2
exit 1
