"""A notebook's kernel on Unix sockets of its own, never on TCP ports.

jupyter_client picks free TCP ports for a kernel and closes them before the kernel binds them, so
kernels started side by side (the test workers', two `make run`s, the sandbox's versions beside
them) can pick the same port, and one dies with "ZMQError: Address already in use"
(papermill#511; seen in this suite on 2026-12-07). A kernel on socket files in a folder of its
own shares nothing. ``manager_class`` is what `make run` hands papermill; ``python -m
kagglekit.tools.kernelsockets NOTEBOOK OUTPUT --kernel NAME --cwd FOLDER`` is papermill's own
command with it (the sandbox's).
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

SOCKET_PATH_MAX = 100  # a Unix socket's path holds 104 bytes on macOS, 108 on Linux; the kernel adds "-<n>"


def manager_class(folder: Path):
    """A kernel manager class whose kernels listen on ``folder``/kernel-<n>; papermill's own (TCP) where
    ``folder`` is too deep for a socket's path. A class, not a manager: papermill shuts down only the kernels
    of the managers it makes (one handed in is left running), and the manager removes the socket files."""
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default
    sockets = str(Path(folder) / "kernel")
    if len(sockets) > SOCKET_PATH_MAX - 3:
        return AsyncKernelManager

    class InFolder(AsyncKernelManager):
        @default("transport")
        def _transport(self) -> str:
            return "ipc"

        @default("ip")
        def _sockets(self) -> str:
            return sockets
    return InFolder


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
                                   progress_bar=False, kernel_manager_class=manager_class(Path(folder)))


if __name__ == "__main__":
    main()
