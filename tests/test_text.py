"""Fine-tuning a pretrained transformer: the attached model found, batches of similar length,
checkpoints of what trains only, a SIGKILL mid-epoch resumed bit for bit, and the notebook on an
encoder and a decoder by ``model_dir`` alone."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import kagglekit as kk
from kagglekit.readers import pretrained
from kagglekit.text import textsets

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A stand-in BERT, Llama and Qwen 3 (random weights, tokenizers trained on the built-in texts)."""
    root = tmp_path_factory.mktemp("models")
    return {arch: textsets.write_standin_model(root, arch) for arch in ("bert", "llama", "qwen")}


# ---- the attached model ------------------------------------------------------------------------
def test_the_model_is_found_in_both_kaggle_model_layouts_and_inside_a_dataset(tmp_path, models):
    import shutil
    roots = [tmp_path / "input"]
    new = roots[0] / "models" / "acme" / "tiny-bert" / "transformers" / "default" / "2"
    shutil.copytree(models["bert"], new)
    shutil.copytree(models["bert"], roots[0] / "models" / "acme" / "tiny-bert" / "transformers" / "default" / "1")
    assert pretrained.find_model_dir("acme/tiny-bert/transformers/default/2", roots) == new
    # the handle without its version: the newest one
    assert pretrained.find_model_dir("acme/tiny-bert/transformers/default", roots) == new
    old = tmp_path / "old" / "tiny-llama" / "transformers" / "default" / "1"  # /kaggle/input/<model>/...
    shutil.copytree(models["llama"], old)
    assert pretrained.find_model_dir("acme/tiny-llama/transformers/default/1", [tmp_path / "old"]) == old
    nested = roots[0] / "datasets" / "someone" / "bert-offline" / "bert-offline"  # a dataset, one folder down
    shutil.copytree(models["bert"], nested)
    assert pretrained.find_model_dir("someone/bert-offline", roots) == nested
    with pytest.raises(pretrained.ModelDirError, match="model_sources.*nothing is downloaded"):
        pretrained.find_model_dir("acme/missing/transformers/default/1", roots)


def test_the_base_identity_is_the_same_wherever_it_is_mounted_and_differs_for_another_base(tmp_path, models):
    import shutil
    copy = shutil.copytree(models["bert"], tmp_path / "elsewhere")
    assert pretrained.base_identity(copy) == pretrained.base_identity(models["bert"])
    other = textsets.write_standin_model(tmp_path / "other", "bert", seed=1)
    assert pretrained.base_identity(other) != pretrained.base_identity(models["bert"])


def test_4bit_and_a_split_model_are_refused_where_the_machine_cannot_do_them():
    with pytest.raises(ValueError, match="load_in_4bit=True needs a CUDA GPU"):
        kk.text.refuse(True, "ddp", torch.device("cpu"), 0, lora_r=8)
    with pytest.raises(ValueError, match="only adapters can train it"):
        kk.text.refuse(True, "ddp", torch.device("cuda", 0), 2, 0, lora_r=0)
    with pytest.raises(ValueError, match="this machine has 1"):
        kk.text.refuse(False, "split", torch.device("cpu"), 1, 1)
    with pytest.raises(ValueError, match='needs bitsandbytes.*add "bitsandbytes" to the kernel'):
        kk.text.refuse(True, "ddp", torch.device("cuda", 0), 2, 0, lora_r=8)  # not installed here
    from kagglekit.tools.publish import wheels
    assert wheels.pinned("bitsandbytes", REPO / "requirements.txt", REPO / "setup" / "gpu-requirements.txt")
    with pytest.raises(ValueError, match="set processes=1"):
        kk.text.refuse(False, "split", torch.device("cuda", 0), 2, 0)
    kk.text.refuse(False, "ddp", torch.device("cpu"), 0)


def test_a_4bit_base_keeps_non_reentrant_checkpointing_through_peft_s_preparation(models):
    """peft's prepare_model_for_kbit_training enabled checkpointing again with ``{}``, which torch
    runs reentrant (and DDP then fails): the kit's preparation keeps it non-reentrant. The
    stand-in carries the flag bitsandbytes' loading sets (this machine cannot load 4-bit)."""
    import warnings

    from transformers import AutoModelForSequenceClassification
    model = AutoModelForSequenceClassification.from_pretrained(models["llama"], num_labels=2)
    model.config.pad_token_id = kk.text.load_tokenizer(models["llama"]).pad_token_id  # Llama 3 ships none
    model.is_loaded_in_4bit = True
    model = kk.text.prepare_quantized(model, gradient_checkpointing=True)
    layers = [m for m in model.modules() if getattr(m, "gradient_checkpointing", False)]
    assert layers and all(m._gradient_checkpointing_func.keywords == {"use_reentrant": False}
                          for m in layers)
    model.train()
    ids = torch.randint(1, 40, (2, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # torch warns when the choice is left open
        model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=torch.tensor([0, 1])).loss.backward()


# ---- decoders as classifiers -------------------------------------------------------------------
PROMPT = "story : {text} . does it end well ? answer :"


def _decoder(models, arch, head, **options):
    from transformers import AutoTokenizer

    from kagglekit.text import answerhead
    assert AutoTokenizer.from_pretrained(models[arch]).pad_token is None  # as Llama 3 and Qwen base ship
    tokenizer = kk.text.load_tokenizer(models[arch])
    ids = answerhead.answer_token_ids(tokenizer, textsets.LABELS, "no,yes") if head == "answer_token" else None
    torch.manual_seed(0)
    model, _ = kk.text.load_classifier(models[arch], 2, head=head, answer_ids=ids, lora_r=4, **options)
    return model, tokenizer


@pytest.mark.parametrize("arch", ["llama", "qwen"])
@pytest.mark.parametrize("head", ["sequence", "answer_token"])
def test_a_decoder_without_a_padding_token_classifies_a_padded_batch_as_each_text_alone(models, arch, head, capsys):
    """Llama 3 and Qwen ship no padding token: one is supplied, and the class is read at the last
    real token whether the batch is padded on the right or on the left (LoRA on, batches of 3);
    batched scoring gives the same probabilities and says first how long it will take at most."""
    model, tokenizer = _decoder(models, arch, head)
    model.eval()
    texts = kk.text.TokenizedTexts(tokenizer, ["calm lokami storm", "storm calm", "mikalo ruto calm storm vivi sapa"],
                                   32, template=PROMPT)
    with torch.no_grad():
        alone = torch.cat([model(input_ids=torch.tensor([i]), attention_mask=torch.ones(1, len(i), dtype=torch.long))
                           .logits for i in texts.ids])
        for side in ("right", "left"):
            tokenizer.padding_side = side
            batch = kk.text.collator(tokenizer)([{"input_ids": i} for i in texts.ids])
            assert (batch["attention_mask"] == 0).any()  # padded
            torch.testing.assert_close(model(**batch).logits, alone, atol=1e-5, rtol=1e-4)
    assert alone.shape == (3, 2)
    scored = kk.text.predict_proba(model, texts, kk.text.collator(tokenizer), 2, torch.device("cpu"), announce="test")
    np.testing.assert_allclose(scored, torch.softmax(alone.double(), -1).numpy(), atol=1e-5)
    assert "test: 2 batches on each of 1 rank(s), at most" in capsys.readouterr().out
    trained = [n for n, p in model.named_parameters() if p.requires_grad]
    head_weights = [n for n in trained if "lora_" not in n]  # the sequence head trains whole; answer tokens add none
    assert (head_weights == []) == (head == "answer_token")


@pytest.mark.parametrize("head", ["sequence", "answer_token"])
def test_the_frozen_base_sits_in_16_bits_and_what_trains_in_fp32_even_after_a_fall_back_to_fp32(models, head,
                                                                                                half_kernels):
    """On the emulated T4 (fp16 with a GradScaler) the base is loaded in the CPU's 16-bit type and
    the adapters and head in fp32, as the scaler needs; a fit that gave fp16 up runs without
    autocast, and the half base's hidden states still meet the fp32 head."""
    from kagglekit.machine.precision import Precision
    model, tokenizer = _decoder(models, "qwen", head, precision=Precision("fp16", "cpu"), device="cpu")
    trains = {p.dtype for p in model.parameters() if p.requires_grad}
    frozen = {p.dtype for p in model.parameters() if not p.requires_grad}
    assert trains == {torch.float32} and frozen == {torch.bfloat16}
    batch = kk.text.collator(tokenizer)([{"input_ids": i, "labels": y} for i, y in ([[5, 6, 7], 0], [[8, 9], 1])])
    scaler = torch.amp.GradScaler("cpu")
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    with Precision("fp16", "cpu").autocast():
        scaler.scale(model(**batch).loss).backward()
    scaler.step(optimizer)
    scaler.update()
    model(**batch).loss.backward()  # fp32, no autocast
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("head", ["sequence", "answer_token"])
def test_an_int8_copy_of_either_head_predicts_what_fp32_predicts(models, head):
    """The CPU rerun's int8 prediction (adapters merged, linear layers int8) of a decoder: the
    answer-token head reads its class columns from the packed output layer too."""
    model, tokenizer = _decoder(models, "qwen", head)
    texts = kk.text.TokenizedTexts(tokenizer, ["calm lokami storm", "storm calm", "vivi calm sapa storm"], 32)
    collate, cpu = kk.text.collator(tokenizer), torch.device("cpu")
    exact = kk.text.predict_proba(model, texts, collate, 2, cpu)
    np.testing.assert_allclose(kk.text.predict_proba(model, texts, collate, 2, cpu, int8=True), exact, atol=0.01)


def test_answer_tokens_that_cannot_tell_the_classes_apart_are_refused_by_name(models):
    from kagglekit.text.answerhead import AnswerTokenError, answer_token_ids
    tokenizer = kk.text.load_tokenizer(models["llama"])
    assert len(set(answer_token_ids(tokenizer, ["a", "b"], "no,yes"))) == 2
    with pytest.raises(AnswerTokenError, match="'yes' and 'yes' begin with the same token"):
        answer_token_ids(tokenizer, ["a", "b"], "yes,yes")
    with pytest.raises(AnswerTokenError, match="not in the model's vocabulary"):
        answer_token_ids(tokenizer, textsets.LABELS)  # the labels' own words: unknown to the stand-in
    with pytest.raises(AnswerTokenError, match="names 3 answers for 2 classes"):
        answer_token_ids(tokenizer, ["a", "b"], "no,yes,maybe")


def test_a_text_too_long_is_cut_inside_the_prompt_and_its_question_stays_whole(models):
    tokenizer = kk.text.load_tokenizer(models["llama"])
    question = tokenizer(" does it end well ? answer :", add_special_tokens=False)["input_ids"]
    texts = kk.text.TokenizedTexts(tokenizer, [" ".join(["calm"] * 50), "storm calm"], 16, template=PROMPT)
    assert len(texts.ids[0]) == 16 and texts.ids[0][-len(question):] == question
    assert texts.ids[1][-len(question):] == question and texts.ids[0][0] == tokenizer.bos_token_id
    with pytest.raises(ValueError, match="no room for the text"):
        kk.text.TokenizedTexts(tokenizer, ["calm"], 8, template=PROMPT)


def test_a_prompts_other_fields_are_filled_from_each_row_whole_and_the_text_cut_around_them(models):
    """Jigsaw's rule beside the comment: each row's own rule, never cut; the text cut to what the
    rule leaves (a longer rule, a shorter text), the question whole; a field without values refused."""
    tokenizer = kk.text.load_tokenizer(models["llama"])
    template = "{rule} ? " + PROMPT  # words the stand-in's vocabulary knows
    rules = [{"rule": "calm"}, {"rule": "storm storm storm storm"}]
    texts = kk.text.TokenizedTexts(tokenizer, [" ".join(["calm"] * 50)] * 2, 24, template=template, fields=rules)
    decoded = [tokenizer.decode(ids, skip_special_tokens=True) for ids in texts.ids]
    assert all(len(ids) == 24 for ids in texts.ids)
    assert decoded[0].startswith("calm ? story") and decoded[1].startswith("storm storm storm storm ? story")
    assert all(d.endswith("does it end well ? answer :") for d in decoded)
    assert decoded[0].count("calm") - 1 == decoded[1].count("calm") + 3  # three more rule words, three fewer text words
    with pytest.raises(ValueError, match=r"names \{rule\}: give their values per text"):
        kk.text.TokenizedTexts(tokenizer, ["calm"], 24, template=template)


# ---- the competition's files -------------------------------------------------------------------
def test_the_competition_is_read_with_its_quirks_and_a_missing_column_is_named(tmp_path):
    folder = textsets.write_competition(tmp_path / "c", 60, 20, probabilities=True)
    data = textsets.read_competition(folder, "text", "label")
    assert data.id_column == "id" and data.classes == list(textsets.LABELS) and data.wants == "probabilities"
    frame = data.submission(np.tile([0.2, 0.8], (20, 1)))
    assert list(frame.columns) == ["id", *textsets.LABELS] and len(frame) == 20
    with pytest.raises(textsets.TextDataError, match="no column 'body'.*its columns: id, text, label"):
        textsets.read_competition(folder, "body", "label")


def test_a_binary_target_whose_sample_holds_fractions_gets_the_positive_probability(tmp_path):
    from kagglekit.tools.standins import community_rules
    data = textsets.read_competition(community_rules(tmp_path / "j"), "body", "rule_violation")
    assert data.id_column == "row_id" and data.classes == [0, 1] and data.wants == "probability"
    assert set(data.test["rule"]) - set(data.train["rule"])  # as the real one: rules train never had
    probs = np.column_stack([np.linspace(0, 1, len(data.test)), np.linspace(1, 0, len(data.test))])
    assert np.allclose(data.submission(probs)["rule_violation"], probs[:, 1])


def test_labelled_examples_join_training_without_repeats_or_a_training_text_and_bad_specs_are_named(tmp_path):
    """Jigsaw's example columns: every labelled text of train.csv and test.csv once, none equal to a
    training text (it would carry that row's label into the fold validating on it); the count that
    came from test.csv is what the hidden test scales in the rerun's plan."""
    import pandas as pd
    folder = tmp_path / "c"
    folder.mkdir()
    pd.DataFrame({"row_id": [1, 2], "body": ["a b", "c d"], "rule": ["no spam", "no ads"], "pos": ["x y", "a b"],
                  "neg": ["z", None], "rule_violation": [1, 0]}).to_csv(folder / "train.csv", index=False)
    test = pd.DataFrame({"row_id": [3], "body": ["e f"], "rule": ["no slurs"], "pos": ["x y"], "neg": ["w v"]})
    test.to_csv(folder / "test.csv", index=False)
    pd.DataFrame({"row_id": [3], "rule_violation": [0.5]}).to_csv(folder / "sample_submission.csv", index=False)
    data = textsets.read_competition(folder, "body", "rule_violation")
    rows, labels, from_test = textsets.labelled_examples(data, "pos:1, neg:0")
    assert rows["body"].tolist() == ["x y", "z", "w v"] and labels.tolist() == [1, 0, 0] and from_test == 1
    assert rows["rule"].tolist() == ["no spam", "no spam", "no slurs"]  # each example beside its row's rule
    assert data.fields(rows, ["rule"]) == [{"rule": "no spam"}, {"rule": "no spam"}, {"rule": "no slurs"}]
    with pytest.raises(textsets.TextDataError, match=r"prompt names \{subreddit\}, which the table has no column"):
        data.fields(rows, ["subreddit"])
    with pytest.raises(textsets.TextDataError, match="'nope', which test.csv does not have"):
        textsets.labelled_examples(data, "nope:1")
    with pytest.raises(textsets.TextDataError, match="must be column:class with a class of 'rule_violation'"):
        textsets.labelled_examples(data, "pos:yes")


# ---- batches -----------------------------------------------------------------------------------
def test_length_grouped_batches_pad_less_cover_every_text_and_resume_mid_epoch(models):
    tokenizer = kk.text.load_tokenizer(models["bert"])
    rows = textsets.texts(400, seed=2)
    texts = kk.text.TokenizedTexts(tokenizer, [t for t, _ in rows], 64, [y for _, y in rows])
    collate = kk.text.collator(tokenizer)
    grouped = kk.make_loader(texts, 16, seed=0, num_workers=0, collate_fn=collate, lengths=texts.lengths)
    plain = kk.make_loader(texts, 16, seed=0, num_workers=0, collate_fn=collate)
    assert kk.text.pad_share(grouped) < 0.5 * kk.text.pad_share(plain)
    sampler = grouped.sampler
    sampler.set_epoch(3)
    whole = list(sampler)
    assert sorted(whole) == list(range(400))  # the loader drops the partial batch (the last)
    assert [len(b["input_ids"]) for b in grouped] == [16] * 25
    first = texts.lengths[whole[0]]
    assert first == max(texts.lengths[i] for i in whole)  # the longest batch first: OOM at step 1
    sampler.set_position(3, 5 * 16)
    assert list(sampler) == whole[5 * 16:]  # a resume continues with the very next batch
    shards = [kk.loaders.LengthGroupedSampler(texts, texts.lengths, 8, num_replicas=2, rank=r) for r in (0, 1)]
    a, b = (list(s) for s in shards)
    assert not set(a) & set(b) and len(a) == len(b) == 200
    for k in range(len(a) // 8):  # each rank's batch is half of one global batch of similar lengths
        lengths = [texts.lengths[i] for i in a[8 * k:8 * k + 8] + b[8 * k:8 * k + 8]]
        assert max(lengths) - min(lengths) <= 6


def test_the_oom_back_off_splits_a_token_batch_into_halves_of_the_same_loss(models):
    from kagglekit.parallel.batches import chunk_weights, split_batch
    tokenizer = kk.text.load_tokenizer(models["bert"])
    rows = textsets.texts(12, seed=4)
    texts = kk.text.TokenizedTexts(tokenizer, [t for t, _ in rows], 64, [y for _, y in rows])
    batch = kk.text.collator(tokenizer)([texts[i] for i in range(12)])
    torch.manual_seed(0)
    model, _ = kk.text.load_classifier(models["bert"], 2, lora_r=4)
    model.eval()
    parts = split_batch(batch, 2)
    whole = model(**batch).loss
    halves = sum(w * model(**p).loss for p, w in zip(parts, chunk_weights(batch, parts)))
    assert torch.allclose(whole, halves, atol=1e-6)


# ---- checkpoints of what trains ----------------------------------------------------------------
def test_a_lora_checkpoint_holds_only_what_trains_and_restores_it_onto_the_base(models):
    from kagglekit.state import snapshot
    torch.manual_seed(0)
    model, _ = kk.text.load_classifier(models["llama"], 3, lora_r=4)
    for p in model.parameters():
        if p.requires_grad:
            p.data.add_(0.01)  # "trained"
    state = snapshot.snapshot(model, frozen=False)
    assert state["model_part"] == snapshot.TRAINABLE
    assert all("lora_" in k or "score" in k for k in state["model"])
    full = sum(v.numel() for v in model.state_dict().values())
    assert sum(v.numel() for v in state["model"].values()) < 0.2 * full
    torch.manual_seed(1)  # another head and other adapters
    fresh, _ = kk.text.load_classifier(models["llama"], 3, lora_r=4)
    snapshot.restore(state, fresh)
    ids = {"input_ids": torch.tensor([[2, 7, 9, 11]])}
    model.eval(), fresh.eval()
    assert torch.equal(model(**ids).logits, fresh(**ids).logits)
    bigger, _ = kk.text.load_classifier(models["llama"], 3, lora_r=8)
    with pytest.raises(RuntimeError, match="trainable part does not fit this model"):
        snapshot.restore(state, bigger)


def _job(tmp_path, models, epochs: int, slow: float, name: str, **popen):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAGGLE")}
    env.update(KAGGLEKIT_OUTPUT=str(tmp_path / name), OMP_NUM_THREADS="1")
    cmd = [sys.executable, str(REPO / "tests" / "jobs" / "text_job.py"), str(models["bert"].parents[3]),
           str(epochs), str(slow), str(tmp_path / f"{name}-{epochs}.pt")]
    if popen:
        return subprocess.Popen(cmd, env=env, **popen)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert "DONE" in done.stdout, done.stdout + done.stderr[-3000:]
    return torch.load(tmp_path / f"{name}-{epochs}.pt", weights_only=True)


def _last_step(folder: Path) -> int:
    return max((int(p.stem.split("-")[1]) for p in folder.rglob("step-*.json")), default=0)


@pytest.mark.slow
def test_a_sigkill_mid_epoch_resumes_to_the_uninterrupted_adapters_bit_for_bit_and_epochs_train_on(
        tmp_path, models):
    clean = _job(tmp_path, models, 2, 0.0, "clean")
    proc = _job(tmp_path, models, 2, 0.05, "killed", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    saved = tmp_path / "killed" / "checkpoints" / "lora"
    deadline = time.monotonic() + 300
    while _last_step(saved) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = _last_step(saved)
    assert 0 < killed_at < clean["steps"] // 2, f"killed at step {killed_at}: not in the first epoch"
    again = _job(tmp_path, models, 2, 0.0, "killed")
    assert again["steps"] == clean["steps"] and again["this_session"] < clean["steps"]
    assert again["state"].keys() == clean["state"].keys()
    assert all(torch.equal(again["state"][k], clean["state"][k]) for k in clean["state"])  # bit for bit
    checkpoint = torch.load(again["checkpoint"], weights_only=True)
    assert checkpoint["model_part"] == "trainable" and all("lora_" in k or "classifier" in k
                                                           for k in checkpoint["model"])
    longer = _job(tmp_path, models, 3, 0.0, "killed")  # epochs 2 -> 3: trains on, from step N
    assert longer["this_session"] == longer["steps"] - clean["steps"] > 0


# ---- the notebook ------------------------------------------------------------------------------
def _run(tmp_path, params):
    from kagglekit.tools.notebook_runner import run_notebook
    out = run_notebook(REPO / "notebooks" / "text_classification.ipynb", params, output_root=tmp_path,
                       progress=False)
    return out, json.loads((out / "metrics.json").read_text())


@pytest.mark.slow
@pytest.mark.e2e
def test_an_encoder_and_a_decoder_s_answer_tokens_through_the_same_notebook_beat_tfidf_on_the_built_in_task(
        tmp_path, models, monkeypatch):
    """BERT (the built-in stand-in) and a Qwen 3 given by ``model_dir``, LoRA adapters reading its
    answer tokens ("no"/"yes") after a prompt, on the emulated T4 x2 (two ranks, fp16 with a
    GradScaler, the base in 16 bits): each ends in a checked submission, a row per test id in the
    sample's columns, and beats TF-IDF + logistic regression on the held-out and the test texts
    (whose label is word order), so the transformer (or its blend) is what is submitted."""
    import pandas as pd
    bert = _run(tmp_path, {})
    monkeypatch.setenv("KAGGLEKIT_EMULATE", "t4x2")
    qwen = _run(tmp_path, {"model_dir": str(models["qwen"]), "head": "answer_token", "prompt": PROMPT,
                           "answer_tokens": "no,yes", "lora_r": 16, "lr": 1e-2})
    for arch, (out, metrics) in {"bert": bert, "qwen": qwen}.items():
        scores = metrics["scores"]
        print(arch, scores)
        assert scores["tfidf"] < 0.6 and scores["test_tfidf"] < 0.6  # bags of words: chance
        assert scores["transformer"] > 0.85 and scores["test_transformer"] > 0.85, (arch, scores)
        assert metrics["choice"]["model"] in ("transformer", "blend") and scores["test_submitted"] > 0.85
        submission = pd.read_csv(out / "submission.csv")
        assert list(submission.columns) == ["id", "label"] and len(submission) == 400
        assert set(submission["label"]) <= set(textsets.LABELS) and submission["id"].is_unique
        assert metrics["checkpoint"]["bytes"] > 0 and metrics["padding_share"]["grouped"] < \
            metrics["padding_share"]["random"]
    assert qwen[1]["model"]["path"] == str(models["qwen"])
    assert qwen[1]["fit"]["world_size"] == 2 and qwen[1]["fit"]["precision"] == "fp16"


@pytest.mark.slow
@pytest.mark.e2e
def test_on_real_man_pages_a_model_without_pretraining_loses_to_tfidf_and_the_baseline_is_submitted(tmp_path):
    """The case a user met: real text (the system's man pages, six sections) and no pretrained
    model attached. The random-weight transformer loses to TF-IDF by far; the notebook says so,
    submits the best on CV (TF-IDF or its blend, never the transformer) and the test score of
    what it submitted is TF-IDF's."""
    import pandas as pd

    from kagglekit.text import manpages
    try:
        folder = manpages.write_competition(tmp_path / "man", per_section=60)
    except manpages.ManPagesError as err:
        pytest.skip(f"this machine's manual is not installed: {err}")
    out, metrics = _run(tmp_path, {"data_dir": str(folder), "target_column": "section", "epochs": 2,
                                   "max_length": 128})
    scores, choice = metrics["scores"], metrics["choice"]
    print(scores, choice["reason"])
    assert scores["tfidf"] > 0.7 and scores["transformer"] < scores["tfidf"] - 0.2
    assert choice["model"] != "transformer" and choice["score"] == max(choice["scores"].values())
    assert scores["test_submitted"] >= scores["test_tfidf"] - 0.02 > scores["test_transformer"]
    assert metrics["summary"][0]["passed"] is True  # the submission's CV against the next best
    submission = pd.read_csv(out / "submission.csv")
    assert set(submission["section"]) <= {1, 2, 3, 5, 7, 8} and len(submission) == 72
    executed = (out / "text_classification.ipynb").read_text()
    assert "no pretrained model attached" in executed


@pytest.mark.slow
def test_a_scoring_rerun_whose_folds_do_not_fit_its_time_still_submits_the_baseline(tmp_path, monkeypatch):
    """Test-time training in Kaggle's rerun on a machine slower than planned: the first fold's fit
    is cut at the deadline (with a checkpoint) and left, and the notebook submits TF-IDF +
    logistic regression for every hidden row instead of nothing."""
    import pandas as pd

    from kagglekit.tools import standins
    folder = standins.community_rules(tmp_path / "jigsaw", hidden=True)
    monkeypatch.setenv("KAGGLE_IS_COMPETITION_RERUN", "True")
    out, metrics = _run(tmp_path, {"data_dir": str(folder), "text_column": "body", "target_column": "rule_violation",
                                   "metric": "auc", "test_examples": "positive_example_1:1,negative_example_1:0",
                                   "folds": 2, "epochs": 50, "time_budget_s": 12})
    assert metrics["chain"]["cache:text-fold0"] == "pending" and metrics["cv_text"]["done"] == []
    assert "choice" not in metrics
    submission = pd.read_csv(out / "submission.csv")
    assert len(submission) == 192 and submission["rule_violation"].between(0, 1).all()
    assert submission["rule_violation"].nunique() > 1  # TF-IDF's probabilities, not a constant
    assert metrics["summary"][0]["result"] == "test texts predicted (tfidf)" and metrics["summary"][0]["passed"]
    assert "submitting TF-IDF + logistic regression" in (out / "text_classification.ipynb").read_text()


@pytest.mark.slow
def test_a_new_test_csv_is_predicted_again_from_the_finished_adapters_without_training(tmp_path, models):
    """A competition's data updated between versions: test.csv changes, train.csv does not. The
    fold's unit is keyed by train.csv only: it is a hit, trains no step, and its finished adapters
    predict the new test rows."""
    import pandas as pd
    folder = textsets.write_competition(tmp_path / "comp", 400, 80, seed=3)
    params = {"data_dir": str(folder), "epochs": 2, "model_dir": str(models["llama"])}
    first, m1 = _run(tmp_path, params)
    trained = {p: p.stat().st_mtime_ns for p in (first / "checkpoints").rglob("step-*")}
    test = pd.read_csv(folder / "test.csv")
    test["text"] = [t for t, _ in textsets.texts(80, seed=9)]
    test.to_csv(folder / "test.csv", index=False)
    again, m2 = _run(tmp_path, params)
    # the fold's unit is keyed by the training texts: a hit, nothing launched to train; the test
    # texts are predicted from its finished adapters, whose files stay as they were
    assert again == first and m1["chain"]["cache:text-fold0"] == "computed" and m2["chain"]["cache:text-fold0"] == "hit"
    assert m2["checkpoint"]["bytes"] == m1["checkpoint"]["bytes"] > 0
    assert trained == {p: p.stat().st_mtime_ns for p in (again / "checkpoints").rglob("step-*")}
    new = pd.read_csv(again / "submission.csv")
    assert new["id"].tolist() == test["id"].tolist()


@pytest.mark.slow
def test_a_small_model_learns_each_fold_from_the_teacher_run_that_never_saw_it_and_other_folds_are_refused(
        tmp_path, models):
    """Distillation across runs (issue 87): a run with ``teach`` keeps each fold model's probabilities of every
    training text; a smaller model's run given it as ``teacher_dir`` learns fold k from fold k's teacher,
    reports its CV beside its teacher's on the same folds and its test-prediction seconds beside the teacher's;
    a student whose folds are not the teacher's (another seed) is refused before any training, naming both."""
    import pandas as pd
    folder = textsets.write_competition(tmp_path / "comp", 240, 48, seed=0)  # one competition: only the seed differs
    teacher_out, teacher = _run(tmp_path, {"smoke": True, "data_dir": str(folder), "folds": 3, "teach": True})
    oof = pd.read_parquet(teacher_out / "oof.parquet")
    for k in range(3):  # fold k's file is fold k's model: on its own validation rows, the OOF predictions
        own = pd.read_parquet(next((teacher_out / "folds").glob(f"*/labelled_fold{k}.parquet")))
        val = oof[oof["fold"] == k].merge(own, on=["id", "step"], suffixes=("", "_fold"))
        assert len(val) == (oof["fold"] == k).sum() > 0
        assert np.array_equal(val["transformer"], val["transformer_fold"])
        assert own["id"].nunique() == 240  # and every training text, which the student of fold k learns from
    small = textsets.write_standin_model(tmp_path / "small", "bert", 0, hidden=32, layers=1)
    student_params = {"smoke": True, "data_dir": str(folder), "folds": 3, "model_dir": str(small), "lr": 2e-3,
                      "head_lr": 2e-3, "teacher_dir": str(teacher_out)}
    student_out, student = _run(tmp_path, student_params)
    assert student["scores"]["teacher"] == pytest.approx(teacher["scores"]["transformer"])  # same folds and rows
    assert any("taught" in line["result"] for line in student["summary"])
    executed = (student_out / "text_classification.ipynb").read_text()
    assert "by the teacher (transformer@" in executed and student["test_predict_s"] > 0
    plan = student["rerun_plan"]  # the rerun predicts the hidden test with the student, its teacher's time beside it
    assert plan["units"] == [] and plan["fixed_s"] == pytest.approx(student["test_predict_s"], abs=1e-3)
    [(name, seconds)] = plan["beside"].items()
    assert name.startswith("its teacher (transformer@")
    assert seconds == pytest.approx(teacher["test_predict_s"], abs=1e-3)
    assert teacher["rerun_plan"]["beside"] == {} and "the scoring rerun will predict the hidden test" in executed
    with pytest.raises(Exception, match=r"folds are not 'this model''s \(\d+ of 240 rows in another fold\)"):
        _run(tmp_path, {**student_params, "seed": 1})
    runs = [p for p in (tmp_path / "text_classification").iterdir() if p.name != "latest"]
    refused = next(p for p in runs if p not in (teacher_out, student_out))
    assert len(runs) == 3 and not list(refused.rglob("step-*"))  # refused before any training


@pytest.mark.slow
def test_the_llm_engine_predicts_the_answer_token_folds_as_the_notebooks_own_loop(tmp_path, models):
    """``engine="hf"`` (issue 85): each fold's finished LoRA adapters merged into the base, saved (in fp32: a CPU's
    engine computes in it) and served by ``kk.llmengine`` (shards, units) predict the test texts as the notebook's
    loop does with the same fold models, within 1e-4, each fold's shards named by its fold and backend. A sequence
    head is refused before any training: the engine reads answer tokens."""
    import pandas as pd
    params = {"smoke": True, "folds": 2, "model_dir": str(models["llama"]), "head": "answer_token", "prompt": PROMPT,
              "answer_tokens": "no,yes", "lora_r": 4, "lr": 1e-2}
    loop_out, _ = _run(tmp_path, params)
    engine_out, engined = _run(tmp_path, {**params, "engine": "hf"})
    loop, served = (pd.read_parquet(out / "test.parquet") for out in (loop_out, engine_out))
    assert loop["id"].tolist() == served["id"].tolist() and len(loop) > 0
    differences = np.abs(loop["transformer"].to_numpy() - served["transformer"].to_numpy())
    # 3.0e-5 exported in fp16, under 1e-6 in fp32 as a CPU's engine gets it (0.13 with the base's weights alone)
    assert differences.max() < 1e-4 and loop["transformer"].std() > 1e-3, differences.max()  # not a constant either
    shards = {name: value["backend"] for name, value in engined.items() if name.startswith("llm_test-")}
    assert sorted(shards) == ["llm_test-text-fold0", "llm_test-text-fold1"] and set(shards.values()) == {"hf"}
    with pytest.raises(Exception, match=r"engine='hf' serves a decoder read through its answer tokens"):
        _run(tmp_path, {"smoke": True, "engine": "hf"})


@pytest.mark.parametrize("template", ["{text}", PROMPT])
def test_an_llm_engine_given_the_prompts_reads_the_ids_the_notebooks_loop_reads(models, template):
    """``kk.prompts.as_read``'s prompts tokenized again, as an LLM engine does for itself, are the loop's ids for all
    three stand-ins' tokenizers: texts only the tokenizer's truncation cut (``{text}``) are cut as strings too."""
    texts = [" ".join([t] * 4) for t, _ in textsets.texts(200, seed=2)]  # every one past max_length
    for arch in ("bert", "llama", "qwen"):
        tokenizer = kk.text.load_tokenizer(models[arch])
        data = kk.text.TokenizedTexts(tokenizer, texts, 24, template=template)
        assert all(len(ids) == 24 for ids in data.ids)
        assert tokenizer(kk.prompts.as_read(tokenizer, data))["input_ids"] == data.ids, arch


@pytest.mark.parametrize("options, says", [
    ({"engine": "vllm", "head": "sequence"}, "engine='vllm' serves a decoder read through its answer tokens"),
    ({"engine": "hf", "head": "answer_token", "predict_precision": "int8"}, "predict_precision='int8' quantises"),
    ({"engine": "auto", "head": "answer_token", "load_in_4bit": True}, "load_in_4bit=True holds the base in 4 bits"),
    ({"engine": "VLLM", "head": "answer_token"}, "engine='VLLM': one of loop, hf, vllm, auto")])
def test_an_engine_the_run_cannot_serve_is_refused_naming_what_to_set(options, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        kk.text.refuse(options.get("load_in_4bit", False), "ddp", torch.device("cpu"), 0, 1, 8,
                       **{k: v for k, v in options.items() if k != "load_in_4bit"})
    kk.text.refuse(False, "ddp", torch.device("cpu"), 0, 1, 8, engine="vllm", head="answer_token")  # it can
