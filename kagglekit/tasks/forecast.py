"""Time-series forecasting: an LSTM (trained through the kit), XGBoost, their ensemble."""
from __future__ import annotations


import numpy as np
import torch
from torch.nn import functional as F

from .. import checkpoint, data, launcher, metrics, models, policy, workcap
from ..train import fit, supervised


def standardise(series: torch.Tensor, train_end: int) -> tuple[torch.Tensor, dict]:
    """Scale every channel by the training period's mean and std (no look-ahead)."""
    mean, std = series[:train_end].mean(0), series[:train_end].std(0).clamp(min=1e-6)
    return (series - mean) / std, {"mean": mean, "std": std}


def seasonal_naive(windows, period: int) -> torch.Tensor:
    """The baseline: each future step repeats the value one season earlier."""
    preds = []
    for past, future in windows:
        steps = torch.arange(len(future))
        preds.append(past[len(past) - period + steps % period, windows.target])
    return torch.stack(preds)


def scores(pred: torch.Tensor, truth: torch.Tensor) -> dict:
    """MAE and RMSE over every window and horizon step (scikit-learn's)."""
    return metrics.regression(pred, truth)


def truth(windows) -> torch.Tensor:
    return torch.stack([future for _, future in windows])


# ---- LSTM ----------------------------------------------------------------------------
def train_lstm(cfg: dict, train, val) -> dict | None:
    """Launched on every GPU; rank 0 returns {"state": weights, "history": ...}.

    The run decides resume/retrain (``force_retrain``), precision and the budget; an
    interrupted training of the same config resumes.
    """
    ctx = launcher.context()
    torch.manual_seed(cfg["seed"])
    channels = train[0][0].shape[1]
    model = models.LSTMForecaster(channels, cfg["hidden"], cfg["horizon"])
    train_loader = data.make_loader(train, cfg["batch_size"], seed=cfg["seed"], device=ctx.device)
    val_loader = data.make_loader(val, 4 * cfg["batch_size"], train=False, device=ctx.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=cfg["lr"], epochs=cfg["epochs"], steps_per_epoch=len(train_loader))
    result = fit(model, optimizer, train_loader, supervised(F.mse_loss), epochs=cfg["epochs"],
                 val_loader=val_loader, scheduler=scheduler, clip_grad_norm=1.0,
                 checkpoints=policy.current().checkpoints("lstm", monitor="val_loss",
                                                          data=train.data),
                 config=cfg)
    if not ctx.is_main:
        return None
    state = {k: v.cpu() for k, v in checkpoint.unwrap(model).state_dict().items()}
    return {"state": state, "history": result.history, "fit": result.summary()}


@torch.no_grad()
def predict_lstm(trained: dict, windows, cfg: dict) -> torch.Tensor:
    channels = windows[0][0].shape[1]
    model = models.LSTMForecaster(channels, cfg["hidden"], cfg["horizon"])
    model.load_state_dict(trained["state"])
    model.eval()
    loader = torch.utils.data.DataLoader(windows, batch_size=512)
    return torch.cat([model(x) for x, _ in loader])


# ---- XGBoost -------------------------------------------------------------------------
def lag_features(windows) -> tuple[np.ndarray, np.ndarray]:
    """Flattened lookback of every channel and targets, both relative to the last
    observed target value (the level is given; the trees learn the change)."""
    xs, ys = [], []
    for past, future in windows:
        last = past[-1, windows.target]
        xs.append((past - last).flatten().numpy())
        ys.append((future - last).numpy())
    return np.stack(xs), np.stack(ys)


def train_xgboost(cfg: dict, train, val, use_gpu: bool = False):
    """A multi-output XGBoost regressor with early stopping on the validation period."""
    import xgboost as xgb
    x_train, y_train = lag_features(train)
    x_val, y_val = lag_features(val)
    params = {"max_depth": cfg["xgb_depth"], "eta": cfg["xgb_lr"], "subsample": 0.8,
              "colsample_bytree": 0.8, "objective": "reg:squarederror", "seed": cfg["seed"],
              "max_bin": 64,  # coarser histograms: several times faster, same skill here
              "tree_method": "hist", "device": "cuda" if use_gpu else "cpu",
              "multi_strategy": "one_output_per_tree"}
    return xgb.train(params, xgb.DMatrix(x_train, label=y_train), workcap.steps(cfg["xgb_rounds"]),
                     evals=[(xgb.DMatrix(x_val, label=y_val), "val")],
                     early_stopping_rounds=20, verbose_eval=False)


def predict_xgboost(booster, windows) -> torch.Tensor:
    import xgboost as xgb
    x, _ = lag_features(windows)
    last = torch.stack([past[-1, windows.target] for past, _ in windows])
    pred = torch.from_numpy(booster.predict(xgb.DMatrix(x))).float().reshape(len(windows), -1)
    return pred + last[:, None]


def forecast_figure(truth_seq: torch.Tensor, preds: dict, title: str = "test forecasts"):
    """The first test window's forecast of every model against the truth."""
    from ..plots import _pyplot
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 3.6))
    ax.plot(truth_seq.numpy(), color="black", linewidth=2, label="truth")
    for name, pred in preds.items():
        ax.plot(pred.numpy(), label=name, alpha=0.85)
    ax.set(xlabel="steps ahead", ylabel="target (standardised)", title=title)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def xgboost_objective(cfg: dict, train, val):
    """Optuna objective: validation MAE of XGBoost with searched depth and learning rate."""
    import xgboost as xgb
    x_val, y_val = lag_features(val)

    def objective(trial) -> float:
        params = {**cfg, "xgb_depth": trial.suggest_int("xgb_depth", 2, 8),
                  "xgb_lr": trial.suggest_float("xgb_lr", 0.01, 0.3, log=True)}
        booster = train_xgboost(params, train, val)
        pred = booster.predict(xgb.DMatrix(x_val), iteration_range=(0, booster.best_iteration + 1))
        return metrics.regression(pred.reshape(y_val.shape), y_val)["mae"]
    return objective
