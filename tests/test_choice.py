"""The submission's choice: the best candidate on honest CV in the metric's direction, a tie to
the one named first, NaN never chosen; the headline judges it against the next best."""
import math

import numpy as np
import pytest

from kagglekit.score import hillclimb, scoring
from kagglekit.score.choice import Candidate, choose


def test_the_best_on_cv_is_chosen_in_the_metric_s_direction_and_a_tie_goes_to_the_first_named():
    up = choose({"tfidf": Candidate(0.88), "transformer": Candidate(0.30), "blend": Candidate(0.88)}, "accuracy", True)
    assert (up.name, up.runner_up) == ("tfidf", "blend")
    assert up.reason == "submitting tfidf: CV accuracy 0.88, the best of 3 (transformer 0.3, blend 0.88)"
    down = choose({"single": Candidate(0.52), "climb": Candidate(0.50), "stack": Candidate(math.nan)}, "rmse", False)
    assert (down.name, down.runner_up, down.score) == ("climb", "single", 0.50)
    line = down.headline()
    assert line["passed"] is True and line["baseline"] == 0.52 and line["vs"] == "next best: single"
    assert up.headline()["passed"] is True  # a tie with the next best is not a failure
    with pytest.raises(ValueError, match="every candidate's CV auc is NaN"):
        choose({"a": Candidate(math.nan)}, "auc", True)


def test_a_holdout_s_blend_is_scored_on_rows_its_weights_never_saw():
    """One held-out fold has no other fold to fit the climb on: its rows are split in two, each
    half predicted by the climb fitted on the other, so every held-out row gets an honest blend."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 400)
    oof = {"good": np.clip(y * 0.6 + rng.random(400) * 0.4, 0, 1), "noise": rng.random(400)}
    fold_of = np.full(400, -1)
    fold_of[100:] = 0  # a holdout: rows 100-399 held out, the first 100 trained on
    metric = scoring.get("auc", 2)
    out, climbs = hillclimb.cross_validated({m: v[fold_of >= 0] for m, v in oof.items()}, y[fold_of >= 0],
                                            fold_of[fold_of >= 0], metric)
    assert len(climbs) == 2 and not np.isnan(out).any() and len(out) == 300
    assert metric.score(y[100:], out) > 0.9


# ---- the scoring rerun's plan --------------------------------------------------------------------
def test_a_rerun_plan_over_the_limit_is_refused_by_make_submit_naming_the_unit_past_it(tmp_path):
    """Three folds measured at 20 min each on 1,000 rows, after half an hour of prediction: trained
    in the rerun on 10,000 rows each, the third would end past 9 h less Kaggle's margin, and make
    submit's check says so by name; on 2,000 rows each the same version is accepted."""
    import json

    from kagglekit.submit import rerunplan
    from kagglekit.tools.publish.submit import submission_problem
    folder = tmp_path / "v3"
    folder.mkdir()
    (folder / "submission.csv").write_text("row_id,rule_violation\n1,0.5\n")
    for rows, expected in ((10000, "text-fold2 (about 3.33 h on 10,000 rows) would end at 10.50 h"), (2000, "")):
        plan = rerunplan.plan([rerunplan.Planned(f"text-fold{k}", 1200.0, 1000, rows) for k in range(3)],
                              hours=9.0, fixed_s=1800)
        metrics = {"rerun_plan": plan, "chain": {"fit": "trained"},  # it trained, and plans to train again
                   "submission": {"file": "submission.csv", "columns": ["row_id", "rule_violation"]}}
        (folder / "metrics.json").write_text(json.dumps(metrics))
        _, problem = submission_problem(folder, code=True)
        assert (expected in problem and "of the 9 h limit" in problem) if expected else problem == "", problem
    assert "the scoring rerun will train text-fold0, text-fold1, text-fold2" in rerunplan.describe(plan)
    del metrics["rerun_plan"]  # no plan: a version that trained is refused as before
    (folder / "metrics.json").write_text(json.dumps(metrics))
    assert "it trained (fit)" in submission_problem(folder, code=True)[1]


def test_a_plan_of_predictions_alone_licenses_no_training_and_names_the_teacher_beside_it(tmp_path):
    """A student's kernel plans its prediction of the hidden test (no training there) with its teacher's
    time beside it: the version that trained is still refused as one that would train again, the version
    that trained nothing is accepted, and a prediction past the limit is refused by the plan, naming it."""
    import json

    from kagglekit.submit import rerunplan
    from kagglekit.tools.publish.submit import submission_problem
    folder = tmp_path / "v4"
    folder.mkdir()
    (folder / "submission.csv").write_text("row_id,rule_violation\n1,0.5\n")
    predicting = rerunplan.Planned("predict-test", 60.0, 1000, 100_000, trains=False)  # 100 minutes
    plan = rerunplan.plan([predicting], hours=9.0, beside={"its teacher (MiniLM)": 8.5 * 3600})

    def problem(plan: dict, chain: dict) -> str:
        metrics = {"rerun_plan": plan, "chain": chain,
                   "submission": {"file": "submission.csv", "columns": ["row_id", "rule_violation"]}}
        (folder / "metrics.json").write_text(json.dumps(metrics))
        return submission_problem(folder, code=True)[1]

    assert rerunplan.training(plan) == [] and plan["fits"]
    assert "it trained (fit)" in problem(plan, {"fit": "trained"})  # predictions in the plan: training still refused
    assert problem(plan, {"fit": "cached"}) == ""
    assert rerunplan.describe(plan) == ("the scoring rerun will predict the hidden test (1 model): about 1.67 h of "
                                        "the 9 h limit; its teacher (MiniLM) would take about 8.50 h")
    teacher_instead = rerunplan.plan([rerunplan.Planned("predict-test", 60.0, 1000, 600_000, trains=False)], hours=9.0)
    assert "predict-test (about 10.00 h on 600,000 rows) would end at 10.00 h" in problem(teacher_instead, {})
    old = {**plan, "units": [{k: v for k, v in u.items() if k != "trains"} for u in plan["units"]]}
    assert rerunplan.training(old) == ["predict-test"]  # a plan written before `trains`: every unit trained
