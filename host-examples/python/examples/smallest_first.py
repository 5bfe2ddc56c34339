"""A fairness policy in Python: smallest gangs first, with starving jobs
(waiting an hour or more) ahead of all, oldest first. The twin of the Rust
example plugins/example-smallest-first, decision for decision.

Natively, for prototyping::

    sched.use_policy("fairness", SmallestFirst())

Sandboxed, for production (a Wasm component every host loads)::

    python -m gangway.componentize smallest_first:SmallestFirst \\
        --slot fairness -o smallest_first.wasm
    replay --large-policies --fairness smallest_first.wasm

Configuration (TOML, as for the Rust twin): ``starve_after_s = 7200``.
"""

try:
    import tomllib
except ImportError:  # Python < 3.11 natively; the component's CPython has it
    import tomli as tomllib


class SmallestFirst:
    """Smallest gangs first; jobs waiting ``starve_after_s`` or more first
    of all, oldest first; every job eligible."""

    def __init__(self, starve_after_s: int = 3600) -> None:
        self.starve_after_s = starve_after_s

    def configure(self, config: bytes) -> None:
        """Reads ``starve_after_s`` from TOML; any other key is refused."""
        options = tomllib.loads(config.decode("utf-8"))
        unknown = set(options) - {"starve_after_s"}
        if unknown:
            raise ValueError(f"example-smallest-first: unknown option {sorted(unknown)[0]!r}")
        value = options.get("starve_after_s", self.starve_after_s)
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"example-smallest-first: starve_after_s = {value!r} is not a number of seconds")
        self.starve_after_s = value

    def order(self, view):
        def key(job):
            starving = job.waiting_s >= self.starve_after_s
            return (not starving, 0 if starving else job.gpus, job.submitted_s, job.id)

        return {"order": [{"job": j.id, "eligible": True} for j in sorted(view.jobs, key=key)]}
