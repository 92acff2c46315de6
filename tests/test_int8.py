"""int8 inference on the CPU: the copy predicts as fp32 does, the model stays as it was, and
a model with nothing to quantise (or a GPU) is refused with the reason."""
import pytest
import torch
from torch import nn

from kagglekit.machine import int8


def agree(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.argmax(-1) == b.argmax(-1)).float().mean())


def test_an_mlp_predicts_in_int8_as_in_fp32_and_stays_fp32_itself():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 5)).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    quantised = int8.quantize(model)
    x = torch.randn(512, 32)
    with torch.inference_mode():
        assert agree(quantised(x), model(x)) > 0.97
    assert int8.quantised_share(quantised) == 1.0
    assert all(type(m) is nn.Linear for m in model if not isinstance(m, nn.ReLU))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_pyg_convolutions_quantise_through_their_linears():
    with pytest.raises(int8.Int8Error, match="LSTM"):
        int8.quantize(nn.LSTM(4, 4))  # recurrent layers only when asked for (slower at small widths)
    from torch_geometric.nn import GCNConv, SAGEConv

    class GNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = GCNConv(16, 32), SAGEConv(32, 4)

        def forward(self, x, edge_index):
            return self.conv2(self.conv1(x, edge_index).relu(), edge_index)
    torch.manual_seed(1)
    model, x, edges = GNN().eval(), torch.randn(60, 16), torch.randint(0, 60, (2, 300))
    quantised = int8.quantize(model)
    assert int8.quantised_share(quantised) == 1.0  # every weight int8, none left in a PyG Linear
    with torch.inference_mode():
        assert agree(quantised(x, edges), model(x, edges)) > 0.95


def test_recurrent_and_transformer_layers_run_in_int8_under_inference_mode():
    torch.manual_seed(2)
    lstm = nn.LSTM(8, 16, batch_first=True).eval()
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32, batch_first=True), 2,
                                    enable_nested_tensor=False).eval()
    x = torch.randn(4, 10, 8)
    with torch.inference_mode():  # the fused Transformer path would read an int8 weight as a tensor
        assert torch.allclose(int8.quantize(lstm, recurrent=True)(x)[0], lstm(x)[0], atol=0.05)
        h = torch.randn(4, 10, 16)
        assert torch.allclose(int8.quantize(encoder)(h), encoder(h), atol=0.1)


def test_what_cannot_be_int8_is_refused_with_the_reason():
    with pytest.raises(int8.Int8Error, match="\\(Linear\\); its layers are Conv3d, GroupNorm: predict it in fp32"):
        int8.quantize(nn.Sequential(nn.Conv3d(1, 4, 3), nn.GroupNorm(2, 4)))
    with pytest.raises(int8.Int8Error, match="CPU only.*fp16 or bf16"):
        int8.quantize(nn.Linear(2, 2), "cuda")
    with pytest.raises(int8.Int8Error, match="LSTM"):
        int8.quantize(nn.LSTM(4, 4))  # recurrent layers only when asked for (slower at small widths)
    from torch_geometric.nn import GCNConv
    with pytest.raises(int8.Int8Error, match="lazy PyG Linear"):
        int8.quantize(GCNConv(-1, 4))


def test_lora_adapters_are_merged_before_the_text_models_int8_prediction(tmp_path):
    import numpy as np

    import kagglekit as kk
    path = kk.textsets.write_standin_model(tmp_path / "models", "bert", 0)
    torch.manual_seed(3)
    model, _ = kk.text.load_classifier(path, 3, lora_r=4, lora_alpha=8, load_in_4bit=False,
                                       gradient_checkpointing=False, placement="ddp", device=torch.device("cpu"))
    with torch.no_grad():  # adapters that moved away from zero, as after training
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    tokenizer = kk.text.load_tokenizer(path)
    texts = kk.text.TokenizedTexts(tokenizer, [f"event {i} before event {i % 7}" for i in range(40)], 16)
    args = (texts, kk.text.collator(tokenizer), 8, torch.device("cpu"))
    fp32, quantised = kk.text.predict_proba(model, *args), kk.text.predict_proba(model, *args, int8=True)
    assert np.abs(fp32 - quantised).max() < 0.05 and (fp32.argmax(1) == quantised.argmax(1)).mean() > 0.9
    assert any("lora" in n for n, _ in model.named_parameters())  # the model itself keeps its adapters
