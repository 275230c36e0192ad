"""all_reduce of a float32 tensor (default 64 MiB) on sncl and on gloo, same processes,
same data; prints the median time per call of each and the ratio.

  PYTHONPATH=<build>/python /usr/bin/python3 bench_allreduce.py [--procs 2] [--mib 64] [--iters 10] [--pin]
Starts its processes itself, meeting over tcp:// on loopback. --pin binds each process to
one core (rank modulo the cores), as a launcher's --cpu-bind=cores does."""
import argparse
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def timed(t, group, iters):
    times = []
    for i in range(iters + 2):  # two warm-up calls
        dist.barrier(group=group)
        t0 = time.perf_counter()
        dist.all_reduce(t, group=group)
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def worker(rank, args, port, out):
    os.environ.setdefault("SNCL_SOCKET_IFNAME", "lo")
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
        torch.set_num_threads(1)
    import sncl_torch  # noqa: F401
    dist.init_process_group("sncl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.procs)
    gloo = dist.new_group(backend="gloo")
    n = args.mib * (1 << 20) // 4
    t = torch.full((n,), float(rank + 1))
    s = timed(t, None, args.iters)
    expect = args.procs * (args.procs + 1) / 2 * args.procs ** (args.iters + 1)  # sums compound each call
    ok = bool(torch.all(t == t[0])) and abs(t[0].item() - expect) <= 1e-6 * expect
    t = torch.full((n,), float(rank + 1))
    g = timed(t, gloo, args.iters)
    if rank == 0:
        out.put((s, g, ok))
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--mib", type=int, default=64)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--pin", action="store_true", help="one core per process")
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, args, port, out)) for r in range(args.procs)]
    for pr in procs:
        pr.start()
    s, g, ok = out.get(timeout=600)
    for pr in procs:
        pr.join()
    gbs = lambda sec: args.mib / 1024 / sec  # noqa: E731
    print(f"all_reduce {args.mib} MiB float32, {args.procs} processes{', a core each' if args.pin else ''}, "
          f"median of {args.iters}:")
    print(f"  sncl {s * 1e3:8.2f} ms  ({gbs(s):.2f} GiB/s algorithm bandwidth){'' if ok else '  WRONG RESULT'}")
    print(f"  gloo {g * 1e3:8.2f} ms  ({gbs(g):.2f} GiB/s)")
    print(f"  sncl is {g / s:.2f}x faster")


if __name__ == "__main__":
    main()
