"""Measures the Ray side of the gangway package (its figures are in docs/performance.md):

* sweep throughput: replays per minute on a local Ray (2 CPUs), against the
  same replays one by one in this process;
* the overhead of a Ray task per replay: wall time of one replay submitted
  as a Ray task and waited for, minus the replay's own time inside the task
  (and an empty task's round trip for scale);
* placement-group latency per gang: a placement group shaped like the
  launcher's (one bundle per server, pinned by ``bundle_label_selector``)
  from creation to ready, on a cluster of 4 fake 8-GPU nodes.

    python host-examples/python/bench/ray_bench.py [--points 16] [--jobs 5000]

Everything runs in a network namespace of its own (only ``lo``), like the
tests; run it as root or where user namespaces are allowed.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import netns  # noqa: E402


def quantiles(xs):
    xs = sorted(xs)
    return statistics.median(xs), xs[min(len(xs) - 1, int(len(xs) * 0.9))]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--points", type=int, default=16, help="sweep points (default 16)")
    p.add_argument("--jobs", type=int, default=5000, help="jobs per replay (default 5000)")
    p.add_argument("--pg-rounds", type=int, default=20, help="placement groups per gang shape (default 20)")
    p.add_argument("--no-sweep", action="store_true", help="only the placement-group figures")
    args = p.parse_args()
    error = netns.enter_private_netns()
    if error is not None:
        print(f"cannot make a private network namespace: {error}", file=sys.stderr)
        return 1
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)

    import ray

    import gangway
    from gangway.sweep import points_of

    presets = ["philly", "locality-first", "tiresias", "fifo"]
    grid = {"policies": presets, "seed": list(range(1, 1 + max(1, args.points // len(presets))))}
    points = points_of(grid)
    base = dict(jobs=args.jobs, time_scale=0.5)
    print(
        f"{len(points)} points, {args.jobs} jobs each (Wasm policies), "
        f"gangway {gangway.__version__}, ray {ray.__version__}"
    )

    if not args.no_sweep:
        sweep_figures(points, grid, base)
    pg_figures(args.pg_rounds)
    return 0


def sweep_figures(points, grid, base) -> None:
    import ray

    import gangway
    from gangway.sweep import run_point

    # In-process, one by one.
    start = time.perf_counter()
    alone = [gangway.replay(**base, **pt, echo=False) for pt in points]
    one_by_one = time.perf_counter() - start
    print(f"one by one in-process: {one_by_one:.1f} s = {60 * len(points) / one_by_one:.1f} replays/min")

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(run_point)

        @ray.remote(num_cpus=1)
        def empty() -> None:
            return None

        ray.get([empty.remote() for _ in range(4)])  # start the workers
        trips = []
        for _ in range(50):
            t = time.perf_counter()
            ray.get(empty.remote())
            trips.append(time.perf_counter() - t)
        med, p90 = quantiles(trips)
        print(f"empty Ray task round trip: median {med * 1000:.2f} ms, p90 {p90 * 1000:.2f} ms")

        argv = gangway.replay_args(**base, **points[0], no_plots=True)
        overheads = []
        for _ in range(5):
            t = time.perf_counter()
            _, err, inside = ray.get(task.remote(argv))
            assert err is None, err
            overheads.append(time.perf_counter() - t - inside)
        med, p90 = quantiles(overheads)
        print(
            "Ray task overhead per replay (wall minus replay time in the task): "
            f"median {med * 1000:.1f} ms, p90 {p90 * 1000:.1f} ms"
        )

        start = time.perf_counter()
        result = gangway.sweep(grid, **base)
        on_ray = time.perf_counter() - start
        same = all(r.json == a.json for r, a in zip(result.reports, alone))
        print(
            f"sweep on local Ray (2 CPUs, workers warm): {on_ray:.1f} s = "
            f"{60 * len(points) / on_ray:.1f} replays/min (sum of replay times in tasks "
            f"{sum(result.seconds):.1f} s); reports identical to one by one: {same}"
        )
    finally:
        ray.shutdown()


def pg_figures(rounds: int) -> None:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    from gangway.ray import LocalCluster

    with LocalCluster(nodes=4, gpus_per_node=8, racks=2) as cluster:
        cluster.connect(log_to_driver=False)
        shapes = {
            "1 GPU on s0": [("s0", 1)],
            "8 GPUs on s1": [("s1", 8)],
            "16 GPUs on s2+s3": [("s2", 8), ("s3", 8)],
        }
        total = ray.cluster_resources().get("GPU", 0)

        def make(shape):
            return placement_group(
                [{"GPU": float(n)} for _, n in shape],
                strategy="PACK",
                bundle_label_selector=[{"gangway/server": s} for s, _ in shape],
            )

        for label, shape in shapes.items():
            # On free GPUs: wait until Ray reports the previous group's GPUs
            # free again before making the next one.
            lat, lag = [], []
            for _ in range(rounds):
                t = time.perf_counter()
                pg = make(shape)
                ray.get(pg.ready())
                lat.append(time.perf_counter() - t)
                remove_placement_group(pg)
                t = time.perf_counter()
                while ray.available_resources().get("GPU", 0) < total and time.perf_counter() - t < 10:
                    time.sleep(0.002)
                lag.append(time.perf_counter() - t)
            med, p90 = quantiles(lat)
            lmed, _ = quantiles(lag)
            print(
                f"placement group ready, {label}, GPUs free: median {med * 1000:.1f} ms, "
                f"p90 {p90 * 1000:.1f} ms ({rounds} runs); "
                f"removed group's GPUs reported free after {lmed * 1000:.0f} ms (median)"
            )
            # Back to back on the same GPUs, as when a gang follows another.
            lat = []
            pg = make(shape)
            ray.get(pg.ready())
            for _ in range(rounds):
                remove_placement_group(pg)
                t = time.perf_counter()
                pg = make(shape)
                ray.get(pg.ready())
                lat.append(time.perf_counter() - t)
            remove_placement_group(pg)
            med, p90 = quantiles(lat)
            print(
                f"placement group ready, {label}, right after removing the last one there: "
                f"median {med * 1000:.1f} ms, p90 {p90 * 1000:.1f} ms"
            )
            time.sleep(2)
        ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
