"""``lakestream demo``: the main job on embedded defaults (:mod:`jobs.demo.pipeline`), the
restart of its database for exploring (``--explore``), and the smaller catalog-only
walk-through (``--appends``, :mod:`jobs.demo.appends`).

Only this entry point configures logging: the demo's own terminal shows its progress, and the
library's log lines (warnings and worse) go to stderr; the ingest job and the compactor log to
files under the home directory.
"""

from __future__ import annotations

from pathlib import Path

from jobs.logs import configure_logging

#: The default home directory, relative to the working directory.
DEFAULT_HOME = Path(".lakestream/demo")


def main(
    home: Path = DEFAULT_HOME,
    *,
    duration: float = 60.0,
    explore: bool = False,
    appends: bool = False,
) -> int:
    """Run the demo chosen by the flags; returns the process exit code."""
    configure_logging("WARNING")
    home = home.resolve()
    if appends:
        from jobs.demo.appends import AppendsConfig, run_appends

        run_appends(AppendsConfig(home=home))
        return 0
    from jobs.demo import pipeline

    if explore:
        return pipeline.explore(home)
    return pipeline.run(pipeline.DemoConfig(home=home, duration=duration))
