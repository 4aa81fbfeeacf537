"""What an Ascend fault code (`Error Code` of `npu-smi info -t health`) means and how bad it is.

The codes are the driver's health-management event ids (8 hex digits, e.g. 80E18402). The meaning of each is
Huawei's "Health Management Fault Definitions" of the hardware generation; the handling level is the one
Huawei's own cluster scheduler gives the code by default (MindCluster Ascend Device Plugin's faultCode.json):

    NotHandleFault   no effect on the service                      -> nothing to do
    RestartRequest   the running request must be run again         -> watch the NPU
    RestartBusiness  the service must be started again             -> watch the NPU
    FreeRestartNPU   reset the chip once it is idle                -> out of service
    RestartNPU       reset the chip now                            -> out of service
    PreSeparateNPU   no effect yet; schedule nothing new there     -> watch the NPU (no new work is the
                                                                      policy's call: docs/npu-health.md)
    SeparateNPU      cannot recover, isolate the chip              -> out of service
    SubHealthFault   degraded                                      -> watch the NPU

Sources (the table below cites one per code):
- Levels and what each means: https://www.hiascend.com/document/detail/en/mindcluster/730/clustersched/schedulingug/dl_resume_084.html
  and https://www.hiascend.com/document/detail/zh/mindx-dl/500/clusterscheduling/rtug/dl_resume_027.html
  (the latter also says what to do with a code not in the table: a "hint"/"minor" one is L1, any other L6);
- the per-code level: github.com/Ascend/mind-cluster component/ascend-device-plugin/build/faultCode.json;
- the per-code meaning: the Health Management Fault Definitions, as quoted by Huawei's fault-diagnosis
  knowledge base (github.com/Ascend/mind-cluster component/ascend-faultdiag/.../kg-config.json) and the CANN
  troubleshooting guide, e.g. https://www.hiascend.com/document/detail/en/canncommercial/800/maintenref/troubleshooting/troubleshooting_0008.html

Only the codes seen most in the field are listed; a code not listed is judged by the health word npu-smi
prints beside it (Warning: minor; Alarm / Critical: major), as the MindCluster rule above does.
"""

from dataclasses import dataclass

from workers.i18n import gettext_noop as _

NOT_HANDLE = "NotHandleFault"
RESTART_REQUEST = "RestartRequest"
RESTART_BUSINESS = "RestartBusiness"
FREE_RESTART_NPU = "FreeRestartNPU"
RESTART_NPU = "RestartNPU"
PRE_SEPARATE_NPU = "PreSeparateNPU"
SEPARATE_NPU = "SeparateNPU"
SUB_HEALTH = "SubHealthFault"
LEVELS = (
    NOT_HANDLE,
    RESTART_REQUEST,
    RESTART_BUSINESS,
    FREE_RESTART_NPU,
    RESTART_NPU,
    PRE_SEPARATE_NPU,
    SEPARATE_NPU,
    SUB_HEALTH,
)

FAULT_CODE_LEVELS_URL = (
    "https://github.com/Ascend/mind-cluster/blob/master/component/ascend-device-plugin/build/faultCode.json"
)
FAULT_DEFINITIONS_URL = (
    "https://github.com/Ascend/mind-cluster/blob/master/component/ascend-faultdiag/src/ascend_fd/"
    "configuration/kg-config.json"
)
HBM_ECC_GUIDE_URL = (
    "https://www.hiascend.com/document/detail/en/canncommercial/800/maintenref/troubleshooting/"
    "troubleshooting_0008.html"
)


@dataclass(frozen=True)
class FaultCode:
    code: str  # 8 hex digits, upper case, as npu-smi prints it
    level: str  # one of LEVELS
    meaning: str  # an msgid: the panel translates it
    source: str = FAULT_DEFINITIONS_URL


FAULT_CODES = {
    fault.code: fault
    for fault in (
        FaultCode("80E18402", SEPARATE_NPU, _("HBM multi-bit ECC: 64 rows isolated, the most a device can")),
        FaultCode("80E18401", NOT_HANDLE, _("HBM multi-bit ECC: 16 or more rows isolated on this device")),
        FaultCode("80E18400", NOT_HANDLE, _("HBM multi-bit ECC error in a process's memory (row isolated)")),
        FaultCode("80E01801", RESTART_BUSINESS, _("HBM multi-bit ECC error; isolating its address failed")),
        FaultCode(
            "80E01809", NOT_HANDLE, _("HBM multi-bit ECC error found by patrol scrubbing"), HBM_ECC_GUIDE_URL
        ),
        FaultCode("80E18005", RESTART_NPU, _("HBM controller parity error")),
        FaultCode("80E18008", RESTART_NPU, _("Multi-bit ECC error in the HBM controller's SRAM")),
        FaultCode(
            "80E18404", RESTART_NPU, _("HBM uncorrectable errors storm: the errors are masked for 3 minutes")
        ),
        FaultCode("80DE1801", RESTART_NPU, _("DDR multi-bit ECC error")),
        FaultCode("80C98000", RESTART_REQUEST, _("AI Core instruction data failed its check")),
        FaultCode("80C98008", RESTART_REQUEST, _("AI Core multi-bit ECC error")),
        FaultCode("80CB8000", RESTART_REQUEST, _("AI Vector instruction data failed its check")),
        FaultCode("80CB8009", RESTART_REQUEST, _("AI Vector bus access error")),
        FaultCode("8C204E00", RESTART_BUSINESS, _("tsdaemon heartbeat lost")),
        FaultCode("80FA4E00", RESTART_NPU, _("Task scheduler heartbeat lost")),
        FaultCode("40F84E00", RESTART_NPU, _("Inter-board heartbeat lost (the chip hit a fatal error)")),
        FaultCode("80E24E00", RESTART_NPU, _("Power management (LPM) heartbeat lost")),
        FaultCode("81078603", NOT_HANDLE, _("NPU network port link went from up to down")),
        FaultCode("819B8003", NOT_HANDLE, _("HCCS configuration error")),
    )
}


def describe(code: str) -> FaultCode | None:
    """The table's entry for a code as npu-smi prints it (any case, with or without 0x); None if unlisted."""
    return FAULT_CODES.get(normalise(code))


def normalise(code: str) -> str:
    text = code.strip().upper()
    return text[2:] if text.startswith("0X") else text
