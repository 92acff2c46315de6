"""int8 inference on the CPU: prediction only, for the CPU-only or tight reruns.

Dynamic quantisation (weights stored int8, activations quantised batch by batch, no calibration
data) of the layers where a CPU spends its time in these models: ``nn.Linear`` (and, asked for,
``nn.LSTM`` / ``nn.GRU``). A peft model's LoRA adapters are merged into their base weights first
(exact: W + BA in fp32), since an int8 base cannot take an adapter beside it. PyG's layers keep
their weights in ``torch_geometric.nn.dense.Linear``, which is not an ``nn.Linear``: those are
rebuilt as ``nn.Linear`` with the same weights first, so a GNN's convolutions quantise too.
Convolutions (the 3-D U-Net) have no dynamic int8 kernel: such a model is refused with that
reason, never silently left in fp32.

torch marks ``torch.ao.quantization`` (and its quantized tensors) deprecated in favour of torchao,
which Kaggle's image does not ship; ``quantize_dynamic`` is still torch's own tested path in 2.13,
so it is used here with those two warnings silenced, and the copy is measured against fp32
(benchmarks/int8_inference.py: speed and metric side by side). When torch drops it, this module is
the one place to move to torchao's ``quantize_``.
"""
from __future__ import annotations

import copy
import sys
import warnings

import torch
from torch import nn

LINEAR, RECURRENT = (nn.Linear,), (nn.LSTM, nn.GRU)


class Int8Error(ValueError):
    """The model cannot be predicted in int8 here (the reason and the fix in the message)."""


def quantize(model: nn.Module, device: torch.device | str = "cpu", recurrent: bool = False) -> nn.Module:
    """An int8 copy of ``model`` for prediction on the CPU; the model itself is not changed.

    ``recurrent``: LSTM and GRU layers too. Off by default: torch's dynamic int8 LSTM measured
    2.7x slower than fp32 at the sequence notebook's width (benchmarks/int8_inference.py)."""
    layers = LINEAR + (RECURRENT if recurrent else ())
    if torch.device(device).type != "cpu":
        raise Int8Error(f"precision='int8' predicts on the CPU only (dynamic int8 has no {device} kernels); "
                        "on a GPU predict in fp16 or bf16")
    copied = copy.deepcopy(model).cpu().eval()
    if hasattr(copied, "merge_and_unload"):  # peft: the adapters folded into their base weights first
        copied = copied.merge_and_unload()  # type: ignore[operator]  # a peft model's
    copied = _with_plain_linears(copied)
    found = [m for m in copied.modules() if isinstance(m, layers) and not _excluded(m)]
    if not found:
        kinds = sorted({type(m).__name__ for m in copied.modules() if not list(m.children())})
        names = ", ".join(t.__name__ for t in layers)
        raise Int8Error(f"{type(model).__name__} has no layer dynamic int8 quantises here ({names}); its "
                        f"layers are {', '.join(kinds) or 'none'}: predict it in fp32")
    wrapper = nn.Sequential(copied)  # quantize_dynamic swaps children, never the root module itself
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.ao.quantization is deprecated", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions", category=UserWarning)
        from torch.ao.quantization import quantize_dynamic
        quantised = quantize_dynamic(wrapper, set(layers), dtype=torch.qint8)[0]
    for layer in quantised.modules():
        if isinstance(layer, (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)):
            layer.register_forward_pre_hook(_keep_off_the_fast_path)
    return quantised


def _keep_off_the_fast_path(module, args):
    """A hook, doing nothing, that keeps a Transformer layer off torch's fused inference path:
    that path reads ``linear1.weight`` as a tensor, which an int8 layer's is not (a method)."""


def _excluded(module: nn.Module) -> bool:
    """Attention's output projection is a Linear that torch keeps float by design."""
    return type(module).__name__ == "NonDynamicallyQuantizableLinear"


def _with_plain_linears(model: nn.Module) -> nn.Module:
    """PyG's ``Linear`` layers rebuilt as ``nn.Linear`` (same weight and bias)."""
    if "torch_geometric" not in sys.modules:  # a model holding PyG layers has imported it already
        return model
    from torch_geometric.nn.dense.linear import Linear as PygLinear
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, PygLinear):
                if child.in_channels <= 0:
                    raise Int8Error(f"{name}: a lazy PyG Linear that never saw data; run one forward first")
                plain = nn.Linear(child.in_channels, child.out_channels, bias=child.bias is not None)
                plain.load_state_dict({k: v for k, v in child.state_dict().items() if k in ("weight", "bias")})
                setattr(parent, name, plain)
    return model


def quantised_share(model: nn.Module) -> float:
    """The share of the int8 copy's layers with parameters that hold int8 weights."""
    layers = [m for m in model.modules() if not list(m.children())]
    dynamic = [m for m in layers if "quantized" in type(m).__module__]
    weighted = [m for m in layers if list(m.parameters(recurse=False)) or m in dynamic]
    return len(dynamic) / max(1, len(weighted))
