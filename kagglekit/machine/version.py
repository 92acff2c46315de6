"""The kit's version, on the ground floor: checkpoints, cache keys, the env report and the build
record it without importing the package face (``kagglekit/__init__.py`` re-exports it).
pyproject.toml's version is the same string (tests/test_architecture.py checks)."""
__version__ = "0.1.0"
