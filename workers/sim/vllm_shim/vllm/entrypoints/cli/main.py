"""`python -m vllm.entrypoints.cli.main serve MODEL ...` on a sim host (multi-node followers)."""

import sys

from workers.sim.engine import main

if __name__ == "__main__":
    sys.exit(main())
