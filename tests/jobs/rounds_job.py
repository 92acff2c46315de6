"""Pseudo-label rounds on scikit-learn's digits (150 labelled, 300 in the unlabelled pool), each fold
of each round a unit: killed and rerun by tests/test_distill.py. Prints each fold it trains."""
import hashlib
import sys

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import StratifiedKFold

import kagglekit as kk
from kagglekit.run import distill, rounds

DECLARED = {"seed": 0, "force_retrain": False, "time_budget_s": 0.0, "precision": "auto", "data_dir": ""}


def main(slow: float) -> None:
    run = kk.start(dict(DECLARED), "rounds", declared=dict(DECLARED), verbose=False)
    x, y = load_digits(return_X_y=True)
    x = torch.from_numpy((x / 16.0).astype(np.float32))
    labelled, pool, test = np.arange(150), np.arange(150, 450), np.arange(450, 550)
    y_lab = torch.from_numpy(y[labelled])

    def train_fold(fold, teacher):
        print(f"training {fold.name}", flush=True)
        torch.manual_seed(fold.index)
        rows = labelled[fold.train]
        xs, hard, soft = x[rows], y_lab[fold.train], torch.eye(10)[y_lab[fold.train]]
        if teacher is not None:  # fold k's pool labels from the previous round's fold k only
            extra, labels = distill.pseudo_labels(teacher, fold.index, threshold=0.8)
            xs = torch.cat([xs, x[pool][extra]])
            hard = torch.cat([hard, torch.full((len(extra),), -1)])
            soft = torch.cat([soft, torch.from_numpy(labels).float()])
        model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
        loader = kk.make_loader(torch.utils.data.TensorDataset(xs, hard, soft), 16, seed=0, num_workers=0)

        def loss(m, batch):
            if slow:
                import time
                time.sleep(slow)
            return distill.loss(2.0, 0.5)(m, batch)
        kk.fit(model, torch.optim.Adam(model.parameters(), 3e-3), loader, loss, run=run, epochs=6,
               checkpoints=fold.unit.checkpoints(save_every_min=0.0), progress=False)
        model.eval()
        with torch.no_grad():
            p = lambda part: torch.softmax(model(part), 1)  # noqa: E731
            return kk.folds.Predictions(oof={"mlp": p(x[labelled][fold.val]).numpy()},
                                        test={"mlp": p(x[test]).numpy()}, record={"pool": p(x[pool])})

    done = rounds.pseudo_label_rounds(
        run, "digits", StratifiedKFold(3, shuffle=True, random_state=0), n=len(labelled), y=y[labelled],
        train_fold=train_fold, metric=lambda t, p: float((np.asarray(p).argmax(1) == t).mean()), max_rounds=3,
        code="rounds_job v1")
    last = done[-1].result
    if last.complete:
        digest = hashlib.sha256(np.ascontiguousarray(last.oof["mlp"]).tobytes()).hexdigest()[:16]
        cvs = [round(r.result.scores["mlp"]["mean"], 4) for r in done]
        print(f"ROUNDS {len(done)} CV {cvs} OOF {digest}", flush=True)
    else:
        print(f"PENDING {last.message}", flush=True)


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 0.0)
