"""Failures the field hits on real Ascend sites, each a specific case of a general signature.

Their codes are part of the `python -m workers.ascend.diagnose` contract. Patterns follow what vllm-ascend,
torch_npu, CANN and HCCL print, as seen in public issue reports; each hint names the fix.
"""

from workers.ascend.signature_types import Signature, token
from workers.i18n import gettext_noop as _

# A start capturing ACL graphs, a failure after it, and the line that says the capture went through.
CAPTURE_STARTED = r"(?i)\bcaptur(?:e|ing) (?:ACL|CUDA) ?graphs?\b"
FAILED_LATER = r"\b(?:ERROR|Traceback|Exception|RuntimeError|AttributeError|failed to start|died)\b"
CAPTURE_DONE = r"(?i)\bGraph capturing finished\b"
# What an MoE operator's tiling prints when the HCCL window is too small: the size it needs (the formula's
# result, already rounded up to whole MB) and the size it had, "... = 294MB, HCCL_BUFFSIZE=200MB.".
BUFFSIZE_FIGURES = (
    r"=\s*(?P<needed_mb>\d+(?:\.\d+)?)\s*MB\s*,"
    r"\s*HCCL_BUFFSIZE(?:_EP)?\s*=\s*(?P<had_mb>\d+(?:\.\d+)?)\s*MB\b"
)
# torch_npu's report of a failed communicator set-up, up to its HCCL error code.
HCCL_INIT_CALL = r"(?i)\bhcclCommInitRootInfo(?:Config)?\(.*\berror code is "

KERNELS_TITLE = _("vllm-ascend's custom kernels are missing")
KERNELS_HINT = _(
    "vllm-ascend's own operators (vllm_ascend_C and libvllm_ascend_kernels.so) were not built or are not "
    "found, and capturing ACL graphs needs them. Install the vllm-ascend wheel or image built for this chip "
    "and CANN, or build it from source with the CANN toolkit sourced and SOC_VERSION set so the kernels "
    "compile. Until then --enforce-eager starts without graphs."
)

FIELD_SIGNATURES: tuple[Signature, ...] = (
    Signature(
        code="stack_mismatch",
        general="cann_mismatch",
        title=_("torch, torch-npu and the Ascend libraries do not match"),
        hint=_(
            "A library was built against another version than the one installed: torch-npu for another "
            "torch, or NNAL (ATB) and CANN for another torch-npu. Install torch, torch-npu, vLLM and "
            "vllm-ascend from one row of vllm-ascend's compatibility table (install vLLM first, then "
            "vllm-ascend, which pins torch-npu), install the CANN and NNAL release that torch-npu names, and "
            "source NNAL's set_env.sh so its ABI matches torch."
        ),
        patterns=(
            r"(?i)lib(?:torch\w*|atb\w*|tbe_adapter|opapi|ascend\w*|hccl\w*)\.so\S*: undefined symbol",
            r"undefined symbol: _ZN3atb",
        ),
    ),
    Signature(
        code="soc_init_failed",
        general="cann_mismatch",
        title=_("CANN could not initialise for this chip"),
        hint=_(
            "CANN's compiler could not read the platform information of this chip (SocVersion), so torch-npu "
            "failed at its first NPU call (error 500001). The operator (kernels) package for this chip is "
            "missing or from another CANN version, or the driver is older than this CANN supports. Install "
            "the kernels package of the same version as the toolkit for this chip, check that the driver "
            "version is one this CANN release supports, and source the toolkit's set_env.sh before starting."
        ),
        patterns=(
            r"AclSetCompileopt\(.*\b500001\b",
            r"(?i)\binit runtime platform info failed\b",
            token("500001"),
        ),
    ),
    Signature(
        code="visible_device_invalid",
        general="device_unavailable",
        title=_("ASCEND_RT_VISIBLE_DEVICES names a device this process cannot use"),
        hint=_(
            "The runtime refused the device list (error 507033). ASCEND_RT_VISIBLE_DEVICES takes logic ids "
            "(npu-smi info -m) in ascending order; inside a container they count only the devices mounted "
            "into it, from 0. With Ray, let vllm-ascend set the devices of each worker "
            "(RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1). Check that each listed NPU exists and "
            "is not held by another process or container."
        ),
        patterns=(
            r"(?i)\bSet visible device failed, invalid device\b",
            r"\bset ASCEND_RT_VISIBLE_DEVICES:\S* error\b",
            token("507033"),
        ),
    ),
    Signature(
        code="graph_stream_exhausted",
        general="graph_capture",
        title=_("Graph capture ran out of NPU streams"),
        hint=_(
            "Each captured ACL graph takes NPU streams and a device has a fixed number (error 207008), fewer "
            "in a soft-partitioned vNPU. Capture fewer batch sizes (--compilation-config "
            "'{\"cudagraph_capture_sizes\": [1, 8, 32]}'), lower --max-num-seqs, use "
            '\'{"cudagraph_mode": "FULL_DECODE_ONLY"}\' for MLA models, or start with --enforce-eager. '
            "Other processes on the NPU also hold streams: stop them."
        ),
        patterns=(
            token("207008"),
            token("EL0009"),
            r"(?i)\bStream resources are insufficient\b",
            r"(?i)\bno stream resource\b",
            # The capture asked for one more stream than the device had (the runtime then reports 207005).
            r"(?i)\b(?:New|Create) capture stream failed\b",
            r"(?i)\bAlloc sq cq fail\b",  # a stream's submission and completion queues
        ),
        explains=("graph_capture",),
    ),
    Signature(
        code="mla_tp_unsupported",
        general="graph_capture",
        title=_("MLA in graph mode needs 32, 64 or 128 heads per NPU"),
        hint=_(
            "In graph mode vllm-ascend's fused MLA kernel needs 32, 64 or 128 attention heads on each NPU "
            "(num_attention_heads / tensor_parallel_size). DeepSeek V3 and R1 (128 heads) run with tensor "
            "parallel 1, 2 or 4, and larger deployments add data and expert parallel instead; DeepSeek-V2-"
            "Lite (16 heads) runs in eager mode only. Pick such a tensor parallel size or start with "
            "--enforce-eager."
        ),
        patterns=(
            r"\bonly support \{32, 64, 128\}",
            r"(?i)\bMLA and Graph mode\b",
        ),
    ),
    Signature(
        code="hccl_socket_timeout",
        general="hccl",
        title=_("HCCL ranks could not connect in time"),
        hint=_(
            "The ranks did not all connect within HCCL_CONNECT_TIMEOUT (120 s by default). A rank that "
            "failed or started late leaves the others waiting: find its first error. Then check that the "
            "NPUs of different nodes reach each other (hccn_tool -i N -ping -g address <peer NPU IP>) with "
            "the same TLS switch on every NPU (hccn_tool -i N -tls -g), that HCCL_IF_IP and "
            "HCCL_SOCKET_IFNAME name an interface the other nodes reach, that port 16666 and above are free, "
            "and raise HCCL_CONNECT_TIMEOUT (e.g. 1200) when nodes start far apart."
        ),
        # Only lines that say a timeout: a set-up that failed with another code is hccl_init_failed.
        patterns=(
            token("EI0006"),
            r"(?i)\bGetting socket times out\b",
            r"(?i)\bwait socket establish timeout\b",
            HCCL_INIT_CALL + r"(?<!\d)9(?!\d)",  # 9 is HCCL_E_TIMEOUT
        ),
        explains=("hccl_init_failed",),
    ),
    Signature(
        code="hccl_init_failed",
        general="hccl",
        title=_("HCCL could not set up the communicator between the ranks"),
        hint=_(
            "HcclCommInitRootInfo, which joins the ranks into one communicator, returned an error; its code "
            "says what kind: 1 a parameter HCCL refused (rank count, device ids or ranktable), 7 a resource "
            "that was not available, 11 or 12 a TCP or RoCE connection that failed, 15 a runtime call that "
            "failed, 9 a timeout. Read the lines after it (EE, EI or EL codes) and HCCL's own log under "
            "~/ascend/log for the reason. Check that ASCEND_RT_VISIBLE_DEVICES gives each rank its own NPU, "
            "that every NPU of the deployment is healthy (npu-smi info), that HCCL_IF_IP or "
            "HCCL_SOCKET_IFNAME name an interface every rank reaches, and that this chip supports the "
            "parallel layout (310P cards support fewer HCCL operations)."
        ),
        patterns=(
            HCCL_INIT_CALL + r"\d+",
            r"(?i)\bHcclCommInitRootInfo(?:Config)? fail",
        ),
    ),
    Signature(
        code="hccl_buffsize_small",
        general="hccl",
        title=_("HCCL_BUFFSIZE is too small for this model's expert parallel traffic"),
        hint=_(
            "An MoE dispatch or combine kernel needs a larger HCCL buffer than HCCL_BUFFSIZE gives; the "
            "quoted line names the size it needs (NEEDED_HCCL_BUFFSIZE, in MB). Set HCCL_BUFFSIZE to at "
            "least that on every node and leave HBM for it (each communicator takes it): lower "
            "--gpu-memory-utilization if needed. Fewer sequences per batch (--max-num-seqs) need less."
        ),
        # CANN's MoE operators name the expert parallel group's buffer HCCL_BUFFSIZE_EP since 8.3; it is still
        # sized by HCCL_BUFFSIZE (or vllm-ascend's per-group setting), so both spellings are this failure.
        patterns=(
            r"(?i)\bHCCL[_ ]BUFFSIZE(?:_EP)? is too small\b",
            r"(?i)\bhccl buffer (?:size )?is too small\b",
            BUFFSIZE_FIGURES,
        ),
        figures=(BUFFSIZE_FIGURES,),
        figured_hint=_(
            "An MoE dispatch or combine kernel needs more HCCL buffer than HCCL_BUFFSIZE gives "
            "({had_mb} MB). Set HCCL_BUFFSIZE={needed_mb} (in MB, or more) in the deployment's environment "
            "on every node and leave HBM for it (each communicator takes it): lower "
            "--gpu-memory-utilization if needed. Fewer sequences per batch (--max-num-seqs) need less."
        ),
        # The dispatch or combine operator whose tiling refused the buffer fails with it.
        explains=("op_unsupported",),
    ),
    Signature(
        code="peer_rank_died",
        general="hccl",
        title=_("A collective timed out: another rank failed first"),
        hint=_(
            "A rank waited for a peer that stopped or hung (notify wait timeout EI0002, AI Core timeout "
            "507014, HCCL task timeout). The finding names the first rank that failed: read that rank's own "
            "log and plog (~/ascend/log) for its error, fix it, and restart every rank together. If no rank "
            "failed, the first step may just be slow: raise HCCL_EXEC_TIMEOUT, and check the NPU links "
            "(hccn_tool -i N -link -g)."
        ),
        patterns=(
            token("EI0002"),
            token("507014"),
            r"(?i)\bnotify wait timeout\b",
            r"(?i)\bThe wait execution of the Notify register times out\b",
            r"(?i)\bHCCL\b.*\b(?:task|execute|exec) timeout\b",
        ),
        names_first_rank=True,
    ),
    Signature(
        code="quantizer_missing",
        title=_("This vllm-ascend cannot load the model's Ascend quantization"),
        hint=_(
            "The model was quantized for Ascend (msModelSlim's quant_model_description.json) but this "
            "vllm-ascend has no quantizer for it; the 0.7 releases needed MindIE-Turbo for W8A8. Upgrade "
            "vllm-ascend to a release whose quantization guide lists the model's type (W8A8, W8A8_DYNAMIC, "
            "W4A8 ...), quantize with the msModelSlim version that guide names, and start with "
            "--quantization ascend."
        ),
        patterns=(r"(?i)\bThere is no available ascend quantizer\b",),
    ),
    Signature(
        code="vllm_version_invalid",
        title=_("vllm-ascend cannot read the installed vLLM's version"),
        hint=_(
            "vllm-ascend compares vLLM's version to pick its code paths, and this vLLM's version is not a "
            "valid version number (a source build without its git tags, or a renamed build). Install vLLM "
            "from a release (pip install vllm==<the version vllm-ascend's table names>, or build the tagged "
            "source with VLLM_TARGET_DEVICE=empty), or set VLLM_VERSION=<x.y.z> to the version it is."
        ),
        patterns=(r"\bInvalidVersion: Invalid version\b", r"(?i)\bInvalid vllm version\b"),
    ),
    # Harmless on its own (sleep mode is disabled, eager starts work); fatal once graphs are captured.
    Signature(
        code="custom_kernels_missing",
        general="graph_capture",
        title=KERNELS_TITLE,
        hint=KERNELS_HINT,
        patterns=(
            r"Failed to import vllm_ascend_C\b.*libvllm_ascend_kernels\.so",
            r"Failed to import vllm_ascend_C\b.*No module named",
        ),
        then=(CAPTURE_STARTED, FAILED_LATER),
        unless=CAPTURE_DONE,
    ),
    Signature(
        code="custom_kernels_missing",
        general="graph_capture",
        title=KERNELS_TITLE,
        hint=KERNELS_HINT,
        patterns=(r"'_C_ascend' object has no attribute",),
    ),
)
