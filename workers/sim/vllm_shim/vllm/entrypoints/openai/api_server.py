"""`python -m vllm.entrypoints.openai.api_server ...` on a sim host: the sim engine with the same flags."""

import sys

from workers.sim.engine import main

if __name__ == "__main__":
    sys.exit(main())
