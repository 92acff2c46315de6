import pytest

from kagglekit import params
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
        params.check({"epochs": 8, "lr": 0.1}, {"epcohs": 3})


@pytest.mark.parametrize("default,value,ok", [
    (8, 3, True), (8, 3.5, False), (8, True, False), (0.1, 1, True), (False, 0, False),
    ("", "/data", True), ("", 3, False), (None, "anything", True)])
def test_types_follow_the_defaults(default, value, ok):
    if ok:
        params.check({"p": default}, {"p": value})
    else:
        with pytest.raises(ParameterError, match="parameter 'p'"):
            params.check({"p": default}, {"p": value})


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
    declared, allowed = params.assignments(CHOICES_CELL), params.choices(CHOICES_CELL)
    params.check(declared, {"conv": "sage", "metric": "logloss", "name": "anything", "note": "c"}, allowed)
    with pytest.raises(ParameterError, match=r"'conv' = 'sag' is not one of its choices \(did you mean "
                                             r"'sage'\? choose from gcn \| sage\)"):
        params.check(declared, {"conv": "sag"}, allowed)


def test_the_kernel_refuses_an_undeclared_choice_before_the_run_starts():
    ns = {"In": ["", CHOICES_CELL, "# Parameters\ngraphs = 'always'\n"], **params.assignments(CHOICES_CELL)}
    ns["graphs"] = "always"
    with pytest.raises(ParameterError, match="'graphs' = 'always'.*off \\| auto \\| strict"):
        params.validate(ns)
