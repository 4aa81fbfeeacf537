"""Building an engine's launch: the argv and environment of the process or the container, the launch spec,
what a version accepts (launch_matrix.yaml), flags, the environment allow-list, chip recipes
(recipes.yaml), CPU binding, KV transfer, the serving venv, free ports."""
