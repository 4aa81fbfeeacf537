"""The panel's own infrastructure clients: its Redis, its signed tasks, the worker's database connections and
start-up heap, the JSON cache, secrets at rest, and what it refuses."""
