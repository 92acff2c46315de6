"""A unit's identity is what its code reads: the parameters found in its code and, through the
notebook's values, in the cells that made them; only what ran before the unit was made."""
import linecache

import pytest

from kagglekit.state.reads import parameters_read, trace

PARAMETERS = ["text_column", "max_length", "lr", "seed", "model_dir", "trials", "unused", "epochs"]

CELLS = [
    '''text_column = "text"
max_length = 64
lr = 0.1
seed = 0
model_dir = ""
trials = 3
unused = 1
epochs = 2
''',
    '''class Run:
    config = {"epochs": 2}


run = Run()


def tokenized(frame):
    """Reads text_column and max_length: a unit training on its output reads both."""
    return [t[:max_length] for t in frame[text_column]]


frame = {"text": ["abc"], "other": ["x"]}
train_set = tokenized(frame)
if model_dir:
    path = model_dir
else:
    path = "built-in"
params = {"lr": lr}  # the defaults
''',
    '''def build():
    return path


def train(fold):
    seed = 1  # a local of that name is not the parameter
    return train_set, build(), run.config["epochs"], seed


def objective():
    return params["lr"]


def search():
    return parameters_read(objective, PARAMETERS)


found_in_search = search()
params = {"found": search(), "trials": trials}  # bound after search() returns: not what objective reads yet
log = []
for round_ in range(2):
    log.append(parameters_read(lambda: params, PARAMETERS))
    later = unused
''']


def _run_cell(namespace: dict, cell: str) -> None:
    """A cell run as IPython runs one: compiled under a file name linecache knows, kept in ``In``."""
    name = f"<ipython-input-{len(namespace['In'])}-test>"
    linecache.cache[name] = (len(cell), None, cell.splitlines(True), name)
    namespace["In"].append(cell)
    exec(compile(cell, name, "exec"), namespace)


def _notebook() -> dict:
    namespace = {"parameters_read": parameters_read, "PARAMETERS": PARAMETERS, "In": [""]}
    for cell in CELLS:
        _run_cell(namespace, cell)
    return namespace


@pytest.fixture
def notebook():
    return _notebook()


def test_a_parameter_that_made_a_value_the_code_uses_is_read_through_it(notebook):
    found = parameters_read(notebook["train"], PARAMETERS)
    assert found == {"text_column": "train -> train_set -> tokenized -> text_column",
                     "max_length": "train -> train_set -> tokenized -> max_length",
                     "model_dir": "train -> build -> path -> model_dir",
                     "epochs": "train -> run.config"}
    assert "seed" not in found  # train's own local


def test_only_what_ran_before_the_unit_counts(notebook):
    """search() runs inside the statement that rebinds params: the new value (the searches' results
    and the trial count) is not what objective reads then; after that statement, it is."""
    assert notebook["found_in_search"] == {"lr": "objective -> params -> lr"}
    first, second = notebook["log"]
    assert first == second == {"lr": "<lambda> -> params -> lr", "trials": "<lambda> -> params -> trials"}


def test_run_config_as_a_whole_is_every_parameter(notebook):
    _run_cell(notebook, "def everything():\n    return dict(run.config)\n")
    assert set(parameters_read(notebook["everything"], PARAMETERS)) == set(PARAMETERS)


def test_a_value_of_an_opaque_type_is_not_followed(notebook):
    """The run context: a cell calling run.log(...) inside `if predict_only:` does not make every
    unit that uses run depend on predict_only."""
    _run_cell(notebook, "if unused:\n    run.log = print\n")  # changes run, under a parameter's condition
    _run_cell(notebook, "def uses_run():\n    return run\n")
    assert parameters_read(notebook["uses_run"], PARAMETERS) == {"unused": "uses_run -> run -> unused"}
    assert parameters_read(notebook["uses_run"], PARAMETERS, opaque=(notebook["Run"],)) == {}


def test_the_statements_that_made_what_the_code_reads_are_traced_in_the_order_they_ran(notebook):
    """Their source, as ast writes it, is in the unit's key (tests/test_unit.py): the cells that made
    train_set and path, and not the parameters cell (its values are in the key by name) nor cells
    train never reaches (params). A function bound by an assignment is followed to it too."""
    statements = trace(notebook["train"], PARAMETERS, opaque=(notebook["Run"],)).statements
    assert statements == ("frame = {'text': ['abc'], 'other': ['x']}", "train_set = tokenized(frame)",
                          "if model_dir:\n    path = model_dir\nelse:\n    path = 'built-in'")
    _run_cell(notebook, "import functools\nCUT = 2\nshort = functools.partial(str.__getitem__)\n"
                        "short = functools.partial(short, slice(CUT))\n\ndef head():\n    return short('abc')\n")
    assert trace(notebook["head"], PARAMETERS).statements == (
        "CUT = 2", "short = functools.partial(str.__getitem__)", "short = functools.partial(short, slice(CUT))")
