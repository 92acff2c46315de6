"""Stand-ins for competition data in the sandbox: the competition's exact file layout, every
quirk its real files are documented to have, synthetic content.

The real files mount on Kaggle only after the rules are accepted on the website and never
reach this machine (``make data`` fetches a copy of your own, which ``make sandbox DATA=``
mounts instead); the sandbox checks that the notebook reads that layout, with its Kaggle
parameters, version after version, and in the scoring rerun.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np


class NoStandIn(LookupError):
    """A competition the sandbox cannot stand in for."""


# Ids and scroll ids shaped like the real ones (ten-digit chunk ids, five-digit scrolls).
TRAIN = [("1004283650", "26002", 96), ("1157445126", "26002", 112), ("2037461925", "34117", 96),
         ("3346244732", "34117", 96)]
MOVED = [("3925240194", "26010", 96), ("4021883011", "26010", 96)]
PUBLIC_TEST = [("1407735", "26002", 96)]
HIDDEN_TEST = [("2290837", "34117", 96), ("3518870", "26010", 112)]


def vesuvius(folder: Path, hidden: bool = False, shrink: int = 1) -> Path:
    """Vesuvius Surface Detection as it ships (competition ``vesuvius-challenge-surface-
    detection``), each part reproducing a documented quirk of the real data:

    - every TIFF stack LZW-compressed (the competition's files are; tifffile cannot decode them
      without imagecodecs, which Kaggle's image lacks), written by Pillow;
    - ``train.csv`` with the real columns ``id,scroll_id`` and ten-digit ids;
    - two of its ids without files in ``train_images/`` and ``train_labels/``: they sit in
      ``deprecated_train_images/`` and ``deprecated_train_labels/`` with binary labels (0 / 1,
      no unlabelled class), as after the competition's data update (806 listed, 786 present);
    - cubic volumes of two edges (the real ones are 320^3, 256^3 and a 384^3; small here so a
      CPU predicts them in seconds), labels 0 / 1 / 2 with an unlabelled slab;
    - a public ``test_images/`` holding one volume, ``test.csv`` listing it;
    - ``hidden=True``: the scoring rerun's folder, where other test volumes (two, of two edges)
      replace the public one.

    ``shrink``: every edge divided by it (the tests' small copy of the same layout).
    """
    from ..volumes.folder import synthetic_chunk, write_layout, write_volume
    train = {vid: synthetic_chunk(edge // shrink, i) for i, (vid, _, edge) in enumerate(TRAIN)}
    tests = HIDDEN_TEST if hidden else PUBLIC_TEST
    test = {vid: synthetic_chunk(edge // shrink, 100 + i)[0] for i, (vid, _, edge) in enumerate(tests)}
    scrolls = {vid: scroll for vid, scroll, _ in TRAIN + MOVED + tests}
    write_layout(folder, train, test, compress="lzw", scrolls=scrolls)
    for i, (vid, _, edge) in enumerate(MOVED):
        image, label = synthetic_chunk(edge // shrink, 50 + i)
        write_volume(folder / "deprecated_train_images" / f"{vid}.tif", image, "lzw")
        write_volume(folder / "deprecated_train_labels" / f"{vid}.tif",
                     (label == 1).astype(np.uint8), "lzw")
    listed = TRAIN[:2] + MOVED + TRAIN[2:]  # the moved ids mid-table, as the update left them
    (folder / "train.csv").write_text("id,scroll_id\n" + "".join(f"{v},{s}\n" for v, s, _ in listed))
    return folder


def elliptic(folder: Path, hidden: bool = False, per_step: int = 40, seed: int = 0) -> tuple[dict, dict]:
    """The Elliptic Bitcoin data set as Kaggle's ``ellipticco/elliptic-data-set`` ships it, in
    ``elliptic_bitcoin_dataset/``; each part reproduces a documented property of the real files:

    - ``elliptic_txs_features.csv`` without a header: txId, time step 1-49, 165 features (93
      local, 72 aggregated over neighbours); txIds large arbitrary integers;
    - ``elliptic_txs_edgelist.csv`` (txId1, txId2): directed payments, only between transactions
      of the same time step (no edge crosses steps), about 1.15 per node;
    - ``elliptic_txs_classes.csv`` (txId, class): "1" illicit, "2" licit, "unknown" for ~77% of
      nodes, illicit ~10% of the labelled ones, rows in another order than the features';
    - a temporal signal: illicit transactions differ in their local features and pay each other
      more often, and after step 43 (the dark-market shutdown of the paper, where every model
      fails) the difference shrinks.

    Returns ``{txId: class}`` and ``{txId: time step}`` for the tests.
    """
    import pandas as pd
    rng = np.random.default_rng(seed)
    step = np.repeat(np.arange(1, 50), per_step)
    n = len(step)
    tx = rng.choice(np.arange(10**7, 4 * 10**8), n, replace=False)
    labelled = rng.random(n) < 0.23
    label = np.where(labelled, np.where(rng.random(n) < 0.1, "1", "2"), "unknown")
    illicit = label == "1"
    feats = rng.normal(size=(n, 165)).astype(np.float32)
    feats[:, :10] += illicit[:, None] * np.where(step > 43, 0.3, 1.2)[:, None]
    src, dst = _payments(step, illicit, rng)
    neighbours = np.zeros((n, 72), np.float32)  # aggregated features: the neighbours' mean
    np.add.at(neighbours, src, feats[dst, :72])
    degree = np.bincount(src, minlength=n)[:, None]
    feats[:, 93:] = neighbours / np.maximum(degree, 1) + 0.1 * rng.normal(size=(n, 72))
    out = Path(folder) / "elliptic_bitcoin_dataset"
    out.mkdir(parents=True, exist_ok=True)
    table = pd.DataFrame(feats).round(6)
    table.insert(0, "step", step)
    table.insert(0, "tx", tx)
    table.to_csv(out / "elliptic_txs_features.csv", header=False, index=False)
    pd.DataFrame({"txId1": tx[src], "txId2": tx[dst]}).to_csv(out / "elliptic_txs_edgelist.csv", index=False)
    order = rng.permutation(n)
    pd.DataFrame({"txId": tx[order], "class": label[order]}).to_csv(out / "elliptic_txs_classes.csv", index=False)
    return dict(zip(tx.tolist(), label.tolist())), dict(zip(tx.tolist(), step.tolist()))


def _payments(step: np.ndarray, illicit: np.ndarray, rng) -> tuple[np.ndarray, np.ndarray]:
    """Directed payments within each time step: every transaction pays one earlier one of its
    step (two, one time in seven), a like one (illicit to illicit) seven times in ten."""
    src, dst = [], []
    for s in np.unique(step):
        nodes = np.flatnonzero(step == s)
        for i in range(1, len(nodes)):
            earlier = nodes[:i]
            alike = earlier[illicit[earlier] == illicit[nodes[i]]]
            pool = alike if len(alike) and rng.random() < 0.7 else earlier
            for target in rng.choice(pool, min(len(pool), 1 + int(rng.random() < 0.15)), replace=False):
                src.append(nodes[i])
                dst.append(target)
    return np.array(src), np.array(dst)


def store_sales(folder: Path, hidden: bool = False, stores: int = 3, days: int = 400) -> Path:
    """Store Sales - Time Series Forecasting (file competition ``store-sales-time-series-
    forecasting``) as it ships, each part a documented property of the real files:

    - ``train.csv``: ``id,date,store_nbr,family,sales,onpromotion``, a row per store, product
      family and day (the real one: 54 stores x 33 families, 2013-01-01 to 2017-08-15); dates
      as text; family names with ``/`` and ``,`` (``BREAD/BAKERY``, ``LIQUOR,WINE,BEER``);
      fractional sales, long runs of zeros for a family a store does not sell;
    - every 25 December missing from the file (the stores are closed);
    - ``test.csv``: ``id,date,store_nbr,family,onpromotion`` for the 16 days after the last
      training day, its ids continuing train's; ``sample_submission.csv``: ``id,sales``, zeros;
    - the side tables ``stores.csv``, ``oil.csv`` (with gaps), ``holidays_events.csv``,
      ``transactions.csv`` beside them (a folder of several tables: ``table=`` names one).
    """
    import pandas as pd
    rng = np.random.default_rng(0)
    families = ["AUTOMOTIVE", "BREAD/BAKERY", "LIQUOR,WINE,BEER"]
    dates = pd.date_range(end="2017-08-15", periods=days, freq="D")
    dates = dates[~((dates.month == 12) & (dates.day == 25))]
    rows = []
    for store in range(1, stores + 1):
        for k, family in enumerate(families):
            weekly = 1 + 0.4 * np.sin(2 * np.pi * dates.dayofweek / 7)
            level = 0.0 if (store, family) == (2, "LIQUOR,WINE,BEER") else 20.0 * (k + 1) * store
            sales = np.round(level * weekly * rng.gamma(8, 1 / 8, len(dates)), 3)
            rows += [{"date": d.strftime("%Y-%m-%d"), "store_nbr": store, "family": family,
                      "sales": v, "onpromotion": int(rng.poisson(2))} for d, v in zip(dates, sales)]
    train = pd.DataFrame(rows).sort_values(["date", "store_nbr", "family"]).reset_index(drop=True)
    train.insert(0, "id", np.arange(len(train)))
    future = pd.date_range("2017-08-16", periods=16, freq="D")
    test = pd.DataFrame([{"date": d.strftime("%Y-%m-%d"), "store_nbr": s, "family": f,
                          "onpromotion": int(rng.poisson(2))}
                         for d in future for s in range(1, stores + 1) for f in families])
    test.insert(0, "id", np.arange(len(train), len(train) + len(test)))
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    train.to_csv(folder / "train.csv", index=False)
    test.to_csv(folder / "test.csv", index=False)
    pd.DataFrame({"id": test["id"], "sales": 0.0}).to_csv(folder / "sample_submission.csv", index=False)
    pd.DataFrame({"store_nbr": range(1, stores + 1), "city": "Quito", "type": "D",
                  "cluster": 13}).to_csv(folder / "stores.csv", index=False)
    oil = pd.DataFrame({"date": dates.strftime("%Y-%m-%d"), "dcoilwtico": 50 + rng.normal(size=len(dates))})
    oil.loc[oil.sample(frac=0.03, random_state=0).index, "dcoilwtico"] = np.nan
    oil.to_csv(folder / "oil.csv", index=False)
    pd.DataFrame({"date": ["2016-12-25"], "type": "Holiday", "locale": "National",
                  "locale_name": "Ecuador", "description": "Navidad", "transferred": False}).to_csv(
        folder / "holidays_events.csv", index=False)
    train.groupby(["date", "store_nbr"]).size().rename("transactions").reset_index().to_csv(
        folder / "transactions.csv", index=False)
    return folder


def served_store_sales(folder: Path, hidden: bool = False) -> Path:
    """The sandbox's inference-server competition (no Kaggle competition has this slug): Store
    Sales' files (``store_sales``, every quirk kept) served as Mitsui 2025 and Jane Street 2024
    serve theirs: ``kaggle_evaluation/`` beside the data (``evalstandin``: its gateway sends
    test.csv one date at a time, enforces the start-up limit and each batch's deadline, writes
    ``id,sales``), no ``sample_submission.csv`` (the gateway writes the submission). The hidden
    variant: the same dates and series, other row ids, as a rerun's hidden test set would carry."""
    import pandas as pd

    from . import evalstandin
    store_sales(folder)
    (Path(folder) / "sample_submission.csv").unlink()
    if hidden:
        test = pd.read_csv(Path(folder) / "test.csv")
        test.assign(id=test["id"] + 10**6).to_csv(Path(folder) / "test.csv", index=False)
    evalstandin.write(folder, row_id="id", time="date", target="sales")
    return Path(folder)


# The two rules of the real train.csv (their exact text), and rules only a test set has
RULES = ("No Advertising: Spam, referral links, unsolicited advertising, and promotional content are not allowed.",
         "No legal advice: Do not offer or request legal advice.")
UNSEEN_RULES = ("No medical advice: Do not offer or request specific medical advice, diagnoses, or treatment "
                "recommendations.", "No spoilers: Do not reveal important details in the discussion of new media.")


def community_rules(folder: Path, hidden: bool = False, rows: int = 480, test: int = 96) -> Path:
    """Jigsaw - Agile Community Rules Classification (code competition
    ``jigsaw-agile-community-rules``, 2025) as it ships, each part a documented property of the
    real files (public notebooks' EDA of them, read 2026-11-25):

    - ``train.csv``: ``row_id,body,rule,subreddit,positive_example_1,positive_example_2,
      negative_example_1,negative_example_2,rule_violation``: Reddit comments (``body``), the
      rule each is judged against, two example comments that break it (label 1 in the built-in
      task) and two that do not (label 0), the 0/1 label; only two rules (``RULES``, about half
      the rows each) over many subreddits;
    - ``test.csv``: the same without ``rule_violation``, and rules train never had
      (``UNSEEN_RULES``: the competition's point is to generalise to them); the scoring rerun's
      hidden test set is larger than the public one (the notebook's test rows are never fixed),
      and its example comments are other comments (what test-time training learns from);
    - ``sample_submission.csv``: ``row_id,rule_violation`` with fractional values: the metric
      is a column-averaged AUC, so the submission holds probabilities, not labels.

    The comments are the built-in texts (``text.textsets``), whose label is word order.
    """
    import pandas as pd

    from ..text.textsets import texts
    # the rerun's train.csv is the public one; only the test rows differ (twice as many)
    made = texts(rows, seed=3) + (texts(2 * test, seed=7) if hidden else texts(test, seed=5))
    test = len(made) - rows
    rules = [RULES[i % 2] for i in range(rows)] + [(RULES + UNSEEN_RULES)[i % 4] for i in range(test)]
    subreddits = ("legaladvice", "AskReddit", "soccerstreams", "personalfinance", "relationships")
    frame = pd.DataFrame({"row_id": np.arange(rows + test), "body": [t for t, _ in made], "rule": rules,
                          "subreddit": [subreddits[i % len(subreddits)] for i in range(rows + test)],
                          "rule_violation": [y for _, y in made]})
    for i, kind in ((1, "positive"), (2, "positive"), (1, "negative"), (2, "negative")):  # they break it, or not
        pool = texts(3 * (rows + test), seed=20 + i + 2 * (kind == "negative"))  # train.csv as public
        frame[f"{kind}_example_{i}"] = [t for t, y in pool if y == (kind == "positive")][:rows + test]
    columns = ["row_id", "body", "rule", "subreddit", "positive_example_1", "positive_example_2",
               "negative_example_1", "negative_example_2", "rule_violation"]
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    frame[columns].iloc[:rows].to_csv(folder / "train.csv", index=False)
    frame[columns[:-1]].iloc[rows:].to_csv(folder / "test.csv", index=False)
    pd.DataFrame({"row_id": frame["row_id"].iloc[rows:], "rule_violation": 0.5}).to_csv(
        folder / "sample_submission.csv", index=False)
    return folder


def playground_s5e6(folder: Path, hidden: bool = False) -> Path:
    """Playground S5E6's layout (tables/playground.py lists the real quirks it keeps)."""
    from ..tables import playground
    return playground.write(folder, rows=1200, test_rows=400, hidden=hidden)


SERVED = "kagglekit-served-store-sales"  # a stand-in only: push refuses a kernel that attaches it
# Stand-ins by the source a kernel attaches: a competition's slug or a dataset's owner/slug.
STAND_INS: dict[str, Callable] = {
    "vesuvius-challenge-surface-detection": vesuvius, "ellipticco/elliptic-data-set": elliptic,
             "store-sales-time-series-forecasting": store_sales, SERVED: served_store_sales,
             "jigsaw-agile-community-rules": community_rules, "playground-series-s5e6": playground_s5e6}


def mounts(meta: dict, work: Path, data: Path | None = None, hidden: bool = False, owner: str = "sandbox") -> dict:
    """``{target under the inputs: (folder, link)}``: the kernel's competition, dataset and
    model sources mounted as Kaggle mounts them: the competitor's own copy (``data``) for the
    first, else the stand-in of its layout; a Kaggle Model (``owner/model/framework/variation/N``):
    timm's (owner ``timm``) as the packaged ImageNet weights (``backbones.write_packaged``), else a
    small model of a real architecture with random weights (``text.textsets``)."""
    sources = {}
    for competition in meta.get("competition_sources", []):
        target = f"competitions/{competition}"
        if data is not None:
            sources[target] = (data, True)
        else:
            variant = "hidden" if hidden else "public"
            sources[target] = (make(competition, work / "competitions" / variant / competition, hidden), False)
    datasets = [d for d in meta.get("dataset_sources", []) if not d.endswith("/kagglekit-wheels")]
    for dataset in datasets:
        target = f"datasets/{dataset}"
        if data is not None and not meta.get("competition_sources") and dataset == datasets[0]:
            sources[target] = (data, True)
        else:
            sources[target] = (make(dataset, work / "datasets" / dataset), False)
    if meta.get("weights_from"):
        sources.update(_published(meta["weights_from"], owner, meta.get("weights_via", "dataset")))
    for handle in meta.get("model_sources", []):
        from ..images.backbones import write_packaged
        from ..text.textsets import write_standin_model
        arch = "llama" if any(k in handle.lower() for k in ("llama", "qwen", "gemma", "mistral")) else "bert"
        sources[f"models/{handle}"] = (write_packaged(work / "models" / "timm-packaged") if handle.startswith("timm/")
                                       else write_standin_model(work / "models", arch), False)
    return sources


def _published(name: str, owner: str, via: str = "dataset") -> dict:
    """``make publish NB=<name>``'s folder, exactly what it uploaded, where Kaggle mounts the dataset
    or (``via="model"``) the Model version the kernel's metadata names (framework in lower case, as
    Kaggle mounts it)."""
    from ..state.published import MANIFEST
    from .publish import layout, metadata
    trained = metadata.load(Path("kernel-metadata") / f"{name}.json")
    folder = layout.weights_folder(trained)
    if not (folder / MANIFEST).exists():
        raise NoStandIn(f"no published weights of {name} at {folder}: make publish NB={name} first "
                        "(the sandbox mounts what it published)")
    if via == "model":
        return {f"models/{layout.model_source(trained, owner).lower()}": (folder, False)}
    return {f"datasets/{owner}/{layout.weights_slug(trained)}": (folder, False)}


def make(source: str, folder: Path, hidden: bool = False) -> Path:
    """The stand-in for ``source`` (a competition's slug or a dataset's owner/slug) written to
    ``folder`` (once); ``hidden``: a competition's scoring-rerun variant (the hidden test set
    in place of the public one)."""
    if source not in STAND_INS:
        raise NoStandIn(f"the sandbox has no stand-in for {source!r}: add a writer of its layout "
                        "to kagglekit/tools/standins.py (STAND_INS), or mount your copy of the "
                        "real files (make data, then make sandbox DATA=data/<slug>)")
    if not (folder / ".complete").exists():
        STAND_INS[source](folder, hidden=hidden)
        (folder / ".complete").write_text("")
    return folder
