"""Why is the GPU idle? Background NVML sampling, a step-time breakdown, a verdict.

- ``GPUSampler``: a daemon thread reading utilisation, memory, power and
  temperature of every GPU through NVML about twice a second. Without NVML or a
  GPU it says so in its summary instead of failing.
- ``StepTimer``: inside ``fit``, one optimizer step in ``every`` is timed phase by
  phase (waiting for the batch, host-to-device copy, forward + backward, optimizer
  step), with CUDA events on GPU and the wall clock on CPU; timing never
  synchronises the host with the GPU.
- ``diagnose``: input-bound, launch-bound, host-sync-bound, memory-bound or
  compute-bound, with the numbers behind the verdict and what to do about it.
"""
from __future__ import annotations

import statistics
import threading
import time

import torch

from . import memory

PHASES = ("data_wait", "h2d", "compute", "optimizer")


class GPUSampler:
    """Samples every visible GPU in a background thread (``with GPUSampler(): ...``)."""

    def __init__(self, interval_s: float = 0.5):
        self.interval_s = interval_s
        self.samples: list[dict] = []
        self.reason = ""
        self.busy_s = 0.0  # time spent inside NVML calls: the sampler's own cost
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handles: list = []
        self._started = 0.0

    def start(self) -> GPUSampler:
        try:
            import pynvml
            pynvml.nvmlInit()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                             for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception as err:  # noqa: BLE001 - no driver, no library, no GPU
            self.reason = f"no GPU monitoring: NVML unavailable ({type(err).__name__})"
            return self
        if not self._handles:
            self.reason = "no GPU monitoring: NVML sees no GPU"
            return self
        self._started = time.monotonic()
        thread = self._thread = threading.Thread(target=self._run, name="kagglekit-gpu-sampler", daemon=True)
        thread.start()
        return self

    def _read(self) -> None:
        import pynvml
        began = time.perf_counter()
        now = time.monotonic() - self._started
        for i, h in enumerate(self._handles):
            util = pynvml.nvmlDeviceGetUtilizationRates(h)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            self.samples.append({"t": round(now, 3), "gpu": i, "util": util.gpu,
                                 "mem_used_mb": mem.used / 2**20, "mem_total_mb": mem.total / 2**20,
                                 "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1000,
                                 "temp_c": pynvml.nvmlDeviceGetTemperature(h, 0)})
        self.busy_s += time.perf_counter() - began

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._read()
            except Exception as err:  # noqa: BLE001 - a sampler must never kill training
                self.reason = f"GPU sampling stopped: {type(err).__name__}: {err}"
                return

    def stop(self) -> GPUSampler:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            import pynvml
            pynvml.nvmlShutdown()
            self._thread = None
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def summary(self) -> dict:
        if not self.samples:
            never = self._started is None and not self.reason
            return {"available": False,
                    "reason": "not sampled (no GPU)" if never else self.reason or "no samples yet"}
        per_gpu = {}
        for g in sorted({s["gpu"] for s in self.samples}):
            rows = [s for s in self.samples if s["gpu"] == g]
            per_gpu[g] = {"util_mean": round(statistics.mean(r["util"] for r in rows), 1),
                          "mem_peak_mb": round(max(r["mem_used_mb"] for r in rows), 1),
                          "mem_total_mb": round(rows[0]["mem_total_mb"], 1),
                          "power_mean_w": round(statistics.mean(r["power_w"] for r in rows), 1)}
        wall = max(s["t"] for s in self.samples) or 1e-9
        return {"available": True, "gpus": per_gpu, "samples": len(self.samples),
                "util_mean": round(statistics.mean(g["util_mean"] for g in per_gpu.values()), 1),
                "sampler_overhead_pct": round(100 * self.busy_s / wall, 3)}


class NullTimer:
    """The timer of an unsampled step: marks cost one no-op call, no branch in the loop."""

    def mark(self, name: str) -> None:
        pass

    def record(self, step: int, samples: int) -> None:
        pass


NULL_TIMER = NullTimer()


class StepTimer:
    """Phase timings of one step in ``every`` (the rest run untimed; ``every`` 0: none).

    On GPU each mark records a CUDA event on the stream, so a phase's time is what
    the GPU saw (a copy or kernel still running counts where it ran, an idle GPU
    waiting for the next batch counts as data wait) and timing never blocks the
    host: events are read one sampled step later, when they have long completed.
    On CPU the marks are wall-clock times.
    """

    def __init__(self, device: torch.device, every: int = 25):
        self.device, self.every = torch.device(device), max(0, every)
        self.cuda = self.device.type == "cuda"
        self.records: list[dict] = []
        self._marks: dict = {}
        self._memory: dict = {}  # MB allocated by tensors at each mark (CUDA only)
        self._pending: list = []  # (row, events) waiting for their events to complete

    def sampled(self, step: int) -> bool:
        return self.every > 0 and step % self.every == 0

    def for_step(self, step: int):
        """This timer on a sampled step, the null timer on the others."""
        return self if self.sampled(step) else NULL_TIMER

    def mark(self, name: str) -> None:
        """Note the end of phase ``name`` (or "start") on a sampled step."""
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record(torch.cuda.current_stream(self.device))
            self._marks[name] = event
            self._memory[name] = torch.cuda.memory_allocated(self.device) / 2**20
        else:
            self._marks[name] = time.perf_counter()

    def record(self, step: int, samples: int) -> None:
        self._resolve()
        m, mem, self._marks, self._memory = self._marks, self._memory, {}, {}
        if not all(k in m for k in ("start", *PHASES)):
            return
        row = {"step": step, "samples": samples,
               "memory_mb": {p: mem[p] for p in PHASES if p in mem}}
        if self.cuda:
            self._pending.append((row, m))
        else:
            self.records.append({**row, **_phases(m, lambda a, b: b - a)})

    def _resolve(self) -> None:
        for row, events in self._pending:
            events["optimizer"].synchronize()  # recorded a sampled step ago: long done
            self.records.append({**row, **_phases(events, lambda a, b: a.elapsed_time(b) / 1000)})
        self._pending = []

    def summary(self) -> dict:
        self._resolve()
        if not self.records:
            return {"sampled_steps": 0}
        med = {p: statistics.median(r[p] for r in self.records) for p in (*PHASES, "total")}
        total = med["total"] or 1e-12
        return {"sampled_steps": len(self.records), "device": self.device.type,
                "clock": "cuda events" if self.cuda else "wall",
                "median_s": {k: round(v, 6) for k, v in med.items()},
                "fraction": {p: round(med[p] / total, 3) for p in PHASES},
                "samples_per_step": statistics.median(r["samples"] for r in self.records),
                **self._memory_summary()}

    def _memory_summary(self) -> dict:
        """Tensor memory after each phase (the most seen) and the allocator's totals."""
        rows = [r["memory_mb"] for r in self.records if r["memory_mb"]]
        if not rows:
            return {}
        after = {p: round(max(r[p] for r in rows), 1) for p in rows[0]}
        totals = memory.stats_mb(self.device)
        return {"memory_mb": {"allocated_after": after, "reserved": totals["reserved_mb"],
                              "peak": totals["peak_mb"]}}


def _phases(marks: dict, seconds) -> dict:
    """Each phase's duration from consecutive marks, and the step's total."""
    order = ["start", *PHASES]
    row = {p: seconds(marks[prev], marks[p]) for prev, p in zip(order, PHASES)}
    row["total"] = seconds(marks["start"], marks["optimizer"])
    return row


ADVICE = {
    "input-bound": "the GPU waits for batches: raise num_workers (make_loader does it from the CPU "
                   "count), keep pin_memory and persistent workers on, move decoding/augmentation "
                   "to the GPU, or cache preprocessed tensors",
    "launch-bound": "each step is many tiny kernels the CPU cannot launch fast enough: use a larger "
                    "batch, batch several cycles per step, fit(cuda_graphs='auto') (CUDA-graph replay "
                    "of forward and backward) or compile={'mode': 'reduce-overhead'}",
    "host-sync-bound": "the CPU blocks on the GPU or works between steps: remove per-step .item(), "
                       "print and .cpu() calls (log every N steps), move CPU work to a process pool",
    "memory-bound": "memory is nearly full (or ran out): lower precision (fp16/bf16), gradient "
                    "checkpointing (accel.checkpoint_blocks), a smaller batch with accumulation",
    "compute-bound": "the GPU is busy with real work: lower precision or a smaller model are what "
                     "is left; more GPUs through kk.launch",
    "cpu-only": "no GPU: the breakdown shows where the CPU time goes",
}
# On a CPU-only run the same verdicts, with advice about the CPU.
CPU_ADVICE = {
    "input-bound": "the training loop waits for batches: raise num_workers (make_loader does it "
                   "from the CPU count), keep persistent workers on, or cache preprocessed tensors",
    "memory-bound": "host memory is short (or ran out): a smaller batch with accumulation, "
                    "gradient checkpointing (accel.checkpoint_blocks), a smaller model",
}


def diagnose(breakdown: dict, gpu: dict | None = None, oom_count: int = 0) -> dict:
    """A verdict on why the GPU is idle, the numbers behind it and what to do.

    Args:
        breakdown: ``StepTimer.summary()`` (median phase times and fractions).
        gpu: ``GPUSampler.summary()``; None or unavailable on CPU.
        oom_count: out-of-memory back-offs during the run.
    """
    frac = breakdown.get("fraction", {})
    med = breakdown.get("median_s", {})
    step = med.get("total", 0.0)
    numbers = {"data_wait_pct": round(100 * frac.get("data_wait", 0), 1),
               "h2d_pct": round(100 * frac.get("h2d", 0), 1),
               "compute_pct": round(100 * (frac.get("compute", 0) + frac.get("optimizer", 0)), 1),
               "step_ms": round(1000 * step, 3)}
    has_gpu = bool(gpu and gpu.get("available"))
    if gpu and has_gpu:
        numbers["gpu_util_pct"] = gpu["util_mean"]
        mem = [g["mem_peak_mb"] / g["mem_total_mb"] for g in gpu["gpus"].values()]
        numbers["mem_peak_pct"] = round(100 * max(mem), 1)
    if frac.get("data_wait", 0) + frac.get("h2d", 0) >= 0.3:
        verdict = "input-bound"
    elif oom_count or numbers.get("mem_peak_pct", 0) >= 92:
        verdict = "memory-bound"
    elif not has_gpu:
        verdict = "cpu-only"
    elif numbers["gpu_util_pct"] >= 80:
        verdict = "compute-bound"
    elif step < 0.01:  # a short step yet an idle GPU: kernel launches dominate
        verdict = "launch-bound"
    else:
        verdict = "host-sync-bound"
    text = f"{verdict}: " + ", ".join(f"{k}={v}" for k, v in numbers.items())
    if not has_gpu:
        text += " (no GPU: GPU utilisation and memory not measured)"
    advice = ADVICE[verdict] if has_gpu else CPU_ADVICE.get(verdict, ADVICE[verdict])
    return {"verdict": verdict, "numbers": numbers, "advice": advice, "text": text,
            "device": "gpu" if has_gpu else "cpu"}
