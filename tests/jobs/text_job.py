"""LoRA fine-tuning of a stand-in BERT through kk.fit, checkpointed at every step, adapters
only: killed with SIGKILL and rerun by tests/test_text.py.

argv: output folder, stand-in models folder, epochs, seconds to sleep per step, the file the
trained state (adapters and head) is written to."""
import sys
import time
from pathlib import Path

import torch

import kagglekit as kk

DECLARED = {"seed": 0, "force_retrain": False, "time_budget_s": 0.0, "precision": "auto", "data_dir": "",
            "epochs": 1}


def main(models: str, epochs: int, slow: float, out: str) -> None:
    run = kk.start({**DECLARED, "epochs": epochs}, "text_job", declared=dict(DECLARED), verbose=False)
    folder = kk.textsets.write_standin_model(Path(models), "bert")
    rows = kk.textsets.texts(96, seed=1)
    tokenizer = kk.text.load_tokenizer(folder)
    texts = kk.text.TokenizedTexts(tokenizer, [t for t, _ in rows], 48, [y for _, y in rows])
    torch.manual_seed(0)
    model, _ = kk.text.load_classifier(folder, 2, lora_r=4)
    loader = kk.make_loader(texts, 8, seed=0, num_workers=0, collate_fn=kk.text.collator(tokenizer),
                            lengths=texts.lengths)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)

    def loss_fn(m, batch):
        time.sleep(slow)  # room for the test to kill mid-epoch
        return m(**batch).loss
    config = {"base_model": kk.pretrained.base_identity(folder), "lora_r": 4}
    result = kk.fit(model, optimizer, loader, loss_fn, run=run, epochs=epochs,
                    checkpoints=run.checkpoints("lora", config=config, save_frozen=False, save_every_min=0.0),
                    progress=False)
    trained = {k: v for k, v in model.state_dict().items() if "lora_" in k or "classifier" in k}
    torch.save({"state": trained, "steps": result.steps, "this_session": result.steps_this_session,
                "checkpoint": result.checkpoint}, out)
    print("DONE", result.steps, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4])
