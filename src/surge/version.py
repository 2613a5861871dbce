"""The version surge reports (in checkpoints and `surge.__version__`)."""

__version__ = "0.1.0"
