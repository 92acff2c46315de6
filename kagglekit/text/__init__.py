"""Text and LLMs: text competitions and their stand-ins (``textsets``, ``translation``,
``manpages``), encoders and LLMs fine-tuned as classifiers (``classifier``, ``kk.text``; the pooling a
sentence encoder was trained with: ``pooledhead``; the answer-token head: ``answerhead``; prompts:
``prompts``), the frozen-feature probe (``textprobe``), a student of a teacher run (``textstudent``),
the test texts from the finished folds by the notebook's loop or the LLM engine (``testpredict``),
supervised fine-tuning of a causal LM (``sft``) and generation scores (``textscore``). The LLM engine
itself is the ``llm`` floor. A room: it imports the floors, never another room.
"""
from typing import TYPE_CHECKING

from ..readers.face import forward

if TYPE_CHECKING:  # the reader's names, as __getattr__ hands them on
    from .classifier import *  # noqa: F403

__getattr__ = forward(__name__, "classifier")
