"""Sharded sampling over NCCL against what tensor-parallel engines do today,
one process a GPU, every GPU of the machine (or --ranks), one run.

Each rank holds logits[:, r*V/TP : (r+1)*V/TP] (float32 or bfloat16, random
"LLM-like" rows: torch_sampling.llm_like) and samples one decode step with
top-k 50, top-p 0.9, temperature 0.8, per-row seeds and positions:

  sharded    ingot.sample_sharded_nccl: ingot's steps with NCCL collectives
             of a few hundred bytes a row between them (the plan's
             all-gathers and sums), every rank gets the tokens.
  gather     ncclAllGather of the slices into [TP, B, V/TP], the transpose
             into [B, V] (engines' all-gather along the vocabulary), then
             the unsharded ingot.sample on every rank.
  torch      the same all-gather, then torch's sampler: softmax of logits / T,
             top-k, renormalise, top-p (cumulative sum), torch.multinomial.

Check, before timing: sharded and gather give the same tokens on every rank
(bit-identical: ingot's draw does not depend on the split). Timing: each
path as replays of a CUDA graph of 20 calls on every rank (the collectives
keep the ranks in step), median over --replays replays / 20 on rank 0
(bench/gpu_timing.py's graph_time). "bytes" is what one rank receives a
step: the plan's exchanged bytes, against (TP - 1) / TP of the logits.

NCCL comes from libnccl.so.2 through ctypes (the communicator is made here,
not by torch.distributed; ingot uses the same loaded library). Needs torch
with CUDA, ingot built with NCCL, and 1+ GPUs; otherwise it prints
"nccl_sampling: skipped: <why>" and exits 0.

Usage: INGOT_LIBRARY=build/libingot.so PYTHONPATH=python python3 bench/nccl_sampling.py
       [--ranks N] [--dtype f32|bf16] [--replays N] [--smoke] [--json FILE]
"""

import argparse
import ctypes
import json
import os
import sys

NAME = "nccl_sampling"
SHAPES = [(1, 151936), (16, 151936), (64, 151936), (256, 151936), (1, 262144), (64, 262144),
          (256, 262144)]
SMOKE = [(1, 4096), (8, 32768)]
NCCL_TYPES = {"f32": 7, "bf16": 9}  # ncclFloat32, ncclBfloat16


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def skip(why):
    print(f"{NAME}: skipped: {why}")
    sys.exit(0)


def load_nccl():
    nccl = ctypes.CDLL("libnccl.so.2")
    nccl.ncclGetUniqueId.argtypes = [ctypes.POINTER(UniqueId)]
    nccl.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId,
                                      ctypes.c_int]
    nccl.ncclAllGather.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                   ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    nccl.ncclCommDestroy.argtypes = [ctypes.c_void_p]
    return nccl


def torch_sample(torch, logits, k, p, temperature):
    """top-k, then top-p of the renormalised top-k, then a multinomial draw."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    top, ids = probs.topk(k, dim=-1)
    top = top / top.sum(dim=-1, keepdim=True)
    keep = (top.cumsum(dim=-1) - top) < p
    top = top * keep
    pick = torch.multinomial(top, 1)
    return ids.gather(-1, pick).squeeze(-1)


def worker(rank, world, args, ids, results):
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gpu_timing import graph_time
    from torch_sampling import llm_like
    import ingot

    torch.cuda.set_device(rank)
    nccl = load_nccl()
    uid = UniqueId()
    if rank == 0:
        assert nccl.ncclGetUniqueId(ctypes.byref(uid)) == 0
        for _ in range(world - 1):
            ids.put(bytes(uid.internal))
    else:
        uid.internal = ids.get()
    comm = ctypes.c_void_p()
    assert nccl.ncclCommInitRank(ctypes.byref(comm), world, uid, rank) == 0
    dt = torch.float32 if args.dtype == "f32" else torch.bfloat16
    rows = []
    for B, V in (SMOKE if args.smoke else SHAPES):
        Vr = V // world
        V = Vr * world  # a split into equal slices
        torch.manual_seed(1234 + B)  # the same whole logits on every rank
        whole = llm_like(B, V).to(dt)
        mine = whole[:, rank * Vr:(rank + 1) * Vr].contiguous()
        params = dict(top_k=torch.full((B,), 50, dtype=torch.int32, device="cuda"),
                      top_p=torch.full((B,), 0.9, device="cuda"),
                      temperature=torch.full((B,), 0.8, device="cuda"),
                      seed=torch.arange(B, dtype=torch.int64, device="cuda"),
                      position=torch.full((B,), 7, dtype=torch.int64, device="cuda"))
        plan = ingot.sampling_shard_get_plan(B, V, rank * Vr, Vr, num_shards=world,
                                             shard_index=rank, dtype=args.dtype, max_top_k=64,
                                             device="cuda")
        ws = plan.new_nccl_workspace(mine)
        ingot.sampling_sharded_nccl_verify(comm.value, plan)
        tok_sharded = torch.empty(B, dtype=torch.int32, device="cuda")
        tok_gather = torch.empty(B, dtype=torch.int32, device="cuda")
        gathered = torch.empty(world, B, Vr, dtype=dt, device="cuda")
        full = torch.empty(B, V, dtype=dt, device="cuda")
        sample_ws = torch.empty(ingot.sample_workspace_size(B, V, dtype=args.dtype, device="cuda"),
                                dtype=torch.uint8, device="cuda")

        def stream():  # ingot's calls take the current torch stream themselves
            return torch.cuda.current_stream().cuda_stream

        def sharded():
            ingot.sample_sharded_nccl(comm.value, plan, mine, tokens=tok_sharded, workspace=ws,
                                      **params)

        def all_gather():
            assert nccl.ncclAllGather(mine.data_ptr(), gathered.data_ptr(), B * Vr,
                                      NCCL_TYPES[args.dtype], comm, stream()) == 0
            full.view(B, world, Vr).copy_(gathered.transpose(0, 1))

        def gather():
            all_gather()
            ingot.sample(full, tokens=tok_gather, workspace=sample_ws, **params)

        def gather_torch():
            all_gather()
            torch_sample(torch, full, 50, 0.9, 0.8)

        sharded()
        gather()
        torch.cuda.synchronize()
        same = torch.equal(tok_sharded, tok_gather)
        row = dict(B=B, V=V, TP=world, dtype=args.dtype, check="ok" if same else "MISMATCH",
                   bytes_sharded=sum(plan.exchanged_bytes),
                   bytes_gather=(world - 1) * B * Vr * mine.element_size())
        if same:
            for name, fn in (("sharded", sharded), ("gather", gather), ("torch", gather_torch)):
                row[name + "_us"] = graph_time(fn, replays=args.replays)
        rows.append(row)
    nccl.ncclCommDestroy(comm)
    results.put((rank, rows))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=0, help="GPUs to use (default: all)")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        skip("no torch")
    if not torch.cuda.is_available():
        skip("no CUDA device")
    try:
        load_nccl()
    except OSError as e:
        skip(f"no libnccl.so.2 ({e})")
    world = args.ranks or torch.cuda.device_count()
    ctx = mp.get_context("spawn")
    ids, results = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, world, args, ids, results)) for r in range(world)]
    for p in procs:
        p.start()
    got = dict(results.get() for _ in procs)
    for p in procs:
        p.join()
    bad = any(p.exitcode != 0 for p in procs) or len(got) != world
    rows = got.get(0, [])
    for r, rr in got.items():
        bad |= any(x["check"] != "ok" for x in rr)
    print(f"{'case':<34}{'sharded us':>12}{'gather+ingot':>14}{'gather+torch':>14}"
          f"{'bytes sharded':>15}{'bytes gather':>14}  check")
    for x in rows:
        case = f"B={x['B']} V={x['V']} TP={x['TP']} {x['dtype']}"
        t = [f"{x.get(k, float('nan')):.1f}" for k in ("sharded_us", "gather_us", "torch_us")]
        print(f"{case:<34}{t[0]:>12}{t[1]:>14}{t[2]:>14}{x['bytes_sharded']:>15}"
              f"{x['bytes_gather']:>14}  {x['check']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(0), rows=rows), f, indent=1)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
