"""sncl as a torch.distributed backend for CPU tensors.

Import this module (after torch) in every process, then
``torch.distributed.init_process_group("sncl", ...)``.
"""
import torch  # noqa: F401  (the extension needs torch's libraries loaded first)
import torch.distributed as dist

from ._C import ProcessGroupSNCL

__all__ = ["ProcessGroupSNCL"]

if "SNCL" not in dist.Backend._plugins:
    dist.Backend.register_backend("sncl", ProcessGroupSNCL)
