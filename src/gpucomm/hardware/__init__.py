"""The hardware catalog (gpucomm/data/hardware.yaml): link technologies, GPUs, NVSwitches.

    >>> from gpucomm.hardware import get_link_tech, get_gpu
    >>> get_link_tech("ib-ndr").bandwidth_Bps, get_gpu("h100").nvlink
    (50000000000.0, 'nvlink4')
"""
from .catalog import (GPU, GPU_FABRIC_KINDS, LINK_KINDS, NIC_KINDS, LinkTech, NVSwitch, catalog,
                      get_gpu, get_link_tech, get_nic, get_nvswitch, gpus, link_techs, nic_names,
                      nvswitches)

__all__ = ["GPU", "GPU_FABRIC_KINDS", "LINK_KINDS", "NIC_KINDS", "LinkTech", "NVSwitch", "catalog",
           "get_gpu", "get_link_tech", "get_nic", "get_nvswitch", "gpus", "link_techs", "nic_names",
           "nvswitches"]
