"""Every op of torch.distributed on the sncl backend (run by test_torch_backend.py --ops):
each must give the result computed here from every rank's inputs, or raise a RuntimeError
naming the op. The list of ops comes from torch itself, so an op this file does not
exercise fails the test."""
import torch
import torch.distributed as dist

# Functions of torch.distributed that are not communication ops.
NOT_OPS = {"destroy_process_group", "dist_backend", "group", "init_process_group", "register_rendezvous_handler",
           "rendezvous", "supports_complex"}
NOT_OP_PREFIXES = ("get_", "is_", "set_debug_level")


def torch_ops():
    return {n for n in dir(dist) if not n.startswith("_") and n[0].islower() and callable(getattr(dist, n))
            and n not in NOT_OPS and not n.startswith(NOT_OP_PREFIXES)}


def local_reduce(ts, op):
    R = dist.ReduceOp
    acc = ts[0].clone()
    for t in ts[1:]:
        if op == R.SUM:
            acc = (acc | t) if acc.dtype == torch.bool else (acc + t)
        elif op == R.PRODUCT:
            acc = (acc & t) if acc.dtype == torch.bool else (acc * t)
        elif op == R.MIN:
            acc = torch.minimum(acc, t)
        elif op == R.MAX:
            acc = torch.maximum(acc, t)
        elif op == R.BAND:
            acc = acc & t
        elif op == R.BOR:
            acc = acc | t
        elif op == R.BXOR:
            acc = acc ^ t
    return acc


def run(rank, world, failures, check, data):
    R = dist.ReduceOp
    covered = set()

    def expect_error(name, call, word):
        covered.add(name)
        try:
            call()
            failures.append(f"{name}: no error")
        except RuntimeError as e:
            if word not in str(e):
                failures.append(f"{name}: the error does not name {word}: {e}")

    every = lambda n, dtype, salt=0: [data(r, n, dtype, salt) for r in range(world)]  # noqa: E731
    n = 101  # prime

    # Reductions sncl lacks natively (bitwise ops, int16, bool sums) and the usual ones.
    covered.add("all_reduce")
    for dtype in [torch.int32, torch.int64, torch.uint8, torch.int8, torch.int16, torch.bool]:
        for op in [R.BAND, R.BOR, R.BXOR, R.SUM, R.MIN, R.MAX, R.PRODUCT]:
            t = data(rank, n, dtype, 3)
            dist.all_reduce(t, op=op)
            check(f"all_reduce {dtype} {op}", t, local_reduce(every(n, dtype, 3), op))
    expect_error("all_reduce", lambda: dist.all_reduce(torch.ones(3), op=R.BXOR), "BXOR")
    expect_error("all_reduce", lambda: dist.all_reduce(torch.ones(3, dtype=torch.bool), op=R.AVG), "AVG")
    t = torch.view_as_complex(data(rank, 2 * n, torch.float32).view(n, 2).contiguous())
    dist.all_reduce(t)
    check("all_reduce complex64", t, sum(torch.view_as_complex(x.view(n, 2).contiguous())
                                         for x in every(2 * n, torch.float32)))

    covered.add("all_reduce_coalesced")
    ts = [data(rank, 7, torch.int16, 1), data(rank, 0, torch.int16, 2), data(rank, 5, torch.int16, 3)]
    dist.all_reduce_coalesced(ts, op=R.BOR)
    check("all_reduce_coalesced int16 BOR", ts,
          [local_reduce(every(k, torch.int16, s), R.BOR) for k, s in ((7, 1), (0, 2), (5, 3))])

    covered.add("all_reduce_multigpu")
    t = data(rank, n, torch.float32)
    dist.all_reduce_multigpu([t])
    check("all_reduce_multigpu", t, local_reduce(every(n, torch.float32), R.SUM))

    covered.update({"reduce", "reduce_multigpu"})
    for dst, op, dtype in [(1, R.BXOR, torch.int64), (0, R.SUM, torch.int16), (world - 1, R.MAX, torch.float64)]:
        t = data(rank, n, dtype, 4)
        dist.reduce(t, dst=dst, op=op)
        check(f"reduce {dtype} {op} to {dst}", t, local_reduce(every(n, dtype, 4), op) if rank == dst
              else data(rank, n, dtype, 4))
    t = data(rank, n, torch.float32)
    dist.reduce_multigpu([t], dst=0)
    if rank == 0:
        check("reduce_multigpu", t, local_reduce(every(n, torch.float32), R.SUM))

    covered.update({"broadcast", "broadcast_multigpu"})
    for dtype in [torch.int16, torch.bool, torch.complex64, torch.float32]:
        t = data(rank, n, torch.float32).to(dtype)
        dist.broadcast(t, src=world - 1)
        check(f"broadcast {dtype}", t, data(world - 1, n, torch.float32).to(dtype))
    t = data(rank, n, torch.int32)
    dist.broadcast_multigpu([t], src=0)
    check("broadcast_multigpu", t, data(0, n, torch.int32))

    covered.update({"all_gather", "all_gather_multigpu", "all_gather_into_tensor", "all_gather_coalesced"})
    outs = [torch.zeros(n, dtype=torch.bool) for _ in range(world)]
    dist.all_gather(outs, data(rank, n, torch.bool))
    check("all_gather bool", outs, every(n, torch.bool))
    outs = [[torch.zeros(n) for _ in range(world)]]
    dist.all_gather_multigpu(outs, [data(rank, n, torch.float32)])
    check("all_gather_multigpu", outs[0], every(n, torch.float32))
    out = torch.zeros(world * n, dtype=torch.int16)
    dist.all_gather_into_tensor(out, data(rank, n, torch.int16))
    check("all_gather_into_tensor", out, torch.cat(every(n, torch.int16)))
    outs = [[torch.zeros(k) for _ in range(world)] for k in (3, 0, 11)]
    dist.all_gather_coalesced(outs, [data(rank, k, torch.float32, k) for k in (3, 0, 11)])
    for lst, k in zip(outs, (3, 0, 11)):
        check(f"all_gather_coalesced {k}", lst, every(k, torch.float32, k))

    covered.update({"reduce_scatter", "reduce_scatter_multigpu", "reduce_scatter_tensor"})
    sizes = [2 * p + 1 for p in range(world)]  # uneven: block p has 2p+1 elements
    for op, dtype in [(R.SUM, torch.float32), (R.BXOR, torch.int32), (R.MAX, torch.int16)]:
        out = torch.zeros(sizes[rank], dtype=dtype)
        dist.reduce_scatter(out, [data(rank, sizes[p], dtype, p) for p in range(world)], op=op)
        check(f"reduce_scatter uneven {dtype} {op}", out, local_reduce(every(sizes[rank], dtype, rank), op))
    out = torch.zeros(n, dtype=torch.int64)
    dist.reduce_scatter_multigpu([out], [[data(rank, n, torch.int64, p) for p in range(world)]], op=R.BAND)
    check("reduce_scatter_multigpu BAND", out, local_reduce(every(n, torch.int64, rank), R.BAND))
    out = torch.zeros(n, dtype=torch.uint8)
    dist.reduce_scatter_tensor(out, data(rank, world * n, torch.uint8), op=R.BOR)
    full = local_reduce(every(world * n, torch.uint8), R.BOR)
    check("reduce_scatter_tensor BOR", out, full[rank * n:(rank + 1) * n])

    covered.update({"all_to_all", "all_to_all_single"})
    ins = [data(rank, 3 + p, torch.int16, p) for p in range(world)]
    outs = [torch.zeros(3 + rank, dtype=torch.int16) for _ in range(world)]
    dist.all_to_all(outs, ins)
    check("all_to_all int16", outs, [data(p, 3 + rank, torch.int16, rank) for p in range(world)])
    # rank r sends (r + p) % 3 rows (some zero) of 5 elements to rank p
    rows = lambda src, dst: (src + dst) % 3  # noqa: E731
    x = torch.cat([data(rank, 5 * rows(rank, p), torch.float32, p) for p in range(world)]).view(-1, 5)
    out = torch.zeros(sum(rows(p, rank) for p in range(world)), 5)
    dist.all_to_all_single(out, x, output_split_sizes=[rows(p, rank) for p in range(world)],
                           input_split_sizes=[rows(rank, p) for p in range(world)])
    check("all_to_all_single splits", out,
          torch.cat([data(p, 5 * rows(p, rank), torch.float32, rank) for p in range(world)]).view(-1, 5))

    covered.update({"gather", "scatter"})
    out = [torch.zeros(n, dtype=torch.int16) for _ in range(world)] if rank == 1 else None
    dist.gather(data(rank, n, torch.int16), out, dst=1)
    if rank == 1:
        check("gather int16", out, every(n, torch.int16))
    out = torch.zeros(n, dtype=torch.bool)
    dist.scatter(out, [data(0, n, torch.bool, p) for p in range(world)] if rank == 0 else None, src=0)
    check("scatter bool", out, data(0, n, torch.bool, rank))

    # Objects: pickled into uint8 tensors by torch, moved by broadcast, all_gather, gather, scatter.
    covered.update({"all_gather_object", "gather_object", "broadcast_object_list", "scatter_object_list"})
    obj = {"rank": rank, "payload": list(range(rank * 50))}
    want = [{"rank": r, "payload": list(range(r * 50))} for r in range(world)]
    got = [None] * world
    dist.all_gather_object(got, obj)
    if got != want:
        failures.append(f"all_gather_object: {got}")
    got = [None] * world if rank == 0 else None
    dist.gather_object(obj, got, dst=0)
    if rank == 0 and got != want:
        failures.append(f"gather_object: {got}")
    lst = [obj, "x" * (rank + 3)]
    dist.broadcast_object_list(lst, src=1)
    if lst != [want[1], "xxxx"]:
        failures.append(f"broadcast_object_list: {lst}")
    got = [None]
    dist.scatter_object_list(got, want if rank == 0 else None, src=0)
    if got != [want[rank]]:
        failures.append(f"scatter_object_list: {got}")

    covered.update({"send", "recv", "isend", "irecv", "batch_isend_irecv"})  # details: --p2p
    right, left = (rank + 1) % world, (rank - 1) % world
    b = torch.zeros(n, dtype=torch.int16)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.irecv, b, left), dist.P2POp(dist.isend, data(rank, n, torch.int16),
                                                                                   right)])
    for r in reqs:
        r.wait()
    check("batch_isend_irecv int16", b, data(left, n, torch.int16))
    if rank == 0:
        dist.send(data(rank, n, torch.bool), 1)
    elif rank == 1:
        b = torch.zeros(n, dtype=torch.bool)
        dist.recv(b, 0)
        check("send/recv bool", b, data(0, n, torch.bool))
    expect_error("recv", lambda: dist.recv(torch.zeros(1)), "recvAnysource")  # no source: gloo only

    covered.add("barrier")
    dist.barrier()
    expect_error("monitored_barrier", lambda: dist.monitored_barrier(), "onitored")  # gloo only

    covered.update({"new_group", "new_subgroups", "new_subgroups_by_enumeration"})
    sub = dist.new_group(ranks=list(range(world))[::-1])
    t = data(rank, n, torch.int32)
    dist.all_reduce(t, op=R.BXOR, group=sub)
    check("new_group all_reduce", t, local_reduce(every(n, torch.int32), R.BXOR))
    try:
        mine, _ = dist.new_subgroups(group_size=1)
    except ValueError as e:  # torch 1.13 refuses without CUDA, before any backend call
        if "CUDA" not in str(e):
            raise
        mine = [g for g in [dist.new_group([r]) for r in range(world)] if dist.get_rank(g) == 0][0]
    t = data(rank, n, torch.float32)
    dist.all_reduce(t, group=mine)
    check("new_subgroups of 1", t, data(rank, n, torch.float32))
    halves = [list(range(0, world, 2)), list(range(1, world, 2))]
    try:
        mine, _ = dist.new_subgroups_by_enumeration(halves)
    except ValueError as e:  # as above
        if "CUDA" not in str(e):
            raise
        mine = [dist.new_group(h) for h in halves][rank % 2]
    t = data(rank, n, torch.int64)
    dist.all_reduce(t, group=mine)
    check("new_subgroups_by_enumeration", t, local_reduce([data(r, n, torch.int64) for r in halves[rank % 2]], R.SUM))

    missing = torch_ops() - covered
    if missing:
        failures.append(f"ops of torch.distributed this test does not exercise: {sorted(missing)}")
