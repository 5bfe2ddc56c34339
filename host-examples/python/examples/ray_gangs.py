"""Gangs on a Ray cluster of fake GPU nodes, placed by Gangway.

    python host-examples/python/examples/ray_gangs.py

Starts a local Ray cluster of 4 nodes of 8 (fake) GPUs in 2 racks with
`ray start`, submits a dozen gangs of 1 to 16 GPUs, and prints where each ran
and which GPU each member saw in CUDA_VISIBLE_DEVICES. Ray binds the host's
address; to keep it on loopback run it in a network namespace of its own:
`unshare --net sh -c 'ip link set lo up && python .../ray_gangs.py'` (as root).
"""

import os
import time

import gangway.ray


def member(seconds):
    ctx = gangway.ray.gang_context()
    time.sleep(seconds)
    return f"rank {ctx.rank} on {ctx.server} GPU {os.environ['CUDA_VISIBLE_DEVICES']}"


def main():
    with gangway.ray.LocalCluster(nodes=4, gpus_per_node=8, racks=2) as cluster:
        cluster.connect(log_to_driver=False)
        launcher = gangway.ray.Launcher(policies="locality-first")
        print(launcher.topology)
        for gpus in [16, 8, 4, 2, 1, 1, 2, 4, 8, 3, 6, 12]:
            launcher.submit(gpus, member, args=(2.0,), vc="research" if gpus % 2 else "prod")
        started = time.perf_counter()
        jobs = launcher.run(timeout_s=600)
        print(f"{len(jobs)} gangs in {time.perf_counter() - started:.1f} s")
        for job in jobs.values():
            attempt = job.attempts[-1]
            print(f"job {job.id:2} ({job.gpus:2} GPUs) {job.status}: {attempt.placement}")
            print(f"    {attempt.results[0]}; placement group ready in {attempt.pg_ready_s * 1000:.0f} ms")


if __name__ == "__main__":
    main()
