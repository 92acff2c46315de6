"""A notebook's kernel on Unix sockets of its own, never on TCP ports.

jupyter_client picks free TCP ports for a kernel and closes them before the kernel binds them, so
kernels started side by side (the test workers', two `make run`s, the sandbox's versions beside
them) can pick the same port, and one dies with "ZMQError: Address already in use"
(papermill#511; seen in this suite on 2026-12-07). A kernel on socket files in a folder of its
own shares nothing. ``manager`` is what `make run` hands papermill; ``python -m
kagglekit.tools.kernelsockets NOTEBOOK OUTPUT --kernel NAME --cwd FOLDER`` is papermill's own
command with it (the sandbox's).
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

SOCKET_PATH_MAX = 100  # a Unix socket's path holds 104 bytes on macOS, 108 on Linux; the kernel adds "-<n>"


def manager(folder: Path, kernel_name: str = "python3"):
    """A kernel manager whose kernel listens on ``folder``/kernel-<n>; TCP, as papermill's own, where
    ``folder`` is too deep for a socket's path."""
    from jupyter_client.manager import AsyncKernelManager
    sockets = str(Path(folder) / "kernel")
    if len(sockets) > SOCKET_PATH_MAX - 3:
        return AsyncKernelManager(kernel_name=kernel_name)
    return AsyncKernelManager(kernel_name=kernel_name, transport="ipc", ip=sockets)


def main(argv: list[str] | None = None) -> None:
    import papermill
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook")
    parser.add_argument("output")
    parser.add_argument("--kernel", required=True)
    parser.add_argument("--cwd", required=True)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kk-kernel-") as folder:
        papermill.execute_notebook(args.notebook, args.output, kernel_name=args.kernel, cwd=args.cwd,
                                   progress_bar=False, km=manager(Path(folder), args.kernel))


if __name__ == "__main__":
    main()
