"""vLLM's pre-flight on a T4 (compute capability 7.5): the settings known to fail there refused by
name, before a scoring rerun is spent starting an engine that cannot run.

What each refusal rests on (vLLM's trackers, 2025-2026):
- ``dtype="bfloat16"`` (or "auto" on a bf16 checkpoint): Turing has no bf16 arithmetic; fp16.
- ``attention_backend="FLASH_ATTN"``: FlashAttention-2 needs compute capability 8.0.
- kernel tile configurations over the T4's 64 KiB of shared memory per block (Turing's limit;
  #36802, #57712: Triton kernels tuned on Ampere failing to launch on sm75).
- tensor parallelism over both T4s with the custom all-reduce: Kaggle's two T4s have no
  peer-to-peer link, so ``disable_custom_all_reduce=True``.
- offline data parallelism (``data_parallel_size`` > 1) for a dense model: refused by vLLM at
  start-up since Dec 2025 (PR #30739); one engine process per T4 instead.
A warning, not a refusal: ``gpu_memory_utilization`` above 0.95 on 15 GiB cards.
"""
from __future__ import annotations

from ..machine.cards import T4

T4_CAPABILITY = T4.capability
T4_SHARED_MEMORY_KIB = 64
FLASH_ATTENTION = ("FLASH_ATTN", "FLASH_ATTN_VLLM_V1")  # FlashAttention-2's backend names


class PreflightError(ValueError):
    """vLLM settings that cannot run on the card, each by name and with its fix."""


def problems(settings: dict, capability: tuple[int, int] = T4_CAPABILITY, *, checkpoint_dtype: str = "",
             peer_to_peer: bool = False, moe: bool = False) -> list[str]:
    """Each setting of ``settings`` (vLLM's ``LLM(**settings)``, plus ``shared_memory_kib``: the
    largest tile a chosen kernel asks for) that fails on a card of ``capability``, with its fix."""
    found = []
    dtype = str(settings.get("dtype", "auto")).replace("torch.", "")
    if capability < (8, 0) and (dtype in ("bfloat16", "bf16") or (dtype == "auto" and checkpoint_dtype == "bfloat16")):
        found.append(f"dtype={dtype!r}: compute capability {capability[0]}.{capability[1]} has no bf16 (the "
                     "checkpoint's dtype under 'auto'): dtype='half'")
    if capability < (8, 0) and str(settings.get("attention_backend", "")).upper() in FLASH_ATTENTION:
        found.append("attention_backend='FLASH_ATTN': FlashAttention-2 needs compute capability 8.0: "
                     "attention_backend='TRITON_ATTN' (or 'FLEX_ATTENTION')")
    if capability < (8, 0) and float(settings.get("shared_memory_kib", 0)) > T4_SHARED_MEMORY_KIB:
        found.append(f"shared_memory_kib={settings['shared_memory_kib']}: a kernel tile over the T4's "
                     f"{T4_SHARED_MEMORY_KIB} KiB of shared memory per block fails to launch: a smaller tile config")
    if int(settings.get("tensor_parallel_size", 1)) > 1 and not peer_to_peer \
            and not settings.get("disable_custom_all_reduce", False):
        found.append("tensor_parallel_size > 1 with the custom all-reduce: the cards have no peer-to-peer "
                     "link: disable_custom_all_reduce=True")
    if int(settings.get("data_parallel_size", 1)) > 1 and not moe:
        found.append("data_parallel_size > 1: vLLM refuses offline data parallelism for a dense model at "
                     "start-up (PR #30739): one engine process per GPU (CUDA_VISIBLE_DEVICES=0 and =1)")
    return found


def check(settings: dict, capability: tuple[int, int] = T4_CAPABILITY, **facts) -> dict:
    """``settings`` when nothing in them is known to fail on the card; else ``PreflightError``
    naming every problem at once (no engine started, no GPU touched)."""
    found = problems(settings, capability, **facts)
    if found:
        raise PreflightError("vLLM settings that fail on this card:\n- " + "\n- ".join(found))
    return settings
