"""The sncl torch.distributed backend against gloo on 2 processes: every collective the
backend serves, on the same inputs, must give gloo's results (inputs are small integers,
so floating sums are exact in any order). Also: asynchronous Works and futures, clear
errors for unsupported dtypes and ops, and a lost rank surfacing as an exception.
--ops goes through every op of torch.distributed (test_torch_ops.py); --p2p through
isend/irecv with tags on 4 processes (SNCL_TEST_WORLD=n for another count), and
--p2p-mismatch through receives that meet another tag's message of another size.

  PYTHONPATH=<build>/python /usr/bin/python3 test_torch_backend.py \
      [--collectives | --ops | --p2p | --p2p-mismatch | --lost-rank]
Exits 77 (skipped) when torch is not installed."""
import datetime
import gc
import os
import random
import sys
import tempfile
import time
import traceback
import warnings

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError:
    print("SKIP: torch is not installed (apt install python3-torch)")
    sys.exit(77)

WORLD = 2
failures = []


def check(name, got, want):
    if isinstance(got, (list, tuple)):
        for i, (g, w) in enumerate(zip(got, want)):
            check(f"{name}[{i}]", g, w)
        return
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        failures.append(f"{name}: sncl {got.flatten()[:8].tolist()} != gloo {want.flatten()[:8].tolist()}")


def data(rank, n, dtype, salt=0):
    g = torch.Generator().manual_seed(1000 * rank + salt)
    hi = 2 if dtype == torch.bool else 8
    return torch.randint(0, hi, (n,), generator=g).to(dtype)


def both(fn):
    """fn(group) on sncl (the default group) and on gloo; returns (sncl, gloo) results."""
    return fn(None), fn(both.gloo)


def run_collectives(rank):
    R = dist.ReduceOp
    n = 1000
    dtypes = [torch.float32, torch.float64, torch.int32, torch.int64, torch.uint8, torch.int8, torch.float16,
              torch.bfloat16]
    for dtype in dtypes:
        for op in [R.SUM, R.MIN, R.MAX] + ([R.PRODUCT] if dtype.is_floating_point else []):
            def ar(g, dtype=dtype, op=op):
                t = data(rank, n, dtype)
                dist.all_reduce(t, op=op, group=g)
                return t
            s = ar(None)
            try:
                w = ar(both.gloo)
            except RuntimeError:  # gloo lacks the dtype: the reduction computed here instead
                ref = [data(r, n, dtype).double() for r in range(WORLD)]
                w = {R.SUM: sum(ref), R.MIN: torch.minimum(*ref), R.MAX: torch.maximum(*ref),
                     R.PRODUCT: ref[0] * ref[1]}[op].to(dtype)
            check(f"all_reduce {dtype} {op}", s, w)

    # AVG and PREMUL_SUM, which gloo lacks: against gloo's SUM, scaled.
    t = data(rank, n, torch.float32)
    dist.all_reduce(t, op=R.AVG)
    ref = data(rank, n, torch.float32)
    dist.all_reduce(ref, group=both.gloo)
    check("all_reduce AVG", t, ref / WORLD)
    t = data(rank, n, torch.float32)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    check("all_reduce PREMUL_SUM", t, ref * 0.5)

    def coalesced(g):
        ts = [data(rank, 10, torch.float32), data(rank, 7, torch.float32, 1)]
        dist.all_reduce_coalesced(ts, group=g)
        return ts
    check("all_reduce_coalesced", *both(coalesced))

    def bcast(g):
        t = data(rank, n, torch.int64)
        dist.broadcast(t, src=1, group=g)
        return t
    check("broadcast", *both(bcast))

    def reduce(g):
        t = data(rank, n, torch.float32)
        dist.reduce(t, dst=1, op=R.MAX, group=g)
        return t if rank == 1 else torch.zeros(1)
    check("reduce", *both(reduce))

    def allgather(g):
        out = [torch.zeros(n, dtype=torch.int32) for _ in range(WORLD)]
        dist.all_gather(out, data(rank, n, torch.int32), group=g)
        return out
    check("all_gather", *both(allgather))

    out = torch.zeros(WORLD * n, dtype=torch.float64)
    dist._all_gather_base(out, data(rank, n, torch.float64))
    ref = [torch.zeros(n, dtype=torch.float64) for _ in range(WORLD)]  # gloo lacks _allgather_base
    dist.all_gather(ref, data(rank, n, torch.float64), group=both.gloo)
    check("_all_gather_base", out, torch.cat(ref))

    def reduce_scatter(g):
        out = torch.zeros(n, dtype=torch.float32)
        dist.reduce_scatter(out, [data(rank, n, torch.float32, p) for p in range(WORLD)], group=g)
        return out
    # gloo has no reduce_scatter in 1.13: the reference is an all_reduce, sliced.
    s = reduce_scatter(None)
    full = torch.cat([data(rank, n, torch.float32, p) for p in range(WORLD)])
    dist.all_reduce(full, group=both.gloo)
    check("reduce_scatter", s, full[rank * n:(rank + 1) * n])
    out = torch.zeros(n, dtype=torch.float32)
    dist._reduce_scatter_base(out, torch.cat([data(rank, n, torch.float32, p) for p in range(WORLD)]))
    check("_reduce_scatter_base", out, full[rank * n:(rank + 1) * n])

    def a2a_single(g):
        out = torch.zeros(WORLD * n, dtype=torch.int64)
        dist.all_to_all_single(out, data(rank, WORLD * n, torch.int64), group=g)
        return out
    check("all_to_all_single", *both(a2a_single))

    def a2a_splits(g):
        # rank r sends r+1+p rows to rank p; rows of 3 elements
        ins = [rank + 1 + p for p in range(WORLD)]
        outs = [p + 1 + rank for p in range(WORLD)]
        x = data(rank, sum(ins) * 3, torch.float32).view(-1, 3)
        out = torch.zeros(sum(outs), 3)
        dist.all_to_all_single(out, x, output_split_sizes=outs, input_split_sizes=ins, group=g)
        return out
    check("all_to_all_single splits", *both(a2a_splits))

    def a2a_list(g):
        ins = [data(rank, 5 + p, torch.float32, p) for p in range(WORLD)]
        outs = [torch.zeros(5 + rank) for _ in range(WORLD)]
        dist.all_to_all(outs, ins, group=g)
        return outs
    # gloo has no all_to_all with lists: the reference is what rank p sends to this rank.
    check("all_to_all", a2a_list(None), [data(p, 5 + rank, torch.float32, rank) for p in range(WORLD)])

    def gather(g):
        out = [torch.zeros(n) for _ in range(WORLD)] if rank == 0 else None
        dist.gather(data(rank, n, torch.float32), out, dst=0, group=g)
        return out if rank == 0 else [torch.zeros(1)]
    check("gather", *both(gather))

    def scatter(g):
        out = torch.zeros(n, dtype=torch.int32)
        src = [data(1, n, torch.int32, p) for p in range(WORLD)] if rank == 1 else None
        dist.scatter(out, src, src=1, group=g)
        return out
    check("scatter", *both(scatter))

    def p2p(g):
        t = data(rank, n, torch.float32)
        if rank == 0:
            dist.send(t, 1, group=g)
            dist.recv(t, 1, group=g)
        else:
            r = torch.zeros(n)
            dist.recv(r, 0, group=g)
            dist.send(t + r, 0, group=g)
        return t
    check("send/recv", *both(p2p))
    dist.barrier()

    # Asynchronous: a Work, its future, and results after wait.
    t = data(rank, 1 << 20, torch.float32)
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future()
    got = fut.wait()[0]
    if not (work.is_completed() and work.wait(datetime.timedelta(seconds=60)) and got is not None):
        failures.append("async all_reduce: work not completed after its future")
    ref = data(rank, 1 << 20, torch.float32)
    dist.all_reduce(ref, group=both.gloo)
    check("async all_reduce", t, ref)

    # Unsupported dtype and op: Python errors naming them.
    for what, call, word in [
        ("int16 AVG", lambda: dist.all_reduce(torch.ones(4, dtype=torch.int16), op=R.AVG), "AVG"),
        ("float BAND", lambda: dist.all_reduce(torch.ones(4), op=R.BAND), "BAND"),
    ]:
        try:
            call()
            failures.append(f"{what}: no error")
        except RuntimeError as e:
            if word not in str(e):
                failures.append(f"{what}: error does not name it: {e}")
    dist.barrier()


def ring_exchange(rank, world, sizes, tags, recv_order, name, dtype=torch.float32, batch=False):
    """Each rank isends len(tags) tensors with distinct tags to its right, irecvs them from
    its left posted in recv_order, then waits on all in a shuffled order."""
    right, left = (rank + 1) % world, (rank - 1) % world
    ops, works, bufs = [], [], {}
    for sz, tag in zip(sizes, tags):
        ops.append(dist.P2POp(dist.isend, data(rank, sz, dtype, tag), right, tag=tag))
    for i in recv_order:
        bufs[i] = torch.full((sizes[i],), 99, dtype=dtype)
        ops.append(dist.P2POp(dist.irecv, bufs[i], left, tag=tags[i]))
    if batch:
        works = dist.batch_isend_irecv(ops)
    else:
        works = [o.op(o.tensor, o.peer, tag=o.tag) for o in ops]
    random.Random(rank).shuffle(works)
    for w in works:
        w.wait()
    for i, (sz, tag) in enumerate(zip(sizes, tags)):
        check(f"{name}: message of tag {tag} ({sz} elements)", bufs[i], data(left, sz, dtype, tag))


def run_p2p(rank, world):
    rng = random.Random(17)  # the same draws on every rank
    # The ring at 16 MiB: isend right, irecv left, wait on the send first.
    n = 4 << 20
    got = torch.zeros(n)
    right, left = (rank + 1) % world, (rank - 1) % world
    ws = [dist.isend(data(rank, n, torch.float32, 1), right), dist.irecv(got, left)]
    for w in ws:
        w.wait()
    check("ring 16 MiB", got, data(left, n, torch.float32, 1))

    # Distinct tags, receives posted in another order: equal sizes (a swap would go
    # unnoticed by sncl) and random ones (odd, prime, zero, large).
    ring_exchange(rank, world, [1001] * 4, [4, 1, 3, 2], [3, 1, 0, 2], "equal sizes, reversed receives")
    choices = [0, 1, 2, 7, 13, 997, 4099, 65537, (1 << 20) + 3]
    for rnd in range(4):
        k = rng.randint(1, 6)
        tags = rng.sample(range(1000), k)
        sizes = [rng.choice(choices) for _ in range(k)]
        ring_exchange(rank, world, sizes, tags, rng.sample(range(k), k), f"random round {rnd}",
                      dtype=rng.choice([torch.float32, torch.int64, torch.uint8, torch.float16]))
    ring_exchange(rank, world, [5, 0, 1 << 20], [7, 8, 9], [2, 0, 1], "batch_isend_irecv", batch=True)

    # The ranks flush at different moments. Pairs (0,1), (2,3): the even rank sends tags 1
    # and 2 and waits on both; the odd rank waits on tag 2 before it posts tag 1. Then the
    # other way: the odd rank sends tag 2 and waits, then tag 1; the even rank posts tag 1,
    # then tag 2, and waits on both. 4 MiB each, more than a send can leave in the transport.
    m = (1 << 20) + 1
    if world % 2 == 0:
        peer = rank ^ 1
        if rank % 2 == 0:
            ws = [dist.isend(data(rank, m, torch.float32, t), peer, tag=t) for t in (1, 2)]
            for w in ws:
                w.wait()
            bufs = [torch.zeros(m), torch.zeros(m)]
            ws = [dist.irecv(bufs[0], peer, tag=1), dist.irecv(bufs[1], peer, tag=2)]
            for w in ws:
                w.wait()
            check("late sender: tag 1", bufs[0], data(peer, m, torch.float32, 1))
            check("late sender: tag 2", bufs[1], data(peer, m, torch.float32, 2))
        else:
            for t in (2, 1):
                b = torch.zeros(m)
                dist.irecv(b, peer, tag=t).wait()
                check(f"early waiter: tag {t}", b, data(peer, m, torch.float32, t))
            for t in (2, 1):
                dist.isend(data(rank, m, torch.float32, t), peer, tag=t).wait()

    # Posted p2p is issued before the next collective; blocking send/recv with tags.
    b = torch.zeros(333)
    ws = [dist.irecv(b, left, tag=5), dist.isend(data(rank, 333, torch.float32, 5), right, tag=5)]
    s = torch.ones(8)
    dist.all_reduce(s)
    for w in ws:
        w.wait()
    check("isend/irecv around all_reduce", b, data(left, 333, torch.float32, 5))
    check("all_reduce after isend/irecv", s, torch.full((8,), float(world)))
    if rank % 2 == 0 and rank + 1 < world:
        dist.send(data(rank, 31, torch.int32, 3), rank + 1, tag=3)
        dist.send(data(rank, 37, torch.int32, 4), rank + 1, tag=4)
    elif rank % 2 == 1:
        for t, k in ((3, 31), (4, 37)):
            b = torch.zeros(k, dtype=torch.int32)
            dist.recv(b, rank - 1, tag=t)
            check(f"blocking recv tag {t}", b, data(rank - 1, k, torch.int32, t))


def run_p2p_mismatch(rank):
    """The receiver waits on tag 2 before posting tag 1, and the sizes differ: its receive
    meets tag 1's message and must fail naming itself, not hang or deliver it."""
    if rank == 0:
        ws = [dist.isend(torch.ones(10), 1, tag=1), dist.isend(torch.ones(20), 1, tag=2)]
        for w in ws:
            try:
                w.wait()
            except RuntimeError:
                pass  # the pair failed: whether a send saw it depends on timing
        return
    t0 = time.time()
    b = torch.zeros(20)
    try:
        dist.irecv(b, 0, tag=2).wait()
        failures.append("irecv of tag 2 met tag 1's message of another size and did not fail")
    except RuntimeError as e:
        msg = str(e)
        if "irecv from rank 0 (tag 2" not in msg or "another tag" not in msg:
            failures.append(f"the error does not name the receive and the cause: {msg}")
        print(f"rank 1: failed after {time.time() - t0:.1f} s: {msg.splitlines()[0][:300]}")
    if time.time() - t0 > 20:
        failures.append("the mismatch surfaced only at the deadline")
    if not torch.equal(b, torch.zeros(20)):
        failures.append("the failed receive wrote into its tensor")


def worker(rank, init, mode, world, result):
    os.environ.setdefault("SNCL_SOCKET_IFNAME", "lo")
    warnings.filterwarnings("ignore", category=UserWarning)  # torch's deprecation notes
    import sncl_torch  # noqa: F401  registers "sncl"; after torch
    try:
        if mode == "lost-rank":
            dist.init_process_group("sncl", init_method=init, rank=rank, world_size=world,
                                    timeout=datetime.timedelta(seconds=10))
            dist.barrier()
            if rank == 1:
                os._exit(0)  # a lost rank: no goodbye
            t0 = time.time()
            try:
                dist.all_reduce(torch.ones(1 << 16))
                failures.append("all_reduce with a lost peer did not fail")
            except RuntimeError as e:
                print(f"rank 0: lost peer surfaced after {time.time() - t0:.1f} s: {str(e).splitlines()[0]}")
            result.put((rank, failures))
            result.close()
            result.join_thread()  # flushed before the hard exit below
            os._exit(0)  # the group's peer is gone: no orderly shutdown to wait for
        if mode == "p2p-mismatch":
            dist.init_process_group("sncl", init_method=init, rank=rank, world_size=world,
                                    timeout=datetime.timedelta(seconds=30))
            run_p2p_mismatch(rank)
            result.put((rank, failures))
            result.close()
            result.join_thread()
            os._exit(0)  # the pair failed on purpose: no orderly shutdown to wait for
        dist.init_process_group("sncl", init_method=init, rank=rank, world_size=world)
        both.gloo = dist.new_group(backend="gloo")
        if mode == "collectives":
            run_collectives(rank)
        elif mode == "ops":
            import test_torch_ops
            test_torch_ops.run(rank, world, failures, check, data)
        else:
            run_p2p(rank, world)
        dist.barrier()
        # Gloo's worker threads are joined here, while Python runs: a tensor they free
        # during interpreter shutdown aborts the process (torch 1.13).
        dist.destroy_process_group(both.gloo)
        both.gloo = None
        gc.collect()
        dist.destroy_process_group()
    except Exception:
        failures.append(traceback.format_exc())
    result.put((rank, failures))


def main():
    modes = {"collectives": 2, "ops": 2, "p2p": 4, "p2p-mismatch": 2, "lost-rank": 2}
    mode = next((m for m in modes if f"--{m}" in sys.argv), "collectives")
    world = int(os.environ.get("SNCL_TEST_WORLD", modes[mode]))
    try:
        import sncl_torch  # noqa: F401
    except ImportError as e:
        print(f"SKIP: the sncl_torch extension is not on PYTHONPATH (built with SNCL_BUILD_TORCH=ON?): {e}")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as tmp:
        init = f"file://{tmp}/rendezvous"
        ctx = mp.get_context("spawn")
        result = ctx.Queue()
        procs = [ctx.Process(target=worker, args=(r, init, mode, world, result)) for r in range(world)]
        for p in procs:
            p.start()
        wanted = 1 if mode == "lost-rank" else world
        reports = [result.get(timeout=180) for _ in range(wanted)]
        for p in procs:
            p.join(timeout=60)
    bad = [(r, f) for r, fs in reports for f in fs]
    for r, f in bad:
        print(f"rank {r}: FAIL {f}")
    if bad:
        sys.exit(1)
    print(f"OK: {mode}")


if __name__ == "__main__":
    main()
