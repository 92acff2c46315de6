"""A stand-in ``kaggle_evaluation`` package in an inference-server competition's data folder.

Written from the public API shape of the packages those competitions ship (Jane Street 2024's
``jane_street_inference_server.JSInferenceServer``, Mitsui 2025's ``mitsui_gateway``, NFL Big
Data Bowl 2026's ``nfl_gateway``; their ``core/templates.py``, ``core/base_gateway.py`` and
``core/relay.py``): the notebook imports ``kaggle_evaluation.<name>_inference_server`` from the
attached competition folder, wraps ``predict`` in its ``InferenceServer``, and calls ``serve()``
when ``KAGGLE_IS_COMPETITION_RERUN`` is set, ``run_local_gateway(data_paths)`` otherwise.

What the stand-in keeps of the real one:
- ``GatewayRuntimeErrorType`` with the real members and ``GatewayRuntimeError(type, details)``;
- the start-up limit (``relay.STARTUP_LIMIT_SECONDS`` = 15 minutes from the notebook's start to
  a served ``predict``; past it: ``SERVER_NEVER_STARTED``);
- a deadline per batch after the first (``set_response_timeout_seconds``; past it:
  ``GRPC_DEADLINE_EXCEEDED``, which fails the whole submission);
- ``competition_agnostic_validation``: one prediction per row id of the batch, else
  ``INVALID_SUBMISSION``; batches of test rows in time order, one date at a time.
What it leaves out: gRPC between two containers (the gateway calls the endpoint in process) and
file sharing. ``KAGGLE_EVALUATION_STARTUP_LIMIT_S`` / ``KAGGLE_EVALUATION_DEADLINE_S`` shorten
the limits for tests; the real package has no such switch.
"""
from __future__ import annotations

from pathlib import Path

PACKAGE = "kaggle_evaluation"

BASE_GATEWAY = '''"""Stand-in of kaggle_evaluation.core.base_gateway (kagglekit.tools.evalstandin)."""
import enum
import os
import time

import pandas as pd

IS_RERUN = os.getenv("KAGGLE_IS_COMPETITION_RERUN") is not None


class GatewayRuntimeErrorType(enum.Enum):
    UNSPECIFIED = 0
    SERVER_NEVER_STARTED = 1
    SERVER_CONNECTION_FAILED = 2
    SERVER_RAISED_EXCEPTION = 3
    SERVER_MISSING_ENDPOINT = 4
    GATEWAY_RAISED_EXCEPTION = 5
    INVALID_SUBMISSION = 6
    GRPC_DEADLINE_EXCEEDED = 7


class GatewayRuntimeError(Exception):
    def __init__(self, error_type, error_details=None):
        super().__init__(f"{error_type.name}: {error_details}")
        self.error_type, self.error_details = error_type, error_details


class BaseGateway:
    def __init__(self, data_paths=None, file_share_dir=None, target_column_name=None, row_id_column_name=None):
        self.data_paths, self.endpoint = data_paths, None
        self.target_column_name, self.row_id_column_name = target_column_name, row_id_column_name
        self.timeout_seconds = None

    def set_response_timeout_seconds(self, timeout_seconds):
        self.timeout_seconds = float(os.getenv("KAGGLE_EVALUATION_DEADLINE_S", timeout_seconds))

    def predict(self, *args):
        started = time.monotonic()
        try:
            answer = self.endpoint(*args)
        except Exception as err:
            raise GatewayRuntimeError(GatewayRuntimeErrorType.SERVER_RAISED_EXCEPTION, repr(err)) from err
        took = time.monotonic() - started
        if self.data_batch_counter > 0 and self.timeout_seconds is not None and took > self.timeout_seconds:
            raise GatewayRuntimeError(GatewayRuntimeErrorType.GRPC_DEADLINE_EXCEEDED,
                                      f"batch {self.data_batch_counter} answered after {took:.2f} s; "
                                      f"the deadline is {self.timeout_seconds:g} s")
        return answer

    def get_all_predictions(self):
        predictions, row_ids = [], []
        self.data_batch_counter = 0
        for data_batch, ids in self.generate_data_batches():
            answer = self.predict(*data_batch)
            self.competition_agnostic_validation(answer, ids)
            predictions.append(answer)
            row_ids.append(ids)
            self.data_batch_counter += 1
        return predictions, row_ids

    def competition_agnostic_validation(self, prediction_batch, row_ids):
        if prediction_batch is None:
            raise GatewayRuntimeError(GatewayRuntimeErrorType.INVALID_SUBMISSION, "No prediction received")
        if not isinstance(prediction_batch, (pd.DataFrame, pd.Series)):
            raise GatewayRuntimeError(GatewayRuntimeErrorType.INVALID_SUBMISSION,
                                      f"Invalid prediction data type, received: {type(prediction_batch)}")
        if len(prediction_batch) != len(row_ids):
            raise GatewayRuntimeError(GatewayRuntimeErrorType.INVALID_SUBMISSION,
                                      f"Invalid predictions: expected {len(row_ids)} rows but received "
                                      f"{len(prediction_batch)}")

    def run(self):
        self.unpack_data_paths()
        predictions, row_ids = self.get_all_predictions()
        self.write_submission(predictions, row_ids)
'''

TEMPLATES = '''"""Stand-in of kaggle_evaluation.core.templates (kagglekit.tools.evalstandin)."""
import os
import warnings
from pathlib import Path

from kaggle_evaluation.core.base_gateway import (BaseGateway, GatewayRuntimeError,  # noqa: F401
                                                GatewayRuntimeErrorType, IS_RERUN)

STARTUP_LIMIT_SECONDS = 60 * 15


def _process_age():
    ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    return float(Path("/proc/uptime").read_text().split()[0]) - ticks / os.sysconf("SC_CLK_TCK")


class Gateway(BaseGateway):
    def unpack_data_paths(self):
        raise NotImplementedError

    def generate_data_batches(self):
        raise NotImplementedError


class InferenceServer:
    def __init__(self, *endpoint_listeners):
        self.endpoint_listeners = endpoint_listeners

    def _run(self, data_paths):
        gateway = self._get_gateway_for_test(data_paths)
        gateway.endpoint = self.endpoint_listeners[0]
        gateway.run()

    def serve(self):
        # The scoring rerun's gateway waits STARTUP_LIMIT_SECONDS for the server, then fails.
        limit = float(os.getenv("KAGGLE_EVALUATION_STARTUP_LIMIT_S", STARTUP_LIMIT_SECONDS))
        age = _process_age()
        if age > limit:
            raise GatewayRuntimeError(GatewayRuntimeErrorType.SERVER_NEVER_STARTED,
                                      f"the inference server was not serving {limit:g} s after the notebook "
                                      f"started ({age:.0f} s)")
        self._run(None)  # the real one blocks while the gateway's container sends the hidden test set

    def run_local_gateway(self, data_paths=None, file_share_dir=None, *args, **kwargs):
        if _process_age() > STARTUP_LIMIT_SECONDS:  # as the real one: a warning here, a failure in the rerun
            warnings.warn("this notebook took more than 15 minutes to reach the inference server: in the "
                          "scoring rerun serve() must be reached within that (load slow models in the first "
                          "predict call)")
        self._run(data_paths)
'''

FORECAST_GATEWAY = '''"""The stand-in competition's gateway: test rows one date at a time (tools.evalstandin)."""
import os
from pathlib import Path

import pandas as pd

from kaggle_evaluation.core.templates import Gateway

HERE = Path(__file__).resolve().parents[1]


ROW_ID, TIME, TARGET = {row_id!r}, {time!r}, {target!r}


class ForecastGateway(Gateway):
    def __init__(self, data_paths=None):
        super().__init__(data_paths, target_column_name=TARGET, row_id_column_name=ROW_ID)
        self.set_response_timeout_seconds(60)

    def unpack_data_paths(self):
        self.test_path = Path(self.data_paths[0]) if self.data_paths else HERE / "test.csv"

    def generate_data_batches(self):
        test = pd.read_csv(self.test_path)
        for _, batch in test.groupby(TIME, sort=True):
            yield (batch.reset_index(drop=True),), batch[ROW_ID].reset_index(drop=True)

    def write_submission(self, predictions, row_ids):
        frame = pd.DataFrame({{ROW_ID: pd.concat(row_ids, ignore_index=True),
                              TARGET: pd.concat([pd.Series(p[TARGET] if isinstance(p, pd.DataFrame) else p)
                                                 for p in predictions], ignore_index=True)}})
        frame.to_csv(Path(os.getenv("KAGGLEKIT_OUTPUT", ".")) / "submission.csv", index=False)
'''

SERVER = '''"""The stand-in competition's inference server (kagglekit.tools.evalstandin)."""
import kaggle_evaluation.core.templates
from kaggle_evaluation.forecast_gateway import ForecastGateway


class ForecastInferenceServer(kaggle_evaluation.core.templates.InferenceServer):
    def _get_gateway_for_test(self, data_paths=None, file_share_dir=None):
        return ForecastGateway(data_paths)
'''


def write(folder: Path, row_id: str = "row_id", time: str = "date", target: str = "target") -> Path:
    """``folder/kaggle_evaluation/``: the stand-in package, as a competition's data carries it;
    its gateway sends test.csv's rows one ``time`` at a time and writes ``row_id,target``."""
    package = Path(folder) / PACKAGE
    (package / "core").mkdir(parents=True, exist_ok=True)
    files = {"__init__.py": "", "core/__init__.py": "", "core/base_gateway.py": BASE_GATEWAY,
             "core/templates.py": TEMPLATES,
             "forecast_gateway.py": FORECAST_GATEWAY.format(row_id=row_id, time=time, target=target),
             "forecast_inference_server.py": SERVER}
    for name, text in files.items():
        (package / name).write_text(text)
    return package
