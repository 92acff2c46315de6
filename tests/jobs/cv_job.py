"""A 5-fold CV of an MLP, each fold checkpointed every step: killed and rerun by tests/test_folds.py."""
import sys

import numpy as np
import torch
from sklearn.model_selection import KFold
from torch.nn import functional as F

import kagglekit as kk

DECLARED = {"seed": 0, "force_retrain": False, "time_budget_s": 0.0, "precision": "auto", "data_dir": ""}


def main(slow: float) -> None:
    run = kk.start(dict(DECLARED), "cv", declared=dict(DECLARED), verbose=False)
    data = kk.datasets.tabular(400, features=8, classes=3, seed=0)
    x, y = data.tensors

    def train_fold(fold):
        torch.manual_seed(fold.index)
        model = kk.models.MLP(8, 16, 3, dropout=0.1)
        train = torch.utils.data.TensorDataset(x[fold.train], y[fold.train])

        def loss(m, batch):
            if slow:
                import time
                time.sleep(slow)
            return F.cross_entropy(m(batch[0]), batch[1])
        loader = kk.make_loader(train, 32, seed=0, num_workers=0)
        # the fold unit's checkpoints: cut short by the session's time, the fit raises kk.Unfinished
        kk.fit(model, torch.optim.AdamW(model.parameters(), 1e-2), loader, loss, run=run, epochs=3,
               checkpoints=fold.unit.checkpoints(save_every_min=0.0), progress=False)
        model.eval()
        with torch.no_grad():
            return kk.folds.Predictions(oof={"mlp": torch.softmax(model(x[fold.val]), 1)[:, 1].numpy()},
                                        test={"mlp": torch.softmax(model(x[:10]), 1)[:, 1].numpy()})

    cv = kk.folds.CrossValidation(run, "mlp", KFold(5, shuffle=True, random_state=0), n=len(y),
                                  config={"epochs": 3}, code="cv_job v1")
    result = cv.run(train_fold, target=(y == 1).numpy(), metric=lambda t, p: float(np.mean((t - p) ** 2)))
    print("COMPLETE" if result.complete else result.message, flush=True)


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 0.0)
