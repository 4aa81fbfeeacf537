"""Known Ascend failure signatures: the data workers.ascend.diagnose matches log lines against.

Rows live in Python rather than YAML so that the translation tools find the `_()`-marked titles and hints.
Each pattern is a regular expression tried on one log line. Numeric and lettered Ascend error codes go
through `token()` so that 207001 matches `result = 207001[FUNC...` but not 12070012.
"""

from workers.ascend.signature_types import Signature, token
from workers.ascend.signatures_field import FIELD_SIGNATURES
from workers.i18n import gettext_noop as _

__all__ = ["SIGNATURES", "Signature", "token"]

SIGNATURES: tuple[Signature, ...] = (
    Signature(
        code="npu_oom",
        title=_("NPU out of memory"),
        hint=_(
            "The weights, KV cache and activations do not fit in the NPU's HBM. Lower "
            "--gpu-memory-utilization, --max-model-len or --max-num-seqs, spread the model over more NPUs "
            "(tensor parallel), or use a quantized (W8A8) model. PYTORCH_NPU_ALLOC_CONF="
            "expandable_segments:True reduces fragmentation. Check with npu-smi that no other process "
            "holds HBM on these NPUs."
        ),
        patterns=(r"(?i)\bNPU out of memory\b", token("EL0004"), token("207001"), token("ERR00006")),
    ),
    Signature(
        code="hccl",
        title=_("Communication between the NPUs failed (HCCL)"),
        hint=_(
            "Collective communication between ranks failed to start. Check that every rank starts within "
            "HCCL_CONNECT_TIMEOUT (raise it, e.g. to 1200), that port 16666 and the ports above it are free "
            "(a leftover vLLM process often holds them: ss -ltnp), that HCCL_IF_IP or HCCL_SOCKET_IFNAME "
            "name the right network interface, and on several hosts that the NPU links are up "
            "(hccn_tool -i N -link -g)."
        ),
        # EI0006 is hccl_socket_timeout, a failed HcclCommInitRootInfo hccl_init_failed (signatures_field).
        patterns=(
            token("EI0009"),
            token("ERR02200"),
            r"(?i)\blisten\b.*(?<!\d)16666(?!\d).*\bfail",
        ),
    ),
    Signature(
        code="cann_mismatch",
        title=_("CANN packages do not match each other"),
        hint=_(
            "The CANN toolkit, the operator (kernels/ops) package, torch-npu and vllm-ascend must come from "
            "matching releases. Compare the installed versions with the vllm-ascend compatibility table, "
            "install the kernels package of the same version as the toolkit, and source that toolkit's "
            "set_env.sh before starting."
        ),
        # 500001 is soc_init_failed, 507033 visible_device_invalid (workers.ascend.signatures_field).
        patterns=(token("E30006"), r"(?i)\binvalid opp version\b"),
    ),
    Signature(
        code="soc_mismatch",
        title=_("Packages were built for another Ascend chip"),
        hint=_(
            "The installed operator packages or the vllm-ascend build target a different chip than this "
            "host's NPUs (for example 910B packages on a 310P card). Install the kernels package and the "
            "vllm-ascend build for this chip (npu-smi info -t board -i N -c 0 shows the chip name), or "
            "rebuild with SOC_VERSION set to it."
        ),
        patterns=(r"(?i)\bsoc_?version\b.*\bdoes not match\b",),
    ),
    Signature(
        code="device_unavailable",
        title=_("NPU not available to the process"),
        hint=_(
            "The process could not open the NPU it was given. Check that ASCEND_RT_VISIBLE_DEVICES lists "
            "logic IDs that exist (npu-smi info -m), that no other process or container holds the NPU, that "
            "a container has /dev/davinciN, /dev/davinci_manager, /dev/devmm_svm and /dev/hisi_hdc, and "
            "that npu-smi info shows the NPU as OK."
        ),
        patterns=(token("207004"), r"(?i)\binvalid device id\b"),
    ),
    Signature(
        code="env_not_sourced",
        title=_("Ascend environment not loaded"),
        hint=_(
            "The CANN libraries were not found. Source the toolkit and NNAL environments before starting: "
            "source /usr/local/Ascend/ascend-toolkit/set_env.sh (CANN 8.5 and later: "
            "/usr/local/Ascend/cann/set_env.sh) and source /usr/local/Ascend/nnal/atb/set_env.sh, and make "
            "sure /usr/local/Ascend/driver/lib64 is on LD_LIBRARY_PATH. If a library is still missing, its "
            "package (driver, toolkit or NNAL) is not installed."
        ),
        patterns=(
            r"(?i)\bFailed to infer device type\b",
            r"lib(?:atb|hccl|ascend_hal)\.so[^:\s]*: cannot open shared object file",
        ),
    ),
    Signature(
        code="kv_cache_no_memory",
        title=_("No memory left for the KV cache"),
        hint=_(
            "After loading the weights no HBM was left for KV cache blocks. Raise --gpu-memory-utilization "
            "(e.g. to 0.9), spread the model over more NPUs, use a quantized model, or stop other processes "
            "that use these NPUs."
        ),
        patterns=(
            r"(?i)\bNo available memory for the cache blocks\b",
            # The workers' own report, which comes before vLLM's error (and alone when the log was cut):
            # vllm-ascend prints bytes, vLLM GiB; nothing or less than nothing is left for KV blocks.
            r"\bAvailable memory: (?:-\d+|0)\s*, total memory\b",
            r"\bAvailable KV cache memory: (?:-\d+(?:\.\d+)?|0(?:\.0+)?) GiB\b",
        ),
    ),
    Signature(
        code="op_unsupported",
        title=_("An operator failed on the NPU"),
        hint=_(
            "An NPU operator was rejected or failed, most often because it is not supported on this chip or "
            "CANN version (for example on 310P) or the operator (kernels) package is missing. Install the "
            "kernels package that matches the toolkit, use the CANN and torch-npu versions vllm-ascend asks "
            "for, and try --enforce-eager. ASCEND_LAUNCH_BLOCKING=1 names the failing operator."
        ),
        patterns=(
            r"call aclnn\w+ failed",
            r"(?i)\bcurrent working operator name is\b",
            r"(?i)\boperator\b.*\bnot supported\b",
        ),
        weak_patterns=(token("ERR00100"), token("ERR01100")),
    ),
    Signature(
        code="graph_capture",
        title=_("Graph capture failed"),
        hint=_(
            "Capturing ACL graphs ran out of NPU streams or memory, or the model's attention layout is not "
            "supported in graph mode. Capture fewer sizes (--compilation-config "
            "'{\"cudagraph_capture_sizes\": [1, 8, 32]}'), lower --max-num-seqs, upgrade the Ascend driver "
            "and CANN, or start with --enforce-eager. MLA models (DeepSeek) in graph mode need a tensor "
            "parallel size that leaves 32, 64 or 128 attention heads per NPU."
        ),
        # 207008 is graph_stream_exhausted and MLA's heads rule mla_tp_unsupported (signatures_field).
        patterns=(
            token("207005"),
            r"(?i)\bcaptur\w*\b.*\b(?:failed|error)\b",
        ),
    ),
    Signature(
        code="device_lost",
        title=_("NPU stopped responding"),
        hint=_(
            "The driver lost the NPU's heartbeat: a hardware or driver fault, overheating or a device reset. "
            "Check npu-smi info -t health -i N, dmesg and the device logs under /var/log/npu/, reset the NPU "
            "(npu-smi set -t reset -i N -c 0) or reboot the host, and report a repeated fault to Huawei "
            "support."
        ),
        patterns=(token("507010"), r"(?i)\blost heartbeat\b|\bheartbeat\b.*\blost\b"),
    ),
    # An MLA model (DeepSeek-style latent attention) whose latent row, kv_lora_rank + qk_rope_head_dim, the
    # engine's MLA backend has no kernel for: it loads, answers /health and dies at its first request.
    Signature(
        code="mla_head_dim",
        title=_("No MLA attention kernel for this model's head size"),
        hint=_(
            "The model uses MLA (DeepSeek-style latent attention) with a head size this engine's attention "
            "kernels do not have: kv_lora_rank + qk_rope_head_dim in its config.json must be one the backend "
            "supports, and vLLM's CPU backends only know 576 (512 + 64, DeepSeek's own sizes). Such a model "
            "loads and answers /health, then fails at its first request. Serve it on NPUs with vllm-ascend, "
            "or use a model whose MLA sizes match."
        ),
        npu_hint=_(
            "The model uses MLA (DeepSeek-style latent attention) with a head size, kv_lora_rank + "
            "qk_rope_head_dim in its config.json, that this engine's MLA attention kernels do not have. Such "
            "a model loads and answers /health, then fails at its first request. Check that the vllm-ascend "
            "and CANN versions on this node support this model, or use a model whose MLA sizes match "
            "DeepSeek's own (512 + 64)."
        ),
        patterns=(r"Head dimension \d+ is not supported by MLA",),
    ),
    # ATC (the ONNX → .om converter) prints `E10001: Value [x] for parameter [--name] is invalid. Reason: ...`
    # for a bad option value and E10016 for an --input_shape name the model does not have.
    Signature(
        code="atc_input_shape",
        title=_("--input_shape does not fit the model's inputs"),
        hint=_(
            "Every name in --input_shape must be one of the ONNX model's graph inputs, with as many "
            "dimensions as that input has; an input with a dynamic dimension needs its size there. Names "
            "are case-sensitive and several inputs are separated by ';'. Netron or "
            "python -c \"import onnx; print(onnx.load('model.onnx').graph.input)\" lists the inputs."
        ),
        patterns=(
            token("E10016"),
            r"parameter \[--input_shape\] is invalid",
            r"maybe you should set input_shape",
        ),
    ),
    Signature(
        code="atc_soc_version",
        title=_("ATC cannot build for this SoC version"),
        hint=_(
            "soc_version must name the chip that will run the model, as npu-smi info shows it with Ascend in "
            "front (910B3 → Ascend910B3, 310P3 → Ascend310P3), and the node's CANN toolkit needs the "
            "operator (kernels) package of that chip. Leave the SoC version empty to use this node's NPUs, "
            "or convert on a node with the target chip."
        ),
        patterns=(r"parameter \[--soc_version\] is invalid",),
    ),
    Signature(
        code="atc_model_unreadable",
        title=_("ATC could not read the ONNX model"),
        hint=_(
            "The file given to --model is missing, unreadable or not a valid ONNX model. Check that it is a "
            "complete .onnx file (not a partial download or a Git LFS pointer) with any external weight "
            "files beside it; onnx.checker.check_model tells whether the export is valid."
        ),
        patterns=(r"parameter \[--model\] is invalid",),
    ),
    *FIELD_SIGNATURES,
)
