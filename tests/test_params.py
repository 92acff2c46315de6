from pathlib import Path

import pytest

from kagglekit import params
from kagglekit.run import contract
from kagglekit.run.params import ParameterError

PARAMS_CELL = 'epochs = 8  # passes\nlr = 3e-3\nsmoke = False\ndata_dir = ""\nname: str = "x"\n'


def test_declared_and_injected_are_read_from_the_history():
    history = ["", "import kagglekit as kk", PARAMS_CELL, "# Parameters\nepochs = 2\nsmoke = True\n",
               "run = kk.start(globals(), 'nb')"]
    declared, injected = params.from_history(history)
    assert declared == {"epochs": 8, "lr": 3e-3, "smoke": False, "data_dir": "", "name": "x"}
    assert injected == {"epochs": 2, "smoke": True}


def test_without_injection_the_parameters_cell_is_the_last_pure_assignment_cell():
    history = ["", "import torch", PARAMS_CELL, "run = start(globals())"]
    assert params.from_history(history)[0]["epochs"] == 8


def test_a_typo_is_named_with_a_suggestion():
    with pytest.raises(ParameterError, match=r"unknown parameter 'epcohs' \(did you mean 'epochs'\?\)"):
        params.check("epochs = 8\nlr = 0.1\n", {"epcohs": 3})


@pytest.mark.parametrize("default,value,ok", [
    (8, 3, True), (8, 3.5, False), (8, True, False), (0.1, 1, True), (False, 0, False),
    ('""', "/data", True), ('""', 3, False), (None, "anything", True)])
def test_types_follow_the_defaults(default, value, ok):
    if ok:
        params.check(f"p = {default}\n", {"p": value})
    else:
        with pytest.raises(ParameterError, match="parameter 'p'"):
            params.check(f"p = {default}\n", {"p": value})


def test_validate_returns_values_and_widens_ints_for_float_parameters():
    ns = {"In": ["", PARAMS_CELL, "# Parameters\nlr = 1\n"], "epochs": 8, "lr": 1,
          "smoke": False, "data_dir": "", "name": "x"}
    values = params.validate(ns)
    assert values["lr"] == 1.0 and isinstance(ns["lr"], float)


CHOICES_CELL = ('conv = "gcn"  # graph convolution: gcn (Kipf & Welling) | sage (GraphSAGE, mean aggregation)\n'
                'metric = "map@3"  # the competition\'s: auc | logloss | map@3\n'
                'graphs = "off"  # [run] off | auto | strict: replay as CUDA graphs\n'
                'note = "a"  # either a | b, as prose: the default is not among its first words\n'
                'name = "x"  # free text\n')


def test_choices_are_read_from_the_parameters_comments():
    assert params.choices(CHOICES_CELL) == {"conv": ["gcn", "sage"], "metric": ["auc", "logloss", "map@3"],
                                            "graphs": ["off", "auto", "strict"]}


def test_a_value_outside_its_declared_choices_is_refused_with_the_nearest_one():
    params.check(CHOICES_CELL, {"conv": "sage", "metric": "logloss", "name": "anything", "note": "c"})
    with pytest.raises(ParameterError, match=r"'conv' = 'sag' is not one of its choices \(did you mean "
                                             r"'sage'\? choose from gcn \| sage\)"):
        params.check(CHOICES_CELL, {"conv": "sag"})
    with pytest.raises(ParameterError, match=r"'metric' = 'AUC' is not one of its choices \(did you mean 'auc'\?"):
        params.check(CHOICES_CELL, {"metric": "AUC"})  # another case: said, not taken


CONTRACT_CELL = (
    'folds = 5  # [2, inf): K-fold cross-validation\n'
    'share = 0.5  # (0, 1]: the share\n'
    'flips = 0  # [0, 3]: test-time flips\n'
    'classes = 4  # 4 | 2: classes of the built-in task\n'
    'models = "lstm,mlp"  # comma-separated: lstm | transformer | mlp\n'
    'fanouts = "10,5"  # comma-separated integers in [1, inf): one per layer\n'
    'time_column = "time"  # the time stamps\n'
    'table = ""  # the table (empty: found)\n'
    'note = "x"  # anything, empty too\n'
    'epochs = 3  # [run] [1, inf): passes\n')


@pytest.mark.parametrize("given,said", [
    ({"folds": 1}, "'folds' = 1 is out of its range [2, inf)"),
    ({"share": 0.0}, "'share' = 0.0 is out of its range (0, 1]"),
    ({"share": 1.5}, "'share' = 1.5 is out of its range (0, 1]"),
    ({"flips": 4}, "'flips' = 4 is out of its range [0, 3]"),
    ({"classes": 3}, "'classes' = 3 is not one of its choices (choose from 4 | 2)"),
    ({"models": "lstm,transfomer"}, "'models' = 'lstm,transfomer' names 'transfomer', not one of its members "
                                    "(did you mean 'transformer'? choose from lstm | transformer | mlp)"),
    ({"models": ""}, "'models' is empty: it is required (its default: 'lstm,mlp')"),
    ({"fanouts": "10,x"}, "'fanouts' = '10,x' holds 'x', not an integer"),
    ({"fanouts": "10,0"}, "'fanouts' = '10,0' holds 0, out of its range [1, inf)"),
    ({"time_column": " "}, "'time_column' is empty: it is required (its default: 'time')"),
    ({"epochs": 0}, "'epochs' = 0 is out of its range [1, inf)")])
def test_what_a_parameters_comment_declares_is_checked(given, said):
    with pytest.raises(ParameterError) as refused:
        params.check(CONTRACT_CELL, given)
    assert str(refused.value) == f"parameter {said}. {contract.FIX}"


def test_values_within_their_declarations_pass_and_an_empty_optional_text_is_fine():
    params.check(CONTRACT_CELL, {"folds": 2, "share": 1.0, "flips": 3, "classes": 2, "models": "mlp",
                                 "fanouts": "3", "table": "", "note": "", "epochs": 1})
    assert params.marked_run_control(CONTRACT_CELL) == {"epochs"}


def test_the_kernel_refuses_an_undeclared_choice_before_the_run_starts():
    ns = {"In": ["", CHOICES_CELL, "# Parameters\ngraphs = 'always'\n"], **params.assignments(CHOICES_CELL)}
    ns["graphs"] = "always"
    with pytest.raises(ParameterError, match="'graphs' = 'always'.*off \\| auto \\| strict"):
        params.validate(ns)


@pytest.mark.parametrize("notebook", sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "notebooks").glob(
    "*.ipynb")))
def test_papermill_reads_every_parameter_the_kit_declares(notebook):
    """papermill skips a parameter line holding a second "=" (in its comment, say), and then warns "Passed unknown
    parameter" for every value a user gives it: each notebook's parameters as papermill reads them are the kit's."""
    import papermill

    from kagglekit.tools.notebook_runner import parameters_source
    path = Path(__file__).resolve().parents[1] / "notebooks" / f"{notebook}.ipynb"
    assert set(papermill.inspect_notebook(str(path))) == set(contract.declarations(parameters_source(path)))
