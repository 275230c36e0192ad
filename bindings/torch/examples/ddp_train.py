"""DistributedDataParallel training on the sncl backend, checked against gloo.

Each process trains the same small MLP twice from the same seed on its own shard of
synthetic data: once with DDP over the sncl process group (the default group, made by
init_process_group("sncl")), once over a gloo group. Rank 0 prints both loss curves and
fails when they differ by more than --rtol (0: bit-identical).

  torchrun --nproc_per_node 2 --redirects 1 --tee 1 ddp_train.py      (Python 3.11 torchrun)
  SNCL_TRANSPORT=bus torchrun ...                                     (if sncl has that transport)
Needs PYTHONPATH to hold the built sncl_torch package."""
import argparse
import gc
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import sncl_torch  # noqa: F401  registers "sncl"


def train(group, gloo, rank, args):
    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4))
    # Small buckets: several all-reduces per step, overlapping the backward pass.
    ddp = DDP(model, process_group=group, bucket_cap_mb=0.1)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    data = torch.Generator().manual_seed(args.seed + 1 + rank)
    # Labels from a fixed random teacher, so that there is something to learn.
    teacher = torch.randn(32, 4, generator=torch.Generator().manual_seed(args.seed))
    losses = []
    for _ in range(args.steps):
        x = torch.randn(64, 32, generator=data)
        y = (x @ teacher).argmax(dim=1)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        # The global mean loss, over gloo for both runs, so that only training differs.
        mean = loss.detach().clone()
        dist.all_reduce(mean, group=gloo)
        losses.append(mean.item() / dist.get_world_size())
    return losses


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--rtol", type=float, default=1e-5)
    args = p.parse_args()
    os.environ.setdefault("SNCL_SOCKET_IFNAME", "lo")
    dist.init_process_group("sncl")  # env:// from torchrun
    rank = dist.get_rank()
    gloo = dist.new_group(backend="gloo")
    sncl_losses = train(None, gloo, rank, args)
    gloo_losses = train(gloo, gloo, rank, args)
    worst = 0.0
    if rank == 0:
        print(f"{'step':>4} {'sncl loss':>12} {'gloo loss':>12} {'rel diff':>9}")
        for i, (s, g) in enumerate(zip(sncl_losses, gloo_losses)):
            rel = abs(s - g) / max(abs(g), 1e-30)
            worst = max(worst, rel)
            print(f"{i:4d} {s:12.8f} {g:12.8f} {rel:9.2e}")
        ok = worst <= args.rtol
        print(f"{'OK' if ok else 'FAIL'}: {dist.get_world_size()} processes, {args.steps} steps, "
              f"largest relative loss difference {worst:.2e} (allowed {args.rtol:.0e})")
    status = torch.tensor([1 if rank != 0 or worst <= args.rtol else 0])
    dist.all_reduce(status, op=dist.ReduceOp.MIN, group=gloo)
    # Gloo's worker threads must be joined while Python still runs: a tensor they free
    # during interpreter shutdown takes the GIL there and aborts the process (torch 1.13).
    dist.destroy_process_group(gloo)
    del gloo
    gc.collect()
    dist.destroy_process_group()
    sys.exit(0 if status.item() == 1 else 1)


if __name__ == "__main__":
    main()
