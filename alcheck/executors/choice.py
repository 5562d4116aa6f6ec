"""Which executor a sweep uses beyond the automatic ones: `--executor local|ray` and `--ray-address`.

Not part of RunConfig: where the cells ran changes no number (a run started on Ray resumes locally),
so it travels beside the config, checked before the run directory is claimed.
"""

from __future__ import annotations

from dataclasses import dataclass

from alcheck.errors import AlcheckError

EXECUTORS = ("local", "ray")
RAY_EXTRA = "pip install 'alcheck[ray]'"


@dataclass
class ExecutorChoice:
    name: str = "local"  # local: this process, --devices workers or tensor-parallel ranks (the sweep picks)
    ray_address: str | None = None  # None with name == "ray": start a local Ray

    @property
    def is_ray(self) -> bool:
        return self.name == "ray"

    def check(self, cfg) -> None:
        """One line, exit 2, before anything is claimed or loaded."""
        if self.ray_address and not self.is_ray:
            raise AlcheckError("--ray-address needs --executor ray: add it, or drop --ray-address")
        if not self.is_ray:
            return
        if cfg.devices:
            raise AlcheckError(
                "--executor ray places the cells on the cluster's workers itself: drop --devices"
            )
        if cfg.engine:
            raise AlcheckError(
                "--executor ray runs the built-in runner only: drop --executor ray to measure a server"
            )
        import_ray()


def import_ray():
    """The ray module, or a one-line error naming the extra."""
    try:
        import ray
    except ImportError:
        raise AlcheckError(f"--executor ray needs Ray, which is not installed: {RAY_EXTRA}") from None
    return ray
