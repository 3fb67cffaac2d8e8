"""GPU specs the LLM generator prices compute and memory with.

``peak_tflops_bf16`` is the dense BF16 tensor-core peak (no 2:4 sparsity); a layer's
compute time is its FLOPs / (peak × efficiency). ``efficiency`` is the fraction of that
peak the layer kernels (GEMMs, attention, element-wise) reach on average; communication
and pipeline bubbles are simulated, so it is a kernel efficiency, somewhat above the
end-to-end model FLOPs utilisation that training runs report (Narayanan et al. 2021,
"Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM":
52 % of peak on A100 end to end; Llama 3 (Dubey et al. 2024, Table 4): 38–43 % BF16 MFU
on H100). Override it per design point with ``workload.efficiency``.

``memory_gb`` is in decimal gigabytes (10^9 bytes): an "80 GB" card has 80 GiB of HBM,
so this leaves ~5 % for the CUDA context, NCCL buffers and allocator fragmentation.
``hbm_tbps`` (TB/s) prices the memory-bound optimizer step.
"""

from __future__ import annotations

import dataclasses

from multiverse_jax.errors import InputError


@dataclasses.dataclass(frozen=True)
class GpuSpec:
    name: str
    peak_tflops_bf16: float  # dense BF16 tensor-core peak, TFLOP/s
    memory_gb: float  # HBM capacity, 10^9 bytes
    hbm_tbps: float  # HBM bandwidth, 10^12 bytes/s
    efficiency: float = 0.5  # default fraction of the peak the layer kernels reach

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gb * 1e9)


GPUS: dict[str, GpuSpec] = {
    # NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM): BF16 tensor core 312 TFLOPS
    # (624 with sparsity), 80 GB HBM2e, 2,039 GB/s.
    "A100-80GB": GpuSpec("A100-80GB", peak_tflops_bf16=312.0, memory_gb=80.0, hbm_tbps=2.039, efficiency=0.6),
    # NVIDIA H100 Tensor Core GPU datasheet (H100 SXM): BF16 tensor core 1,979 TFLOPS with
    # sparsity, i.e. 989 dense; 80 GB HBM3, 3.35 TB/s.
    "H100-SXM": GpuSpec("H100-SXM", peak_tflops_bf16=989.0, memory_gb=80.0, hbm_tbps=3.35, efficiency=0.5),
}


def get_gpu(name: str, *, key: str = "workload.gpu") -> GpuSpec:
    """The spec of GPU ``name`` (case-insensitive)."""
    by_lower = {k.lower(): v for k, v in GPUS.items()}
    spec = by_lower.get(str(name).lower())
    if spec is None:
        raise InputError(f"{key}: unknown GPU {name!r} (valid: {', '.join(GPUS)})")
    return spec
