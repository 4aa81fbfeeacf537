"""A stand-in `vllm` package for sim hosts: its entry points run workers.sim.engine (no model, no torch).

Put on sys.path only by a sim host's serving venv (workers.sim.venv), never installed.
"""

from workers.sim.engine_http import VLLM_VERSION as __version__  # noqa: F401
