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
