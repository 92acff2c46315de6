"""The typed face of kagglekit (written by kagglekit/tools/facestub.py; do not edit)."""
from .machine.version import __version__ as __version__

from . import audio as audio
from .audio import audiosynth as audiosynth
from .audio import birdnet as birdnet
from .audio import mel as mel
from . import graphs as graphs
from .graphs import graph as graph
from .graphs import graphsets as graphsets
from . import images as images
from .images import augment2d as augment2d
from .images import backbones as backbones
from .images import imagesets as imagesets
from .llm import hfbackend as hfbackend
from .llm import llmengine as llmengine
from .llm import llmexport as llmexport
from .llm import llmquant as llmquant
from .llm import llmshards as llmshards
from .llm import vllmbackend as vllmbackend
from .llm import vllmcheck as vllmcheck
from .llm import voting as voting
from .loop import accel as accel
from .loop import batchplan as batchplan
from .loop import batchsize as batchsize
from .loop import cudagraph as cudagraph
from .loop import durable as durable
from .loop import ema as ema
from .loop import epochs as epochs
from .loop import fallback as fallback
from .loop import fitoptions as fitoptions
from .loop import fitstate as fitstate
from .loop import guards as guards
from .loop import halving as halving
from .loop import memory as memory
from .loop import monitor as monitor
from .loop import probe as probe
from .loop import progress as progress
from .loop import restarts as restarts
from .loop import resuming as resuming
from .loop import scalerhealth as scalerhealth
from .loop import schedule as schedule
from .loop import step as step
from .loop import train as train
from .machine import ascard as ascard
from .machine import budget as budget
from .machine import cards as cards
from .machine import cpuhalf as cpuhalf
from .machine import display as display
from .machine import driver as driver
from .machine import emulate as emulate
from .machine import env as env
from .machine import gpus as gpus
from .machine import inputs as inputs
from .machine import int8 as int8
from .machine import packages as packages
from .machine import precision as precision
from .machine import signals as signals
from .machine import version as version
from .parallel import batches as batches
from .parallel import forked as forked
from .parallel import forkserver as forkserver
from .parallel import heartbeat as heartbeat
from .parallel import launcher as launcher
from .parallel import loaders as loaders
from .parallel import mapped as mapped
from .parallel import ranklog as ranklog
from .parallel import ranks as ranks
from .parallel import workers as workers
from .readers import csvfile as csvfile
from .readers import datasets as datasets
from .readers import decoding as decoding
from .readers import filecheck as filecheck
from .readers import labelsets as labelsets
from .readers import pretrained as pretrained
from .run import context as context
from .run import contract as contract
from .run import datadir as datadir
from .run import distill as distill
from .run import foldresults as foldresults
from .run import folds as folds
from .run import oofio as oofio
from .run import params as params
from .run import paths as paths
from .run import plots as plots
from .run import report as report
from .run import rounds as rounds
from .run import scratch as scratch
from .run import splitters as splitters
from .run import turns as turns
from .run import unit as unit
from .run import workpool as workpool
from .run import zoo as zoo
from .score import choice as choice
from .score import evaluate as evaluate
from .score import hillclimb as hillclimb
from .score import metrics as metrics
from .score import multilabel as multilabel
from .score import probabilities as probabilities
from .score import scoring as scoring
from .score import stacking as stacking
from .search import boosting as boosting
from .search import sizing as sizing
from .search import studyreport as studyreport
from .search import studystore as studystore
from .search import tune as tune
from .state import atomic as atomic
from .state import cache as cache
from .state import checkpoint as checkpoint
from .state import found as found
from .state import identity as identity
from .state import keys as keys
from .state import published as published
from .state import reads as reads
from .state import rng as rng
from .state import snapshot as snapshot
from .state import space as space
from . import studies as studies
from .studies import cycles as cycles
from .studies import figures as figures
from .submit import blend as blend
from .submit import export as export
from .submit import oofsources as oofsources
from .submit import rerunplan as rerunplan
from .submit import serving as serving
from .submit import submission as submission
from . import tables as tables
from .tables import competition as competition
from .tables import gbdt as gbdt
from .tables import models as models
from .tables import playground as playground
from .tables import timeseries as timeseries
from .tables import windows as windows
from . import text as text
from .text import answerhead as answerhead
from .text import manpages as manpages
from .text import pooledhead as pooledhead
from .text import prompts as prompts
from .text import sft as sft
from .text import testpredict as testpredict
from .text import textprobe as textprobe
from .text import textscore as textscore
from .text import textsets as textsets
from .text import textstudent as textstudent
from .text import translation as translation
from . import volumes as volumes
from .volumes import augment3d as augment3d
from .volumes import postprocess3d as postprocess3d
from .volumes import segment3d as segment3d
from .volumes import surfacescore as surfacescore
from .volumes import tiff as tiff
from .volumes import volumecache as volumecache

from .loop.ema import Ema as Ema
from .loop.fitoptions import Alone as Alone
from .loop.fitoptions import Monitor as Monitor
from .loop.fitoptions import Speed as Speed
from .loop.fitoptions import Stop as Stop
from .loop.fitstate import EarlyStopping as EarlyStopping
from .loop.fitstate import FitResult as FitResult
from .loop.train import fit as fit
from .loop.train import supervised as supervised
from .machine.budget import Budget as Budget
from .machine.display import headline as headline
from .machine.env import seed_everything as seed_everything
from .parallel.launcher import launch as launch
from .parallel.loaders import make_loader as make_loader
from .run.context import Run as Run
from .run.context import start as start
from .run.unit import Unfinished as Unfinished
from .state.checkpoint import CheckpointManager as CheckpointManager

__all__ = [
    "Alone",
    "Budget",
    "CheckpointManager",
    "EarlyStopping",
    "Ema",
    "FitResult",
    "Monitor",
    "Run",
    "Speed",
    "Stop",
    "Unfinished",
    "__version__",
    "accel",
    "answerhead",
    "ascard",
    "atomic",
    "audio",
    "audiosynth",
    "augment2d",
    "augment3d",
    "backbones",
    "batches",
    "batchplan",
    "batchsize",
    "birdnet",
    "blend",
    "boosting",
    "budget",
    "cache",
    "cards",
    "checkpoint",
    "choice",
    "competition",
    "context",
    "contract",
    "cpuhalf",
    "csvfile",
    "cudagraph",
    "cycles",
    "datadir",
    "datasets",
    "decoding",
    "display",
    "distill",
    "driver",
    "durable",
    "ema",
    "emulate",
    "env",
    "epochs",
    "evaluate",
    "export",
    "fallback",
    "figures",
    "filecheck",
    "fit",
    "fitoptions",
    "fitstate",
    "foldresults",
    "folds",
    "forked",
    "forkserver",
    "found",
    "gbdt",
    "gpus",
    "graph",
    "graphs",
    "graphsets",
    "guards",
    "halving",
    "headline",
    "heartbeat",
    "hfbackend",
    "hillclimb",
    "identity",
    "images",
    "imagesets",
    "inputs",
    "int8",
    "keys",
    "labelsets",
    "launch",
    "launcher",
    "llmengine",
    "llmexport",
    "llmquant",
    "llmshards",
    "loaders",
    "make_loader",
    "manpages",
    "mapped",
    "mel",
    "memory",
    "metrics",
    "models",
    "monitor",
    "multilabel",
    "oofio",
    "oofsources",
    "packages",
    "params",
    "paths",
    "playground",
    "plots",
    "pooledhead",
    "postprocess3d",
    "precision",
    "pretrained",
    "probabilities",
    "probe",
    "progress",
    "prompts",
    "published",
    "ranklog",
    "ranks",
    "reads",
    "report",
    "rerunplan",
    "restarts",
    "resuming",
    "rng",
    "rounds",
    "scalerhealth",
    "schedule",
    "scoring",
    "scratch",
    "seed_everything",
    "segment3d",
    "serving",
    "sft",
    "signals",
    "sizing",
    "snapshot",
    "space",
    "splitters",
    "stacking",
    "start",
    "step",
    "studies",
    "studyreport",
    "studystore",
    "submission",
    "supervised",
    "surfacescore",
    "tables",
    "testpredict",
    "text",
    "textprobe",
    "textscore",
    "textsets",
    "textstudent",
    "tiff",
    "timeseries",
    "train",
    "translation",
    "tune",
    "turns",
    "unit",
    "version",
    "vllmbackend",
    "vllmcheck",
    "volumecache",
    "volumes",
    "voting",
    "windows",
    "workers",
    "workpool",
    "zoo",
]
