"""``pylucid.version``: ``__version__`` and PyTorch's ``torch.version.cuda`` / ``hip``
(None: pylucid is built for no CUDA or ROCm)."""

__version__ = "0.1.0"
cuda = None
hip = None
