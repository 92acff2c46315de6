"""The frozen probe of a text model: its own features, mean-pooled, under a linear head.

What a pretrained encoder knows before any fine-tuning: the attached model's last hidden states,
averaged over each text's real tokens (padding masked out), read once in the run's precision.
A logistic regression on them, on the same folds as the fine-tuning, is the floor fine-tuning
must clear (a sentence encoder such as all-MiniLM-L6-v2 was trained for exactly these mean-pooled
vectors: ``text.pooledhead`` fine-tunes it through them, its head started as this probe). Texts are sorted by length,
so each batch pads little; on a GPU the model loads in fp16 (nothing trains: a 7B decoder takes
14 GB, not the 28 of fp32, and fits a T4).
"""
from __future__ import annotations

import numpy as np
import torch

from ..parallel.loaders import to_device
from ..readers.pretrained import quiet_transformers
from .pooledhead import pool, sentence_pooling


@torch.no_grad()
def pooled_features(model_path, texts, collate, batch_size: int, device, autocast=None) -> np.ndarray:
    """(texts, hidden) float32: ``texts`` (a ``TokenizedTexts``) through the model in ``model_path``
    without any head, each text's last hidden states averaged over its real tokens (pooled as a
    sentence encoder's folder declares, where it does)."""
    from transformers import AutoModel
    quiet_transformers()
    half = torch.device(device).type == "cuda"
    model = AutoModel.from_pretrained(model_path, dtype=torch.float16 if half else torch.float32).to(device).eval()
    mode = sentence_pooling(model_path) or "mean"  # a sentence encoder's own pooling: what fine-tuning reads too
    order = np.argsort(texts.lengths, kind="stable")[::-1]
    out = np.zeros((len(texts), model.config.hidden_size), np.float32)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        batch = to_device(collate([{"input_ids": texts.ids[i]} for i in idx]), device)
        with autocast or torch.autocast(device.type, enabled=False):
            hidden = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        out[idx] = pool(hidden, batch["attention_mask"], mode).float().cpu().numpy()
    return out


def linear_probe(c: float = 1.0):
    """Standardised features under a logistic regression (the features' scale is the model's)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    return make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=3000))


def on_folds(make, x: np.ndarray, y: np.ndarray, x_test: np.ndarray, folds,
             extra: tuple | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``make()`` fitted on each fold's training rows of ``x`` (and the labelled ``extra`` = (x, y) rows every
    fold trains on: test-time training's examples): its out-of-fold class probabilities (rows no fold holds
    out stay 0) and the mean of its folds' probabilities of ``x_test``."""
    width = int(np.max(y)) + 1  # class indices: a fold whose training rows lack a class still fills its column
    oof, test = np.zeros((len(x), width)), []
    extra_x, extra_y = extra if extra is not None else (x[:0], y[:0])
    extra_y = np.asarray(extra_y, dtype=y.dtype)  # no examples: an empty list, which would make the classes floats
    for fold in folds:
        fitted = make().fit(np.concatenate([x[fold.train], extra_x]), np.concatenate([y[fold.train], extra_y]))
        seen = fitted.classes_ if hasattr(fitted, "classes_") else fitted[-1].classes_
        oof[np.ix_(fold.val, seen)] = fitted.predict_proba(x[fold.val])
        test.append(np.zeros((len(x_test), width)))
        test[-1][:, seen] = fitted.predict_proba(x_test)
    return oof, np.mean(test, axis=0)


def verdict(metric, tuned: float, probe: float | None, lr: float) -> list[str]:
    """What a run says when fine-tuning scored below the model's own frozen probe on the same folds
    (nothing when it did not, or no probe ran), with the causes met here."""
    if probe is None or not metric.better(probe, tuned):
        return []
    return [f"fine-tuning scored below the model's own frozen probe (CV {metric.name} {tuned:.4f} against "
            f"{probe:.4f}): its rate (lr={lr:g}) or epochs undid the pretrained features, its new head learned "
            "too slowly (head_lr), or the head reads a token the model never trained (an encoder's [CLS] "
            "through transformers' pooler; a sentence-transformers folder gets its own pooling and a head that "
            "starts as this probe, kk.pooledhead)"]
